"""The viewer in a real browser: headless Chromium driven through Selenium (Debian's ``chromium``
and ``chromium-driver``, which CI installs; where either is missing these tests skip and say
why). Keys move between rounds and steps, a tool call unfolds, a deep link opens its round, the
search finds its round, a 2,000-round page renders only what is on screen, no request leaves the
page, and a trace's ``<script>`` stays text. Screenshots of three pages are kept in
``$STEPLOOP_TEST_ARTIFACTS`` (else a pytest temporary directory); they are not compared."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.counterfactual import build
from steploop.effects.cli import main
from tests.support.viewer import (
    CHROMIUM,
    DRIVER,
    NEEDLE,
    PAYLOAD,
    artifacts,
    browser_missing,
    real_requests,
    scripted_trace,
    synthetic_trace,
)

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")
ROUNDS = 5  # four Read rounds, then the answer
ENTER, HOME, END = "\ue007", "\ue011", "\ue010"  # selenium.webdriver.common.keys.Keys


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("pages")
    a = scripted_trace(tmp, ROUNDS, "a")
    b = scripted_trace(tmp, ROUNDS, "b", needle_in=3, payload_in=2)  # other files: other results
    out: dict[str, Path] = {"trace": tmp / "a.html", "diff": tmp / "diff.html", "replay": tmp / "replay.html"}
    assert main(["show", str(a), "--html", str(out["trace"])], out=io.StringIO()) == 0
    assert main(["diff", str(a), str(b), "--html", str(out["diff"])], out=io.StringIO()) == 1
    session = synthetic_trace(tmp / "s.jsonl", 12)
    assert main(["replay", str(session), "--set", "snip_buffer=191500", "--html", str(out["replay"])], out=io.StringIO()) == 1
    return out


def _open(browser: Any, page: Path, fragment: str = "") -> list[dict[str, Any]]:
    """Load a page (a fresh document), wait for its script, and return the console lines."""
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get_log("performance")
    browser.get(page.as_uri() + fragment)
    browser.find_element("css selector", "body[data-rounds]")
    return list(browser.get_log("browser"))


def _requests(browser: Any) -> list[str]:
    """The URLs the browser asked for since the last call (the DevTools network log)."""
    urls = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def _selected(browser: Any) -> int:
    return int(browser.find_element("css selector", "body").get_attribute("data-selected-round"))


def _detail(browser: Any) -> str:
    return str(browser.find_element("id", "detail").text)


def _keys(browser: Any, *keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(browser)  # to the focused element (the page, a step): no click
    for k in keys:
        chain.send_keys(k)
    chain.perform()


@pytest.mark.spec("VIEW-1")
def test_the_page_loads_quietly_and_asks_for_nothing(browser: Any, pages: dict[str, Path]) -> None:
    """Each page logs only its one line, and the browser requests nothing but the file."""
    for page in pages.values():
        console = _open(browser, page)
        assert [c["level"] for c in console] == ["INFO"] and "steploop viewer: drew" in console[0]["message"], console
        assert _requests(browser) == [page.as_uri()]


@pytest.mark.spec("VIEW-1")
def test_the_checks_would_see_a_request_and_an_error(browser: Any, tmp_path: Path) -> None:
    """The checks have teeth: an image on another host is a request in the log (even one the
    CSP then refuses), and the CSP's refusal and a script error are console errors."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><body data-rounds="0"><img src="http://127.0.0.1:9/x.png"><script>noSuchFunction();</script></body>')
    console = _open(browser, bad)
    assert "http://127.0.0.1:9/x.png" in _requests(browser)
    assert any("noSuchFunction" in c["message"] for c in console)
    strict = tmp_path / "strict.html"
    strict.write_text("<!DOCTYPE html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head>"
                      '<body data-rounds="0"><img src="http://127.0.0.1:9/y.png"></body>')
    console = _open(browser, strict)
    assert "http://127.0.0.1:9/y.png" in _requests(browser)  # attempted, then refused
    assert any("Content Security Policy" in c["message"] for c in console), console


@pytest.mark.spec("VIEW-4")
def test_keys_move_between_rounds_and_steps_and_unfold_a_tool_call(
    browser: Any, pages: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """j j: round 3 (the link says so); k: round 2; . . steps to the second step; Enter
    unfolds its tool call and shows the input; End: the last round; a click unfolds the tool
    call in its request."""
    _open(browser, pages["trace"])
    assert _selected(browser) == 1 and "Round 1 of 5" in _detail(browser)
    _keys(browser, "j", "j")
    assert _selected(browser) == 3 and "Round 3 of 5" in _detail(browser)
    assert browser.execute_script("return location.hash") == "#round=3"
    _keys(browser, "k")
    assert _selected(browser) == 2
    _keys(browser, ".", ".")
    cur = browser.find_element("css selector", ".step.cur")
    assert cur.get_attribute("id") == "step-6" and browser.switch_to.active_element == cur
    tool = cur.find_element("css selector", "details.tool")
    assert tool.get_attribute("open") is None and "f2.txt" not in tool.find_element("xpath", "..").text.split("\n", 1)[-1].replace("⚙ Read", "")
    _keys(browser, ENTER)
    assert tool.get_attribute("open") is not None and '"file_path": "f2.txt"' in tool.text
    _keys(browser, END)
    assert _selected(browser) == 5 and "completed" in _detail(browser)
    call = browser.find_element("css selector", "#detail .request details.tool")  # the last Read
    assert call.get_attribute("open") is None
    call.find_element("tag name", "summary").click()
    assert call.get_attribute("open") is not None and '"file_path": "f4.txt"' in call.text
    browser.save_screenshot(str(artifacts(tmp_path_factory) / "viewer-trace.png"))


@pytest.mark.spec("VIEW-4")
def test_a_deep_link_opens_its_round_and_step(browser: Any, pages: dict[str, Path]) -> None:
    """#round=4&step=16 selects round 4 and focuses step 16; changing the hash moves on."""
    _open(browser, pages["trace"], "#round=4&step=16")
    assert _selected(browser) == 4
    cur = browser.find_element("css selector", ".step.cur")
    assert cur.get_attribute("id") == "step-16"
    # the round's times read from the trace's first event: "+N s", never NaN
    detail = _detail(browser)
    assert "NaN" not in detail and re.search(r"from \+\d+\.\d{3} s", detail), detail
    browser.execute_script("location.hash = '#round=2'")
    browser.find_element("css selector", "body[data-selected-round='2']")


@pytest.mark.spec("VIEW-4")
def test_search_finds_the_round_and_marks_the_text(browser: Any, pages: dict[str, Path]) -> None:
    """/ focuses the search; the needle read in round 2 is found there, marked in the text; a
    tool's input and a tool's name are found too."""
    _open(browser, pages["trace"])
    _keys(browser, "/")
    box = browser.switch_to.active_element
    assert box.get_attribute("id") == "search"
    box.send_keys(NEEDLE, ENTER)
    assert _selected(browser) == 2
    assert browser.find_element("id", "found").text == "1 round(s) match"
    marks = [m.text for m in browser.find_elements("css selector", "#detail mark")]
    assert marks and all(m.lower() == NEEDLE for m in marks)
    box.clear()
    box.send_keys("f4.txt", ENTER)  # a tool's input: the round that read it
    assert browser.find_element("id", "found").text == "1 round(s) match" and _selected(browser) == 4
    box.clear()
    box.send_keys("Read", ENTER)  # a tool's name: every round that ran it (and "done reading")
    assert browser.find_element("id", "found").text == "5 round(s) match"


@pytest.mark.spec("VIEW-2")
def test_a_script_in_a_tool_result_is_shown_as_text(browser: Any, pages: dict[str, Path]) -> None:
    """Round 3 read a file holding <script> and <img onerror>: the page shows those
    characters, and neither ran."""
    _open(browser, pages["trace"], "#round=4")
    for d in browser.find_elements("css selector", "#detail details"):
        browser.execute_script("arguments[0].open = true", d)
    assert PAYLOAD in _detail(browser)
    assert browser.execute_script("return window.pwned === undefined")
    assert not browser.find_elements("css selector", "#detail img, #detail script")


@pytest.mark.spec("VIEW-4")
def test_the_page_rebuilds_every_request(browser: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    """The page's own rebuilding of each request (its runs over the previous one) gives the
    messages replay puts in each model call, on a run whose history is compacted and snipped;
    the rounds that compacted carry the marker, in the timeline and the list."""
    trace = synthetic_trace(tmp_path / "c.jsonl", 14, growing=True, overrides={"context_window": 30_000})
    page = tmp_path / "c.html"
    assert main(["show", str(trace), "--html", str(page)], out=io.StringIO()) == 0
    _open(browser, page)
    got = browser.execute_script(
        "var V = window.steploopViewer, t = new V.Trace(V.raw.trace);"
        "return V.raw.trace.reqs.map(function (q, k) { return t.conv(k).map(function (i) { return V.raw.trace.msgs[i].id; }); });"
    )
    assert got == real_requests(trace)
    marks = browser.find_element("css selector", "svg.timeline path.mk-compaction").get_attribute("d")
    assert marks.count("M") == 6  # a mark above each of the six rounds that compacted
    row = browser.find_element("id", "row-9").text  # round 10, the first compaction
    assert row.startswith("10") and "◆C" in row


@pytest.mark.spec("VIEW-4")
def test_a_long_trace_renders_only_what_is_on_screen(browser: Any, tmp_path: Path) -> None:
    """2,001 rounds: the list holds a screenful of rows; End reaches the last round, and a deep
    link to round 1,500 opens it."""
    trace = tmp_path / "long.jsonl"
    build(trace, 2_000)
    page = tmp_path / "long.html"
    assert main(["show", str(trace), "--html", str(page)], out=io.StringIO()) == 0
    _open(browser, page)
    assert browser.find_element("css selector", "body").get_attribute("data-rounds") == "2001"
    assert len(browser.find_elements("css selector", "#rounds .row")) < 80
    assert len(browser.find_elements("css selector", "#detail .step")) < 20
    _keys(browser, END)
    assert _selected(browser) == 2001 and browser.find_element("id", "row-2000").is_displayed()
    _open(browser, page, "#round=1500")
    assert _selected(browser) == 1500 and "Round 1500 of 2001" in _detail(browser)


@pytest.mark.spec("VIEW-5")
def test_diff_and_replay_pages_name_the_divergence(
    browser: Any, pages: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """diff: the first divergence is at the round whose tool result differs, and d goes there;
    replay: the snip that changed the request is named, both runs side by side."""
    shots = artifacts(tmp_path_factory)
    _open(browser, pages["diff"])
    box = browser.find_element("id", "divergence").text
    assert "First divergence at step" in box and "the events differ" in box
    assert len(browser.find_elements("css selector", "#detail.two > div")) == 2
    assert browser.find_elements("css selector", "#rounds .row.diverged")
    browser.save_screenshot(str(shots / "viewer-diff.png"))
    _keys(browser, HOME, "d")
    assert _selected(browser) == 2  # round 2 read another file
    _open(browser, pages["replay"])
    box = browser.find_element("id", "divergence").text
    assert "changed by snip" in box and "the counterfactual replay's report" in box
    assert "B · Round 5 of 6" in _detail(browser)
    browser.save_screenshot(str(shots / "viewer-replay.png"))


@pytest.mark.spec("VIEW-6", "VIEW-2")
def test_a_sub_agents_link_opens_its_page_and_leads_back(browser: Any, tmp_path: Path) -> None:
    """On a live parent's page each Agent call's step links to its child's page: a click opens
    it (quietly, asking for nothing more), and its link leads back; a link target that is not a
    plain page name is shown as text, never made a link."""
    from selenium.webdriver.support.ui import WebDriverWait

    from steploop.effects.viewer.page import page
    from steploop.effects.viewer.show import save
    from tests.support.subagents import CALLS, live_parent

    out = tmp_path / "p.html"
    assert main(["show", str(live_parent(tmp_path)), "--html", str(out)], out=io.StringIO()) == 0
    _open(browser, out)
    found = browser.find_elements("css selector", "#detail .sub-agent a.child-link")
    hrefs = [a.get_attribute("href") for a in found]
    assert len(hrefs) == 2 and all(h.startswith(out.with_name("p.agent-a").as_uri()) for h in hrefs)
    assert len(browser.find_elements("css selector", "#children a.child-link")) == 2  # and in the header
    found[1].click()
    WebDriverWait(browser, 10).until(lambda b: b.current_url == hrefs[1])
    browser.find_element("css selector", "body[data-rounds]")
    assert [c["level"] for c in browser.get_log("browser")] == ["INFO"]
    back = browser.find_element("css selector", "#parent a.parent-link")
    assert CALLS[1] in browser.find_element("id", "parent").text and back.get_attribute("href") == out.as_uri()
    back.click()
    WebDriverWait(browser, 10).until(lambda b: b.current_url == out.as_uri())
    # a target that is not a page name written here stays text
    m = re.search(r'id="trace-data">(.*?)</script>', out.read_text("utf-8"), re.S)
    assert m is not None
    data = json.loads(m.group(1))
    for entries in data["trace"]["children"].values():
        entries[0]["href"] = "javascript:window.pwned=1//.html"
    evil = save(page("evil", data), tmp_path / "evil.html")
    _open(browser, evil)
    assert browser.find_elements("css selector", "#detail .sub-agent a") == []
    assert len(browser.find_elements("css selector", "#detail .sub-agent span.child-link")) == 2
