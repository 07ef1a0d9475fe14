"""A parent's Agent/Task calls lead to their child traces (E-AGENT-6, VIEW-6): ``show`` names
each child under the rounds, ``show --html`` writes each child's page beside the parent's,
linked both ways, for a live run's ``subagents/`` folder and for an import's sidechain traces;
a child that cannot be read, or is missing, is a warning."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.effects.importer.session import import_file
from steploop.effects.subagent import child_traces, subagent_traces
from steploop.effects.trace import StepRecord, TraceReader
from steploop.effects.viewer import show as viewer_show
from steploop.effects.viewer import write_pages
from tests.support.subagents import CALLS, live_parent

ROOT = Path(__file__).resolve().parents[2]
SIDECHAINS = ROOT / "tests" / "data" / "cc-transcripts" / "derived" / "continuation_chains.jsonl"
# the five Task calls of its first turn, each with the sidechain trace it started (IMP-23)
TASKS = {
    "toolu_014i9ThHMNShCHocf9xMKasf": "side2",
    "toolu_01EbxY94wRUAGyMLj5wh699C": "side3",
    "toolu_01LS6tcVd796SbQKmZqeVnWY": "side1",
    "toolu_017rjDpjVPeNFmAEXNTkoP55": "side4",
    "toolu_01EPom7jESzNbU8coiKjzVGS": "side5",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return live_parent(tmp_path_factory.mktemp("live"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "out"
    rep = import_file(SIDECHAINS, out, name=SIDECHAINS.name)
    assert rep.problems == [] and len(rep.turns) == 8
    return out


def _steps(path: Path) -> int:
    return sum(1 for r in TraceReader(path) if isinstance(r, StepRecord))


def _show(trace: Path, *extra: str) -> str:
    out = io.StringIO()
    assert main(["show", str(trace), *extra], out=out) == 0, out.getvalue()
    return out.getvalue()


def _data(page: Path) -> Any:
    m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert m is not None
    return json.loads(m.group(1))["trace"]


def _copy(trace: Path, dest: Path) -> Path:
    """A live parent and its subagents/ folder, copied to ``dest``."""
    dest.mkdir()
    shutil.copy(trace, dest / trace.name)
    shutil.copytree(trace.with_suffix(""), dest / trace.stem)
    return dest / trace.name


@pytest.mark.spec("E-AGENT-6")
def test_show_names_each_live_childs_trace_under_its_call(live: Path) -> None:
    """Both Agent calls of a live parent name their child trace: the round, the call, the path
    from the parent's folder, its steps and terminal."""
    links = child_traces(live)
    assert links.calls == tuple((t, "Agent") for t in CALLS) and links.warnings == ()
    assert {t: [c.path for c in cs] for t, cs in links.children.items()} == {
        t: [p] for t, p in subagent_traces(live).items()
    }
    text = _show(live)
    for tid in CALLS:
        (child,) = links.children[tid]
        assert not child.imported and child.agent_type == "general-purpose" and child.terminal == "completed"
        rel = f"parent/subagents/agent-{child.agent_id}.jsonl"
        assert f"round 1 · Agent {tid} → {rel}: {_steps(child.path)} steps, terminal completed" in text
    assert text.index("sub-agents") > text.index("round  transition")


@pytest.mark.spec("VIEW-6", "VIEW-1")
def test_show_html_writes_each_childs_page_linked_both_ways(live: Path, tmp_path: Path) -> None:
    """The parent's page links each Agent call to its child's page, written beside it as
    ``<stem>.agent-<id>.html``; each child's page links back and names the call; every page
    stays self-contained."""
    out = tmp_path / "p.html"
    text = _show(live, "--html", str(out))
    links = child_traces(live)
    parent = _data(out)
    assert parent["parent"] is None
    written = {}
    for tid in CALLS:
        (child,) = links.children[tid]
        (entry,) = parent["children"][tid]
        assert entry == {
            "href": f"p.agent-{child.agent_id}.html",
            "name": f"parent/subagents/agent-{child.agent_id}.jsonl",
            "steps": child.steps,
            "terminal": "completed",
            "agent_type": "general-purpose",
        }
        page = tmp_path / entry["href"]
        written[tid] = page
        data = _data(page)
        assert data["parent"] == {"href": "p.html", "name": "../../parent.jsonl", "call": tid}
        assert data["children"] == {} and data["terminal"] == "completed"
        assert data["provenance"]["parent_tool_use_id"] == tid
        markup = page.read_text("utf-8").split('id="trace-data"')[0]
        assert not re.search(r"\b(src|href|srcset|action|formaction|poster|data)\s*=", markup)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["p.html", *(p.name for p in written.values())])
    assert all(p.name in text for p in written.values())


@pytest.mark.spec("E-AGENT-6", "VIEW-6")
def test_an_imported_sidechain_links_the_same_way(imported: Path, tmp_path: Path) -> None:
    """An import's sidechain traces sit beside the parent's turn: each of its Task calls names
    its sidechain's trace in ``show``, and its page links to the sidechain's page and back."""
    parent = imported / "continuation_chains.t001.jsonl"
    links = child_traces(parent)
    assert links.warnings == () and [t for t, _ in links.calls] == list(links.children)
    assert {t: [c.path.name for c in cs] for t, cs in links.children.items()} == {
        t: [f"continuation_chains.{side}.t001.jsonl"] for t, side in TASKS.items()
    }
    assert all(c.imported for (c,) in links.children.values())
    assert child_traces(imported / "continuation_chains.t002.jsonl").children == {}  # another turn's calls
    text = _show(parent)
    for tid, side in TASKS.items():
        path = imported / f"continuation_chains.{side}.t001.jsonl"
        assert re.search(rf"round \d+ · Task {tid} → {re.escape(path.name)}: {_steps(path)} steps, terminal completed", text)
    out = tmp_path / "turn1.html"
    pages = write_pages(parent, out)
    assert len(pages) == 6 and pages[0] == out
    for tid, side in TASKS.items():
        (entry,) = _data(out)["children"][tid]
        assert entry["href"] == f"turn1.agent-continuation_chains_{side}_t001.html"
        assert entry["name"] == f"continuation_chains.{side}.t001.jsonl"
        back = _data(tmp_path / entry["href"])["parent"]
        assert back == {"href": "turn1.html", "name": "continuation_chains.t001.jsonl", "call": tid}


@pytest.mark.spec("E-AGENT-6", "VIEW-6")
def test_a_missing_or_corrupt_child_is_a_warning(
    live: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One child's trace cut by a bad line, the other's deleted: ``show`` and ``show --html``
    still show the parent (exit 0), name neither child, and warn once for each."""
    parent = _copy(live, tmp_path / "copy")
    children = child_traces(parent).children
    bad, gone = children[CALLS[0]][0].path, children[CALLS[1]][0].path
    lines = bad.read_text("utf-8").splitlines(keepends=True)
    bad.write_text("".join([*lines[:2], "{not json\n", *lines[2:]]), encoding="utf-8")
    gone.unlink()
    links = child_traces(parent)
    assert links.children == {} and len(links.warnings) == 2
    assert f"call {CALLS[0]} cannot be read, skipped: {bad}:3: " in links.warnings[0]
    assert links.warnings[1] == f"the sub-agent trace of call {CALLS[1]} (parent/subagents/{gone.name}) is missing"
    capsys.readouterr()
    text = _show(parent)
    err = capsys.readouterr().err
    assert "sub-agents" not in text and "terminal completed" in text
    assert err.count("steploop: warning: ") == 2 and f"call {CALLS[1]} (parent/subagents/{gone.name}) is missing" in err
    out = tmp_path / "p.html"
    _show(parent, "--html", str(out))
    assert capsys.readouterr().err.count("steploop: warning: ") == 2
    assert [p.name for p in tmp_path.glob("*.html")] == ["p.html"] and _data(out)["children"] == {}
    bad.write_text("\x00junk", encoding="utf-8")  # not even a header: skipped, said so
    (warning,) = [w for w in child_traces(parent).warnings if str(bad) in w]
    assert warning == f"{bad}: not a trace (its header cannot be read), skipped"
    bad.write_text('{"a":' * 100_000 + "}" * 100_000, encoding="utf-8")  # E-JSON-1: too deep
    (warning,) = [w for w in child_traces(parent).warnings if str(bad) in w]
    assert warning == f"{bad}: not a trace (its header cannot be read), skipped"


@pytest.mark.spec("E-AGENT-6")
def test_a_corrupt_imported_sidechain_is_a_warning(imported: Path, tmp_path: Path) -> None:
    """An import's sidechain trace with a bad line is skipped with a warning; its siblings
    still link."""
    copy = tmp_path / "copy"
    shutil.copytree(imported, copy)
    side = copy / "continuation_chains.side1.t001.jsonl"
    lines = side.read_text("utf-8").splitlines(keepends=True)
    side.write_text("".join([*lines[:3], "[1, 2\n", *lines[3:]]), encoding="utf-8")
    links = child_traces(copy / "continuation_chains.t001.jsonl")
    assert len(links.children) == 4 and "toolu_01LS6tcVd796SbQKmZqeVnWY" not in links.children
    (warning,) = links.warnings
    assert warning.startswith(f"the sub-agent trace of call toolu_01LS6tcVd796SbQKmZqeVnWY cannot be read, skipped: {side}:4: ")


@pytest.mark.spec("VIEW-6")
def test_pages_stop_at_the_depth_bound_and_each_trace_gets_one(
    live: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No page below ``MAX_DEPTH`` levels, and a trace reached twice gets one page."""
    monkeypatch.setattr(viewer_show, "MAX_DEPTH", 0)
    assert write_pages(live, tmp_path / "a.html") == [tmp_path / "a.html"]
    assert _data(tmp_path / "a.html")["children"] == {}
    monkeypatch.setattr(viewer_show, "MAX_DEPTH", 8)
    # a second subagents/ entry for the same child (a copy under another name): one page for each file
    links = child_traces(live)
    twin = links.children[CALLS[0]][0].path
    assert len(write_pages(live, tmp_path / "b.html")) == 3
    link = twin.with_name("agent-twin.jsonl")
    link.symlink_to(twin)
    try:
        pages = write_pages(live, tmp_path / "c.html")
    finally:
        link.unlink()
    assert len(pages) == 3  # the link and its target are one trace: one page


@pytest.mark.spec("E-AGENT-6")
def test_a_pipe_beside_the_children_is_no_trace(live: Path, tmp_path: Path) -> None:
    """A pipe named like a child's trace, in the subagents/ folder or beside the parent, is
    not read: opening a pipe nobody writes to waits for ever (show hung on one). The pipe here
    answers a reader at once with nothing, so a search that opens it says so instead of
    hanging; none may."""
    import os
    import threading

    parent = _copy(live, tmp_path / "copy")
    pipes = [parent.with_suffix("") / "subagents" / "agent-zzz.jsonl", parent.parent / "zzz.jsonl"]
    stop = threading.Event()
    opened: list[Path] = []

    def answer() -> None:
        while not stop.is_set():
            for pipe in pipes:
                try:
                    fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:  # nobody reading
                    continue
                opened.append(pipe)
                os.close(fd)
            stop.wait(0.01)

    for pipe in pipes:
        os.mkfifo(pipe)
    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        links = child_traces(parent)
    finally:
        stop.set()
        thread.join()
    assert opened == [] and links.warnings == ()
    assert set(links.children) == set(CALLS)
