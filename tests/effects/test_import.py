"""The importer on the real transcripts shipped in tests/data/cc-transcripts/ (specs/import.md).

Every shipped file imports; for each, the number of user turns and a lower bound on the turns the
machine reproduces exactly are asserted (the table below; it fails if a change loses one). The
traces written replay exactly, answer counterfactual replay, and `steploop stats` counts them.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects.cli import DEMO_PROMPT, SAMPLE_PROJECT, demo_script, main
from steploop.effects.importer import import_paths
from steploop.effects.importer.chain import threads
from steploop.effects.importer.compare import comparable
from steploop.effects.importer.session import FileReport, _import_thread, import_file, turn_driver
from steploop.effects.importer.source import read_source
from steploop.effects.run import PermissionPolicy, PermissionRequest, run
from steploop.effects.scripted import ScriptedModel
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.trace import (
    StepRecord,
    TraceReader,
    TraceRecorder,
    make_provenance,
    replay_counterfactual,
    replay_exact,
)
from steploop.reducer import claude_code_2_1_88
from steploop.reducer.config import profile_for
from steploop.reducer.drive import check_world
from steploop.reducer.effects import Emit
from steploop.reducer.events import CommandQueued, Interrupted, MessagesInserted
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    SystemMessage,
    UserMessage,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cc-transcripts"

#: file -> (user turns, turns reproduced exactly: a lower bound). Measured on the shipped files,
#: each turn under the profile of its records' version (VER-0): every turn that ends reproduces
#: (the two interrupted turns, of short.jsonl and 258c7280, since the Claude Code profiles write
#: Claude Code's rejection text, R-TEXTS-1; the erk/ sessions by VER-1, VER-3, VER-4).
FLOOR: dict[str, tuple[int, int]] = {
    "ccviewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": (1, 1),
    "ccviewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl": (3, 3),
    "ccviewer/agent-test-hash-123.jsonl": (1, 1),
    "ccviewer/agent-test-hash-456.jsonl": (1, 1),
    "ccviewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": (7, 7),
    "erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl": (12, 11),
    "erk/52bc43f3-2f5f-46f5-b693-bedf4ffd23db.jsonl": (2, 1),
    "erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl": (1, 1),
    "fasthooks/sample_agent_sidechain.jsonl": (1, 1),
    "fasthooks/sample_hook_logs.jsonl": (0, 0),
    "fasthooks/sample_main_transcript.jsonl": (5, 5),
    "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl": (4, 4),
    "spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl": (1, 1),
    "spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-acompact-fffbd0.jsonl": (1, 1),
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl": (3, 3),
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-a2898e3.jsonl": (1, 1),
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-acompact-e1f845.jsonl": (1, 1),
    "spotter/short.jsonl": (1, 1),
    "spotter/subagent.jsonl": (2, 2),
    "spotter/tool_heavy.jsonl": (2, 2),
}


@functools.cache
def imported(name: str) -> FileReport:
    return import_file(DATA / name, None, name=name)


def test_the_shipped_transcripts_are_unchanged_copies() -> None:
    """Every shipped file is in the table and matches the digest it was copied with."""
    sums = {}
    for line in (DATA / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    shipped = sorted(
        str(p.relative_to(DATA)) for p in DATA.rglob("*.jsonl") if "derived" not in p.parts
    )
    assert shipped == sorted(sums) == sorted(FLOOR)
    for name, digest in sums.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.spec("IMP-1", "IMP-3", "IMP-10", "IMP-19")
@pytest.mark.parametrize("name", sorted(FLOOR))
def test_every_shipped_transcript_imports(name: str) -> None:
    """No file crashes the importer; each has its turns, and at least as many reproduce
    exactly as when the table was measured."""
    rep = imported(name)
    turns, floor = FLOOR[name]
    assert len(rep.turns) == turns
    reproduced = sum(1 for t in rep.turns if t.reproduced)
    assert reproduced >= floor, [t.divergence for t in rep.turns if not t.reproduced]
    # every turn reproduced reaches an end state; one that diverged is named by its cause
    assert all(t.terminal is not None for t in rep.turns if t.reproduced)
    assert all(t.divergence.cause for t in rep.turns if t.divergence is not None)
    assert all(not t.reproduced or t.divergence is None for t in rep.turns)


@pytest.mark.spec("IMP-19")
def test_over_every_shipped_file() -> None:
    """50 user turns in 19 transcripts; every turn of the first 16 files ends and reproduces
    exactly; the three erk/ sessions (2.0.67, 2.1.53, 2.1.56), each under its version's
    profile (VER-0), reproduce 13 of their 15 (the other two are cut off)."""
    reps = [imported(n) for n in FLOOR]
    turns = [t for r in reps for t in r.turns]
    assert sum(1 for r in reps if r.transcript) == 19
    assert len(turns) == 50
    assert sum(t.reproduced for t in turns) >= 48
    # two erk sessions end mid-turn, inside a tool call: reproduced up to the cut (IMP-22)
    assert sum(t.verdict == "reproduced-to-cut" for t in turns) >= 2
    older = [t for n in FLOOR if not n.startswith("erk/") for t in imported(n).turns]
    assert [t.divergence for t in older if t.divergence is not None] == []


@pytest.mark.spec("IMP-1")
def test_a_hook_log_is_not_a_transcript() -> None:
    rep = imported("fasthooks/sample_hook_logs.jsonl")
    assert not rep.transcript and rep.turns == []
    assert [str(p) for p in rep.problems] == [
        "fasthooks/sample_hook_logs.jsonl: not a Claude Code transcript: none of its 36 line(s) "
        "is a user or assistant record; skipped"
    ]


@pytest.mark.spec("IMP-2")
def test_metadata_and_progress_are_counted_not_imported() -> None:
    rep = imported("spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    assert rep.counts["progress"] == 1333
    assert rep.counts["file-history-snapshot"] == 28
    assert rep.counts["queue-operation"] == 6
    assert rep.problems == []
    ccv = imported("ccviewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    assert ccv.counts["summary"] == 1 and ccv.problems == []


@pytest.mark.spec("IMP-3")
def test_sidechains_are_threads_of_their_own() -> None:
    """1.0.98 interleaves five sub-agent runs with the main thread; each is its own turn, run
    as a sub-agent (query source agent:...)."""
    rep = imported("ccviewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    assert rep.threads == 6
    assert [t.thread for t in rep.turns].count("main") == 2
    side = [t for t in rep.turns if t.thread != "main"]
    assert len(side) == 5 and all(t.reproduced for t in side)


@pytest.mark.spec("IMP-4")
def test_a_missing_logical_parent_is_bridged_and_the_compaction_reproduces() -> None:
    name = "spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    rep = imported(name)
    assert [(p.line, p.severity) for p in rep.problems] == [(754, "note")]
    assert "logicalParentUuid 459e838f" in rep.problems[0].message
    t2 = rep.turns[1]
    assert t2.lines[0] < 754 < t2.lines[1] and t2.reproduced


@pytest.mark.spec("IMP-4")
def test_a_fork_whose_parents_are_in_the_main_file_is_bridged() -> None:
    rep = imported("spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-acompact-fffbd0.jsonl")
    assert [(p.line, p.severity) for p in rep.problems] == [(2, "note"), (3, "note")]  # line order
    assert rep.turns[0].reproduced


@pytest.mark.spec("IMP-5", "IMP-11")
def test_parallel_calls_fan_out_and_stay_in_the_thread() -> None:
    """tool_heavy: a response with WebSearch and Glob; Glob's record and result hang off the
    WebSearch record, not the path, and are kept; results in completion order reproduce."""
    rep = imported("spotter/tool_heavy.jsonl")
    assert rep.problems == [] and all(t.reproduced for t in rep.turns)


@pytest.mark.spec("IMP-13", "IMP-9")
def test_the_long_turn_compacts_where_claude_code_did() -> None:
    """258c7280 turn 2: 730 steps (613, and the tool list read after each of its 117 tool
    rounds, R-REFRESH-1); Claude Code auto-compacted at line 1256 (preTokens 167,094) and so
    does the machine (threshold 167,000 for Opus 4.6 on 200,000); the turn reproduces."""
    rep = imported("spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    t2 = rep.turns[1]
    assert t2.lines == (496, 1845) and t2.reproduced and t2.steps == 730
    assert t2.inferred["IMP-18"] == 2  # two queued prompts rode along


@pytest.mark.spec("IMP-21")
def test_an_interrupted_tool_is_an_interrupt() -> None:
    """short.jsonl: both results carry the rejection text and the marker follows: the user
    interrupted; the machine writes both results (Claude Code's rejection text under the 2.1.88
    profile, R-TEXTS-1) and the marker, and the turn reproduces."""
    rep = imported("spotter/short.jsonl")
    t = rep.turns[0]
    assert t.terminal == "aborted_tools" and t.inferred["IMP-21"] == 1
    assert t.divergence is None and t.reproduced


@pytest.mark.spec("IMP-12")
def test_a_bash_error_cancels_siblings_only_where_the_transcript_shows_it() -> None:
    """2.0.76 let a Bash call finish after its sibling Bash failed: turn 5 reproduces."""
    rep = imported("fasthooks/sample_main_transcript.jsonl")
    assert rep.turns[4].reproduced


@pytest.mark.spec("IMP-16", "R-INSERT-1")
def test_slash_command_expansion_and_silent_stop_hooks() -> None:
    rep = imported("ccviewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl")
    t = rep.turns[0]
    assert t.reproduced and t.inferred.get("IMP-16") == 1  # no stop-hook record: none ran


# --- traces: written, replayed, counterfactual, stats -------------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The traces of three small files, written by `steploop import`."""
    out = tmp_path_factory.mktemp("imported")
    names = ["spotter/tool_heavy.jsonl", "fasthooks/sample_main_transcript.jsonl", "spotter/subagent.jsonl"]
    summary = import_paths([DATA / n for n in names], out)
    assert summary.turns == 9 and summary.traces == 9
    return out


@pytest.mark.spec("IMP-20")
def test_imported_traces_replay_exactly_and_say_what_was_inferred(traces: Path) -> None:
    files = sorted(traces.glob("*.jsonl"))
    assert len(files) == 9
    for path in files:
        report = replay_exact(path)
        assert report.ok, (path.name, report.describe())
    reader = TraceReader(traces / "sample_main_transcript.t005.jsonl")
    steps = [r for r in reader if isinstance(r, StepRecord)]
    prov = reader.header.provenance if reader.header is not None else {}
    assert prov["source"].endswith("fasthooks/sample_main_transcript.jsonl")
    assert prov["session_id"] == "c45af7b1-cb7c-4e51-93db-8cbb250a877a"
    assert prov["claude_code_version"] == "2.0.76"
    assert prov["importer"] == "steploop-import/1" and prov["turn"] == 5
    assert prov["source_lines"] == "35-56" and prov["reproduced"] is True
    assert prov["divergence"] is None and prov["cause"] is None
    inferred = dict(
        (part.split(" steps ")[0], part.split(" steps ")[1]) for part in prov["inferred"].split("; ")
    )
    assert set(inferred) == {"IMP-12", "IMP-14", "IMP-15", "VER-7"}
    # each listed step's event is of the kind its rule supplies
    by_step = {r.i: r.event for r in steps}
    for n in _expand(inferred["IMP-15"]):
        assert type(by_step[n]).__name__ == "PermissionAnswered"
    for n in _expand(inferred["IMP-14"]):
        assert type(by_step[n]).__name__ == "ModelResponseEnded"


def _expand(ranges: str) -> list[int]:
    out: list[int] = []
    for part in ranges.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.spec("P-RUN-1")
def test_counterfactual_replay_of_an_imported_turn(traces: Path) -> None:
    """Under the default profile (with the session's model) turn 1 goes the same way; turn 5's
    second call asks for 8,000 output tokens and the recorded answer fits, so it matches too."""
    path = traces / "sample_main_transcript.t001.jsonl"
    reader = TraceReader(path)
    next(iter(reader))
    assert reader.header is not None
    base = profile_for("default", reader.header.config)
    assert base.model == "claude-haiku-4-5-20251001" and base.profile_name == "default"
    report = replay_counterfactual(path, base=base)
    assert report.ok, report.describe()
    # with a 30,000-token window the default machine would have compacted before its second call
    report = replay_counterfactual(path, {"context_window": 30_000}, base=base)
    assert not report.ok and "compact" in report.describe()


@pytest.mark.spec("P-RUN-1")
def test_replay_profile_keeps_the_recorded_model(traces: Path) -> None:
    out = io.StringIO()
    code = main(["replay", str(traces / "sample_main_transcript.t001.jsonl"), "--profile", "default"], out)
    assert code == 0, out.getvalue()
    assert "profile default" in out.getvalue() and "terminal completed" in out.getvalue()


def test_stats_counts_over_the_imported_folder(traces: Path) -> None:
    out = io.StringIO()
    assert main(["stats", str(traces)], out) == 0
    text = out.getvalue()
    assert "9 trace(s) read" in text
    assert "completed" in text and "aborted_streaming" in text and "next_turn" in text
    assert "compactions 0; tokens: " in text


def test_a_finished_turn_is_freed_without_the_cycle_collector() -> None:
    """The turn driver (its state, events and the turn's records) is freed by reference
    counting as soon as the importer lets go of it: a reference cycle would keep every turn of a
    long file until the cycle collector ran, and the peak would grow with the file."""
    import gc
    import weakref

    src = read_source(DATA / "spotter" / "tool_heavy.jsonl")
    (main_thread,) = [t for t in threads(src) if t.kind == "main"]
    turns = _import_thread(src, main_thread)
    gc.collect()
    gc.disable()
    try:
        first = next(turns)
        driver = weakref.ref(first[1])
        del first
        next(turns)  # the generator lets go of the first turn before it yields the second
        assert driver() is None
    finally:
        gc.enable()


# --- the command ---------------------------------------------------------------------------------


def test_import_command_table_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    code = main(["import", str(DATA / "spotter" / "tool_heavy.jsonl"), "-o", str(tmp_path / "a")], out)
    assert code == 0
    text = out.getvalue()
    assert "2 user turn(s): 2 ended, 2 reproduced exactly (100.0% of those that ended)" in text
    assert "cut off" not in text
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "import-report.json",
        "tool_heavy.t001.jsonl",
        "tool_heavy.t002.jsonl",
    ]
    report = json.loads((tmp_path / "a" / "import-report.json").read_text(encoding="utf-8"))
    assert report["turns"] == 2 and report["reproduced"] == 2
    # a file that is not a transcript: reported on stderr, exit 1
    out = io.StringIO()
    code = main(["import", str(DATA / "fasthooks" / "sample_hook_logs.jsonl"), "--no-traces"], out)
    assert code == 1
    assert "not a Claude Code transcript" in capsys.readouterr().err
    # a path that does not exist: a usage error, and nothing is written (issue 27 item 18)
    out_dir = tmp_path / "never"
    assert main(["import", str(tmp_path / "nope.jsonl"), "-o", str(out_dir)], io.StringIO()) == 2
    assert "nope.jsonl: no such file or directory" in capsys.readouterr().err
    assert not out_dir.exists()
    (tmp_path / "empty-dir").mkdir()
    assert main(["import", str(tmp_path / "empty-dir"), "-o", str(out_dir)], io.StringIO()) == 2
    assert "no *.jsonl files under" in capsys.readouterr().err
    assert not out_dir.exists()
    # the output folder inside the input folder is not read back
    src = tmp_path / "proj"
    shutil.copytree(DATA / "spotter", src, ignore=shutil.ignore_patterns("*-*-*-*-*"))
    assert main(["import", str(src), "-o", str(src / "out")], io.StringIO()) == 0
    assert main(["import", str(src), "-o", str(src / "out")], io.StringIO()) == 0


def test_a_usage_error_writes_no_default_output_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`steploop import missing.jsonl` exits 2 and leaves no ./steploop-import behind."""
    monkeypatch.chdir(tmp_path)
    assert main(["import", "missing.jsonl"], io.StringIO()) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_folder_import_keeps_counts_and_streams_its_report(tmp_path: Path) -> None:
    """The summary keeps counts per file (each file's turns go to ``on_file`` and to the report
    as the file is done); two files with the same stem get distinct trace names; the report is
    renamed into place only when complete, and an import that fails leaves no partial one."""
    for sub in ("a", "b"):
        (tmp_path / "in" / sub).mkdir(parents=True)
        shutil.copy(DATA / "spotter" / "tool_heavy.jsonl", tmp_path / "in" / sub)
    seen: list[FileReport] = []
    out = tmp_path / "out"
    summary = import_paths([tmp_path / "in"], out, on_file=seen.append)
    assert [len(r.turns) for r in seen] == [2, 2] and summary.turns == 4
    assert all(not hasattr(f, "__dict__") for f in summary.files)  # slotted counts, no turns
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        "tool_heavy-2.t001.jsonl", "tool_heavy-2.t002.jsonl",
        "tool_heavy.t001.jsonl", "tool_heavy.t002.jsonl",
    ]  # fmt: skip
    report = json.loads((out / "import-report.json").read_text(encoding="utf-8"))
    assert [r["file"] for r in report["reports"]] == ["a/tool_heavy.jsonl", "b/tool_heavy.jsonl"]
    assert report["turns"] == 4 and report["reproduced"] == 4 and report["files"] == 2
    assert [t["trace"] for t in report["reports"][1]["turns"]] == [
        "tool_heavy-2.t001.jsonl", "tool_heavy-2.t002.jsonl"
    ]

    def fail(_: FileReport) -> None:
        raise KeyboardInterrupt

    again = tmp_path / "again"
    with pytest.raises(KeyboardInterrupt):
        import_paths([tmp_path / "in"], again, on_file=fail)
    assert not (again / "import-report.json").exists()
    assert not (again / "import-report.json.partial").exists()


def test_import_command_progress_names_and_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar counts bytes (ending at the total); long names fold instead of squeezing the
    headers; an output folder that cannot be made is one line and exit 2."""
    deep = tmp_path / ("-home-someone-with-a-long-project-name-" * 2) / "subagents"
    deep.mkdir(parents=True)
    shutil.copy(DATA / "spotter" / "tool_heavy.jsonl", deep / "agent-a0123456789abcdef.jsonl")
    out = io.StringIO()
    assert main(["import", str(tmp_path), "--no-traces", "--progress"], out) == 0
    err = capsys.readouterr().err
    total = -(-(deep / "agent-a0123456789abcdef.jsonl").stat().st_size // 1000)
    assert err.rstrip().endswith(f"] {total}/{total} kB")
    header = out.getvalue().splitlines()[0].split()
    assert header == ["file", "turns", "ended", "reproduced", "to-cut", "first", "divergences"]
    assert "agent-a0123456789abcdef.jsonl" in out.getvalue().replace("\n", "").replace(" ", "")
    (tmp_path / "a-file").write_text("")
    code = main(["import", str(deep), "-o", str(tmp_path / "a-file" / "out")], io.StringIO())
    assert code == 2
    assert capsys.readouterr().err == (
        f"steploop: error: {tmp_path / 'a-file' / 'out'}: cannot create the output folder: "
        "Not a directory\n"
    )


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.spec("IMP-6", "IMP-19")
def test_a_steploop_run_written_as_a_transcript_imports_back(tmp_path: Path) -> None:
    """The demo run under the 2.1.88 profile, its transcript written by steploop/effects/transcript.py,
    imports into a trace that replays to the same messages (ids aside)."""
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE_PROJECT, ws)
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel.from_json(demo_script(), traits_for=tools.traits)

    async def go() -> None:
        with TraceRecorder(tmp_path / "run.jsonl", provenance=make_provenance(model=model)) as rec:
            r = rec.attach(
                run(
                    DEMO_PROMPT,
                    model=model,
                    tools=tools,
                    workspace=ws,
                    config=claude_code_2_1_88(),
                    permissions=PermissionPolicy(default="allow"),
                    transcript_path=tmp_path / "session.jsonl",
                    observer=rec,
                )
            )
            async with r:
                async for item in r:
                    if isinstance(item, PermissionRequest):
                        item.allow()

    anyio.run(go)
    reports: list[FileReport] = []
    summary = import_paths([tmp_path / "session.jsonl"], tmp_path / "out", on_file=reports.append)
    assert summary.problems == [] and summary.turns == 1
    (turn,) = reports[0].turns
    assert turn.reproduced, turn.divergence
    imported_trace = tmp_path / "out" / "session.t001.jsonl"
    assert replay_exact(imported_trace).ok
    assert _emitted(imported_trace) == _emitted(tmp_path / "run.jsonl")


def _emitted(path: Path) -> list[Any]:
    out = []
    for r in TraceReader(path):
        if isinstance(r, StepRecord):
            for e in r.effects:
                if isinstance(e, Emit) and isinstance(
                    e.item, (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)
                ):
                    out.append(comparable(e.item))
    return out


@pytest.mark.spec("W-PROTO-5", "IMP-11")
@pytest.mark.parametrize(
    "name",
    ["spotter/tool_heavy.jsonl", "spotter/subagent.jsonl", "ccviewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
     "fasthooks/sample_main_transcript.jsonl"],
)  # fmt: skip
def test_the_transcript_is_a_world_that_keeps_the_protocol(name: str) -> None:
    """Every turn, driven by steploop.reducer.drive.check_world: every request answered once, no answer
    to a withdrawn or unopened request, every event accepted."""
    src = read_source(DATA / name, name)
    for th in threads(src):
        for rep, driver, cfg, request, session, seg, _steps in _import_thread(src, th):
            world = turn_driver(seg.items, cfg, request, session)
            world.prepare(seg.items[1:], may_answer_empty=not driver.last_turn)
            conf = check_world(world, request, cfg, session)
            assert conf.ok, (rep.turn, conf.problems)
            assert conf.outcome is not None and conf.outcome.status == "finished"


def test_inserted_and_queued_events_appear_in_traces(traces: Path) -> None:
    """The slash command's expansion is a MessagesInserted step (R-INSERT-1); the subagent
    turn's interrupt an Interrupted step."""
    kinds: set[type] = set()
    for path in traces.glob("subagent.*.jsonl"):
        for r in TraceReader(path):
            if isinstance(r, StepRecord) and r.event is not None:
                kinds.add(type(r.event))
    assert MessagesInserted in kinds and Interrupted in kinds
    assert CommandQueued not in kinds


@pytest.mark.spec("IMP-23")
def test_a_sub_agent_file_names_the_call_that_started_it(tmp_path: Path) -> None:
    """2.1.x writes a sub-agent's run to <session>/subagents/agent-<id>.jsonl: its traces name
    the parent session and the Task call (found in the session file's agent_progress records),
    and the session's report lists the call with the sub-agent's traces."""
    session = "258c7280-ae70-4798-800f-63464d01a85d"
    proj = tmp_path / "proj"
    (proj / session / "subagents").mkdir(parents=True)
    shutil.copy(DATA / "spotter" / f"{session}.jsonl", proj)
    child = DATA / "spotter" / session / "subagents" / "agent-a881341.jsonl"
    shutil.copy(child, proj / session / "subagents")
    reports: list[FileReport] = []
    import_paths([proj], tmp_path / "out", on_file=reports.append)
    assert [r.file for r in reports] == [f"{session}/subagents/agent-a881341.jsonl", f"{session}.jsonl"]
    header = json.loads((tmp_path / "out" / "agent-a881341.side1.t001.jsonl").read_text().splitlines()[0])
    prov = header["provenance"]
    assert prov["parent_session"] == session
    assert prov["parent_tool_use_id"] == "toolu_01VmaERAwhb19LGUwu9GenaK"
    assert prov["parent_source"] == f"{session}.jsonl"
    assert prov["parent_link"] == "an agent_progress record"
    (call,) = [c for c in reports[1].children if c["tool_use_id"] == "toolu_01VmaERAwhb19LGUwu9GenaK"]
    assert call["agent_id"] == "a881341" and call["file"] == f"{session}/subagents/agent-a881341.jsonl"
    assert call["traces"] == ["agent-a881341.side1.t001.jsonl"] and call["line"] == 1473
