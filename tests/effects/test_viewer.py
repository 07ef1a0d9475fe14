"""``steploop show --html``, ``diff --html`` and ``replay --html``: the page's data and markup,
without a browser (tests/effects/test_viewer_browser.py drives the page in Chromium)."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.effects.trace import replay_counterfactual
from steploop.effects.viewer import trace_view, write_html
from steploop.effects.viewer.data import DEFINING_RULES, rules_for
from steploop.effects.viewer.page import diagram
from steploop.reducer.graph import static_edges
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES
from tests.support.viewer import (
    PAYLOAD,
    materialize,
    real_requests,
    scripted_trace,
    synthetic_trace,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "specs" / "scenarios"
MALFORMED = ROOT / "tests" / "data" / "malformed_traces"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_trace(tmp_path_factory.mktemp("viewer"), 5)


def _page(trace: Path, tmp_path: Path) -> str:
    out = io.StringIO()
    assert main(["show", str(trace), "--html", str(tmp_path / "p.html")], out=out) == 0, out.getvalue()
    return (tmp_path / "p.html").read_text("utf-8")


def _data(page: str) -> Any:
    m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


@pytest.mark.spec("VIEW-1")
def test_the_page_references_nothing_outside_itself(run: Path, tmp_path: Path) -> None:
    """No src, href, @import or url() but to in-page fragments; no URL but the SVG namespace;
    a CSP of default-src 'none' that allows the one script and the one style by hash."""
    page = _page(run, tmp_path)
    assert not re.search(r"\b(src|href|srcset|action|formaction|poster|data)\s*=", page.split('id="trace-data"')[0])
    assert "@import" not in page
    urls = re.findall(r"url\(([^)]*)\)", page)
    assert urls and all(u.startswith("#") for u in urls)
    assert set(re.findall(r"https?://[^\s\"'<>\\]+", page)) == {"http://www.w3.org/2000/svg"}
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None
    policy = dict(d.strip().split(" ", 1) for d in csp.group(1).split(";"))
    assert policy["default-src"] == "'none'" and "unsafe" not in csp.group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(scripts) == 1 and len(styles) == 1

    def sha(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    assert policy["script-src"] == sha(scripts[0]) and policy["style-src"] == sha(styles[0])


def _strings(x: Any) -> Any:
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


@pytest.mark.spec("VIEW-2")
def test_strings_from_the_trace_cannot_become_markup(run: Path, tmp_path: Path) -> None:
    """A tool result holding <script>, an <img onerror> and </pre> is embedded escaped: the
    data block holds no '<', '>' or '&', nothing of it is in the markup around, and the string
    comes back whole from the data."""
    page = _page(run, tmp_path)
    head, _, rest = page.partition('<script type="application/json" id="trace-data">')
    block, _, tail = rest.partition("</script>")
    assert "pwned" not in head and "pwned" not in tail
    assert not set("<>&") & set(block)
    assert any(PAYLOAD in s for s in _strings(json.loads(block)))


@pytest.mark.spec("VIEW-3")
def test_the_diagram_is_drawn_from_the_static_table_without_exploring(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing a page runs no state exploration (the explorer raises here), and the diagram
    draws every phase-to-phase edge of `steploop graph --static` that changes phase or
    transition, with the run's path counted on the edges it took."""
    import steploop.reducer.explore as explore
    import steploop.reducer.graph as graph

    def no(*a: object, **k: object) -> None:
        raise AssertionError("the explorer ran")

    monkeypatch.setattr(explore, "explore", no)
    monkeypatch.setattr(graph, "explore", no)
    page = _page(run, tmp_path)
    drawn = set(re.findall(r"<title>(\S+) → (\S+?)[:<]", page))
    table = {(a, b) for a, _, b, t in static_edges() if a != b or t}
    assert table <= drawn | {e for e in table if e[0] not in _PHASES or e[1] not in _PHASES}
    assert 'class="edge taken"' in page and "taken 4×" in page  # four tool rounds: running_tools → streaming


_PHASES = {"[*]", "streaming", "waiting_retry", "reactive_compacting", "compacting", "running_tools", "draining", "stop_hooks", "done", "[end]"}


def test_a_path_is_counted_on_its_edges() -> None:
    """The diagram counts each edge the run took and names the transitions on it."""
    svg = diagram([["[*]", "streaming", ""], ["streaming", "running_tools", ""], ["running_tools", "streaming", "next_turn"], ["running_tools", "streaming", "next_turn"]])
    assert "running_tools → streaming" in svg and "taken 2× (next_turn ×2)" in svg


@pytest.mark.spec("VIEW-4")
def test_rounds_steps_and_requests_of_a_run(run: Path) -> None:
    """Five rounds: four Read rounds ending next_turn, then completed; each round's steps,
    calls, tools and the rules behind its transition; every step's event and effects; which
    step answered each request."""
    data = trace_view(run).data
    rounds = data["rounds"]
    assert [r["tr"] for r in rounds] == ["next_turn"] * 4 + ["completed"]
    assert [r["rules"][0] for r in rounds] == ["C-NEXT-1"] * 4 + ["T-COMPLETED-1"]
    assert [r["tools"] for r in rounds] == [{"Read": 1}] * 4 + [{}]
    assert all(r["calls"] == 1 and r["req"] is not None for r in rounds)
    steps = data["steps"]
    assert [s["i"] for s in steps] == list(range(len(steps))) and data["steps_total"] == len(steps)
    assert rounds[0]["s0"] == 0 and rounds[-1]["s1"] == len(steps) - 1
    assert all(a["s1"] + 1 == b["s0"] for a, b in itertools.pairwise(rounds))
    call = steps[0]["fx"][1]
    assert call["type"] == "call_model" and call["req"] == 0
    answered = steps[0]["ans"]["1"]  # the model call's blocks and end
    assert [steps[p]["re"] for p in answered] == [[0, 1]] * len(answered)
    results = [s for s in steps if s["ev"] and s["ev"]["type"] == "tool_finished"]
    assert len(results) == 4 and all("line" in json.dumps(r["ev"]) for r in results)
    assert data["replay"] == {"ok": True, "step": None, "note": None}
    # times are shown from the first event's (the page computes "+N s" from t_start)
    times = [r["t0"] for r in rounds if r["t0"] is not None]
    assert times and data["t_start"] == min(times)


@pytest.mark.spec("VIEW-4")
@pytest.mark.parametrize("source", ["run", "snipped", "compacted", "collapsed", "microcompacted"])
def test_each_request_rebuilds_to_the_conversation_replay_computes(
    source: str, run: Path, tmp_path: Path
) -> None:
    """The runs over the previous request give, request by request, the messages (by id) that
    exact replay puts in each model call: appended, snipped, compacted, collapsed, cleared."""
    if source == "run":
        path = run
    elif source == "snipped":
        base = synthetic_trace(tmp_path / "s.jsonl", 12)
        path = tmp_path / "new.jsonl"
        replay_counterfactual(base, {"snip_buffer": 191_500, "max_turns": 1000}, record=path)
    elif source == "microcompacted":
        path = synthetic_trace(tmp_path / "m.jsonl", 9, gap_ms=2 * 3_600_000)
    elif source == "compacted":
        path = synthetic_trace(tmp_path / "c.jsonl", 14, growing=True, overrides={"context_window": 30_000})
    else:
        path = SCENARIOS / "collapse_drain_retry.jsonl"
    data = trace_view(path).data
    rebuilt = [[data["msgs"][k]["id"] for k in ids] for ids in materialize(data["reqs"])]
    assert rebuilt == real_requests(path) and rebuilt


@pytest.mark.spec("VIEW-4")
def test_what_each_context_layer_removed(tmp_path: Path) -> None:
    """Snip's share is what its boundary says it freed; microcompact's is counted where long
    gaps clear old results; the result budget's where a result over it was replaced; a
    compaction's from the count before and after it."""
    base = synthetic_trace(tmp_path / "s.jsonl", 12)
    snipped = tmp_path / "new.jsonl"
    replay_counterfactual(base, {"snip_buffer": 191_500, "max_turns": 1000}, record=snipped)
    data = trace_view(snipped).data
    said = [int(m) for m in re.findall(r"about (\d+) tokens", json.dumps(data["msgs"]))]
    assert said and sum(r["lay"].get("snip", 0) for r in data["rounds"]) == sum(said)
    gaps = trace_view(synthetic_trace(tmp_path / "m.jsonl", 9, gap_ms=2 * 3_600_000)).data
    assert sum(r["lay"].get("microcompact", 0) for r in gaps["rounds"]) > 0
    assert all(set(r["lay"]) <= {"microcompact"} for r in gaps["rounds"])
    budget = trace_view(synthetic_trace(tmp_path / "b.jsonl", 3, big_result_in=2)).data
    assert [r["lay"].get("budget", 0) > 500 for r in budget["rounds"]] == [False, True, False, False]
    grown = trace_view(synthetic_trace(tmp_path / "c.jsonl", 14, growing=True, overrides={"context_window": 30_000})).data
    assert [r["comp"] for r in grown["rounds"]] == [0] * 9 + [1] * 6  # auto-compact from round 10
    assert all(r["lay"]["compaction"] > 0 for r in grown["rounds"][9:])
    assert [bool(r["lay"].get("snip")) for r in grown["rounds"]] == [False] * 5 + [True] * 5 + [False] * 5


def test_the_rules_behind_each_transition_are_the_specs() -> None:
    """Each of the 17 transitions is defined by the rule whose heading in specs/rules.md names
    it; the ladder rungs that end in one follow."""
    headings = dict(re.findall(r"^### ([TC]-[A-Z-]+-\d) · (\w+)$", (ROOT / "specs" / "rules.md").read_text("utf-8"), re.M))
    by_tag = {tag: rid for rid, tag in headings.items()}
    tags = [t.TAG for t in (*CONTINUE_TYPES, *TERMINAL_TYPES)]
    assert {t: DEFINING_RULES[t] for t in tags} == {t: by_tag[t] for t in tags}
    assert rules_for("prompt_too_long") == ("T-PTL-1", "R-PTL-1")
    assert rules_for("completed")[0] == "T-COMPLETED-1" and "G1" in rules_for("completed")


@pytest.mark.spec("VIEW-4")
def test_a_trace_this_steploop_cannot_step_is_shown_as_recorded(tmp_path: Path) -> None:
    """step() rejects an event: the page still shows every recorded step, without requests,
    and says why; a malformed file stays a one-line error and exit status 2."""
    out = io.StringIO()
    assert main(["show", str(MALFORMED / "illegal_event.jsonl"), "--html", str(tmp_path / "p.html")], out=out) == 0
    data = _data((tmp_path / "p.html").read_text("utf-8"))["trace"]
    assert data["replay"]["ok"] is False and "step() rejects the event" in data["replay"]["note"]
    assert len(data["steps"]) == 9 and data["reqs"] == []
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err):
        code = main(["show", str(MALFORMED / "not_json.jsonl"), "--html", str(tmp_path / "q.html")], out=io.StringIO())
    assert code == 2 and err.getvalue().count("\n") == 1 and "not valid JSON" in err.getvalue()
    assert not (tmp_path / "q.html").exists()


def test_an_unwritable_page_is_one_line(run: Path, tmp_path: Path) -> None:
    """Writing into a directory that does not exist: one line, exit status 2."""
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["show", str(run), "--html", str(tmp_path / "no" / "p.html")], out=io.StringIO())
    assert code == 2 and "cannot write" in err.getvalue() and err.getvalue().count("\n") == 1


def test_long_content_is_folded_never_cut(tmp_path: Path) -> None:
    """A 5,000-character result over a 1,000-character budget: the full text is in the data
    (kept once), the preview the model got is in its message."""
    path = synthetic_trace(tmp_path / "b.jsonl", 3, big_result_in=2)
    data = trace_view(path).data
    assert "y" * 5_000 in data["strs"]
    persisted = [e for s in data["steps"] for e in s.get("fx", []) if e["type"] == "persist_tool_result"]
    assert len(persisted) == 1 and data["strs"][persisted[0]["content"]["s"]] == "y" * 5_000


def test_write_html_returns_the_page(run: Path, tmp_path: Path) -> None:
    """The library call writes the same page the CLI does."""
    path = write_html(run, tmp_path / "lib.html")
    assert path.read_text("utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.spec("VIEW-4")
def test_a_trace_whose_effects_differ_is_shown_as_recorded_from_there(tmp_path: Path) -> None:
    """A recorded model call asked for another max_tokens than this steploop computes: from
    that step the page shows the recorded effects, without a request it cannot rebuild, and
    its note names the step."""
    lines = (SCENARIOS / "next_turn.jsonl").read_text("utf-8").splitlines()
    at = max(k for k, line in enumerate(lines) if '"call_model"' in line)
    lines[at] = lines[at].replace('"max_tokens":8000', '"max_tokens":7999', 1)
    assert '"max_tokens":7999' in lines[at]
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n", "utf-8")
    data = trace_view(edited).data
    step = json.loads(lines[at])["i"]
    assert data["replay"]["ok"] is False and data["replay"]["step"] == step
    assert f"from step {step} on" in data["replay"]["note"]
    calls = [e for s in data["steps"] for e in s["fx"] if e["type"] == "call_model"]
    assert [c["max_tokens"] for c in calls] == [8000, 7999] and calls[0]["req"] == 0 and calls[1]["req"] is None
    assert len(data["reqs"]) == 1
