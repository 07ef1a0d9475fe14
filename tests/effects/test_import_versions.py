"""Importing transcripts of every Claude Code version: each turn under its version's profile,
every divergence named (specs/import.md §8, §10, §11: VER-0..VER-10, IMP-17, IMP-19, IMP-21)."""

from __future__ import annotations

import functools
import io
import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from steploop.effects.cli import main
from steploop.effects.importer import CAUSES, import_file
from steploop.effects.importer.compare import summarize_pair
from steploop.effects.importer.driver import api_failure_kind
from steploop.effects.importer.session import FileReport, TurnReport
from steploop.effects.trace import StepRecord, TraceReader
from steploop.reducer.effects import CallModel
from steploop.reducer.events import ModelResponseEnded, ToolFinished
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    UserMessage,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cc-transcripts"
SHIPPED = sorted(line.split()[1] for line in (DATA / "SHA256SUMS").read_text().splitlines() if line)
DERIVED = sorted(p.name for p in (DATA / "derived").glob("*.jsonl"))


@functools.cache
def imported(name: str, profile: str | None = None) -> FileReport:
    return import_file(DATA / name, None, name=name, profile=profile)


def _cut_off(t: TurnReport) -> bool:
    """The transcript ends inside the turn (IMP-16, IMP-22)."""
    if getattr(t, "verdict", None) == "reproduced-to-cut":
        return True
    return t.divergence is not None and t.divergence.cause == "cut-off"


@pytest.mark.spec("VER-0", "IMP-19")
@pytest.mark.parametrize("name", SHIPPED)
def test_every_turn_that_ends_reproduces(name: str) -> None:
    """Each shipped real transcript, every turn under the profile of its records' version: every
    turn the transcript does not cut off ends and reproduces exactly."""
    rep = imported(name)
    for t in rep.turns:
        assert t.reproduced or _cut_off(t), (t.turn, t.version, t.divergence)


@pytest.mark.spec("IMP-19")
@pytest.mark.parametrize("name", [*SHIPPED, *(f"derived/{n}" for n in DERIVED)])
def test_no_divergence_is_unexplained(name: str) -> None:
    """No turn of a shipped or derived file has a divergence the causes do not name."""
    for profile in (None, "claude_code_2_1_88"):
        for t in imported(name, profile).turns:
            assert t.divergence is None or t.divergence.cause != "unexplained", t.divergence


@pytest.mark.spec("VER-1", "VER-3", "VER-4", "VER-0")
def test_the_erk_sessions_reproduce_only_under_their_versions() -> None:
    """Under the 2.1.88 profile (``--profile``) the 2.1.56 session's seven API-error turns end
    where Claude Code ran its stop hooks and wrote their summary (VER-1), and the 2.0.67 session calls the model where
    Claude Code compacted (VER-3, VER-4); under their own versions every turn that ends
    reproduces."""
    errs = imported("erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl", "claude_code_2_1_88")
    causes = [t.divergence.cause for t in errs.turns if t.divergence is not None]
    assert causes.count("stop-hook-summary") == 7
    mine = imported("erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl")
    assert sum(t.reproduced for t in mine.turns) == 11
    assert {t.profile for t in mine.turns} == {"claude_code_2_1_56"}
    comp = imported("erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl", "claude_code_2_1_88")
    (turn,) = comp.turns
    assert turn.divergence is not None and turn.divergence.cause == "auto-compact-timing"
    assert "preTokens 158956" in turn.divergence.got and "threshold 167,000" in turn.divergence.got
    (own,) = imported("erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl").turns
    assert own.reproduced and own.profile == "claude_code_2_0_67"


@pytest.mark.spec("VER-2", "VER-6", "VER-8")
@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("stop_hook_feedback_2_1_14.jsonl", "stop-hook-summary"),
        ("api_error_502_1_0.jsonl", "api-error-text"),
        ("usage_limit_1_0.jsonl", "api-error-text"),
    ],
)
def test_the_older_shapes_reproduce_under_their_versions_only(name: str, cause: str) -> None:
    """2.1.14 writes no stop-hook summary (VER-2); 1.0.x writes API errors without an `error`
    field and a usage limit unprefixed (VER-6): each reproduces under its version and not under
    the 2.1.88 profile, where the divergence is named."""
    assert all(t.reproduced for t in imported(f"derived/{name}").turns)
    other = imported(f"derived/{name}", "claude_code_2_1_88")
    assert [t.divergence.cause for t in other.turns if t.divergence is not None] == [cause]


@pytest.mark.spec("VER-0")
def test_each_turn_records_its_profile_and_how_it_was_chosen(tmp_path: Path) -> None:
    """The report and the trace's provenance say which profile each turn ran under and why."""
    rep = imported("spotter/tool_heavy.jsonl")
    assert {t.profile for t in rep.turns} == {"claude_code_2_1_38"}
    assert rep.turns[0].basis.startswith("2.1.38 -> ")
    assert "VER-1 legacy.stop_hooks_after_api_error known for 2.1.56, 2.1.88: used 2.1.56" in (
        rep.turns[0].basis
    )
    import_file(DATA / "spotter" / "short.jsonl", tmp_path, name="short.jsonl")
    reader = TraceReader(tmp_path / "short.t001.jsonl")
    list(reader)
    assert reader.header is not None
    assert reader.header.config.profile_name == "claude_code_2_1_38"
    assert reader.header.provenance["profile_basis"].startswith("2.1.38 -> ")
    forced = imported("spotter/tool_heavy.jsonl", "claude_code_2_1_88")
    assert {t.profile for t in forced.turns} == {"claude_code_2_1_88"}
    assert forced.turns[0].basis == (
        "--profile claude_code_2_1_88 (the records' version 2.1.38 not used)"
    )


# --- small synthetic transcripts -------------------------------------------------------------------


def _rec(kind: str, uuid: str, parent: str | None, version: str, **kw: Any) -> dict[str, Any]:
    return {
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "version": version,
        "isSidechain": False, "timestamp": "2026-02-01T10:00:00.000Z", **kw,
    }  # fmt: skip


def _assistant(
    uuid: str, parent: str, mid: str, block: dict[str, Any], version: str, **usage: int
) -> dict[str, Any]:
    u = {"input_tokens": 10, "output_tokens": 5, **usage}
    return _rec(
        "assistant", uuid, parent, version,
        message={"id": mid, "model": "claude-opus-4-6", "role": "assistant", "content": [block],
                 "stop_reason": None, "usage": u},
    )  # fmt: skip


def _user(uuid: str, parent: str | None, content: Any, version: str, **kw: Any) -> dict[str, Any]:
    return _rec("user", uuid, parent, version, message={"role": "user", "content": content}, **kw)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _api_error(uuid: str, parent: str, version: str) -> dict[str, Any]:
    rec = _assistant(uuid, parent, f"e-{uuid}", _text('API Error: 500 {"type":"error"}'), version)
    rec["message"]["model"] = "<synthetic>"
    return {**rec, "isApiErrorMessage": True, "error": "unknown"}


def _summary(uuid: str, parent: str, version: str) -> dict[str, Any]:
    return _rec(
        "system", uuid, parent, version, subtype="stop_hook_summary", hookCount=1,
        hookInfos=[{"command": "hook"}], hookErrors=[], preventedContinuation=False,
        stopReason="", hasOutput=False, level="suggestion",
    )  # fmt: skip


def _write(tmp: Path, records: list[dict[str, Any]], name: str = "s1.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.spec("VER-0", "VER-1", "VER-10")
def test_a_session_that_changes_version_mid_file_runs_each_turn_under_its_own(
    tmp_path: Path,
) -> None:
    """Claude Code updated between two prompts: the 2.1.56 turn's API error is followed by its
    stop hook's summary, the 2.1.88 turn's by nothing; both reproduce, each under its version
    (an HTTP 500 with `error: unknown` is a server error, retried until the machine gives up)."""
    recs = [
        _user("u1", None, "first", "2.1.56"),
        _api_error("e1", "u1", "2.1.56"),
        _summary("s1", "e1", "2.1.56"),
        _user("u2", "s1", "second", "2.1.88"),
        _api_error("e2", "u2", "2.1.88"),
    ]
    rep = import_file(_write(tmp_path, recs), None)
    assert [t.profile for t in rep.turns] == ["claude_code_2_1_56", "claude_code_2_1_88"]
    assert [t.reproduced for t in rep.turns] == [True, True], [t.divergence for t in rep.turns]


@pytest.mark.spec("VER-7")
def test_a_response_s_output_tokens_come_from_its_blocks_or_from_the_compaction_after_it(
    tmp_path: Path,
) -> None:
    """A record with message_start's usage (1 token out): the machine is told the estimate of
    the response's blocks; before an auto compaction, the output preTokens implies, so the
    machine compacts where Claude Code did (the estimate alone would leave it below 167,000)."""
    v = "2.1.39"
    big = {"cache_read_input_tokens": 166_790, "output_tokens": 1}
    recs = [
        _user("u1", None, "go", v),
        _assistant("a1", "u1", "m1", _text("x" * 400), v, **big),
        _assistant(
            "a2",
            "a1",
            "m1",
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}},
            v,
            **big,
        ),
        _user("r1", "a2", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], v),
        {
            **_rec(
                "system",
                "b1",
                None,
                v,
                subtype="compact_boundary",
                content="Conversation compacted",
                level="info",
                compactMetadata={"trigger": "auto", "preTokens": 167_400},
            ),
            "logicalParentUuid": "r1",
        },
        _user(
            "c1",
            "b1",
            "This session is being continued from a previous conversation.",
            v,
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        ),
        _assistant("a3", "c1", "m2", _text("done"), v, output_tokens=30),
    ]
    import_file(_write(tmp_path, recs), tmp_path / "out")
    reader = TraceReader(tmp_path / "out" / "s1.t001.jsonl")
    ends = [
        r.event
        for r in reader
        if isinstance(r, StepRecord) and isinstance(r.event, ModelResponseEnded)
    ]
    assert reader.header is not None and reader.header.provenance["reproduced"] is True
    assert "VER-7" in reader.header.provenance["inferred"]
    # 167,400 - 166,800 in - the result after it (1 token)
    assert ends[0].usage.output_tokens == 599
    assert ends[1].usage.output_tokens == 30  # recorded, more than message_start's
    # without the compaction's count, the estimate of the blocks (100 + 6) is not enough
    recs[4]["compactMetadata"]["preTokens"] = 10**9
    rep = import_file(_write(tmp_path, recs, "s2.jsonl"), None)
    (turn,) = rep.turns
    assert turn.divergence is not None and turn.divergence.cause == "auto-compact-timing"


@pytest.mark.spec("VER-7", "VER-3")
@pytest.mark.parametrize(("version", "output"), [("2.1.39", 100), ("2.1.88", 1)])
def test_the_estimate_stands_for_the_output_only_where_the_count_anchors_at_the_usage(
    tmp_path: Path, version: str, output: int
) -> None:
    """2.1.39 counted the last record's usage: its missing output is the blocks' estimate (400
    characters, 100 tokens); 2.1.88 anchors at the first record (message_start's usage) and
    estimates the blocks itself, so the recorded usage stands."""
    recs = [
        _user("u1", None, "go", version),
        _assistant("a1", "u1", "m1", _text("x" * 400), version, output_tokens=1),
    ]
    import_file(_write(tmp_path, recs), tmp_path / "out")
    reader = TraceReader(tmp_path / "out" / "s1.t001.jsonl")
    (end,) = [
        r.event
        for r in reader
        if isinstance(r, StepRecord) and isinstance(r.event, ModelResponseEnded)
    ]
    assert end.usage.output_tokens == output


@pytest.mark.spec("VER-8", "Q-14")
def test_a_non_streaming_answer_is_fed_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record holding a whole response after a connection error: fed after a broken stream,
    it reproduces as one message; with Q-14 off the machine writes two and the divergence is
    named `response-shape`."""
    from steploop.effects.importer import infer, session

    name = "derived/nonstreaming_answer.jsonl"
    rep = imported(name)
    assert all(t.reproduced for t in rep.turns)
    assert rep.turns[0].inferred.get("VER-8") == 1
    real = infer.config_for

    def without_q14(*a: Any, **kw: Any) -> Any:
        cfg = real(*a, **kw)
        return attrs.evolve(cfg, compat=attrs.evolve(cfg.compat, nonstreaming_single_message=False))

    monkeypatch.setattr(session, "config_for", without_q14)
    other = import_file(DATA / name, None, name=name)
    assert [t.divergence.cause for t in other.turns if t.divergence is not None] == [
        "response-shape"
    ]


@pytest.mark.spec("VER-9", "R-MODEL-2", "R-MODEL-1")
def test_a_skill_that_names_a_model_switches_the_rest_of_the_turn(tmp_path: Path) -> None:
    """A Skill's `toolUseResult.model`: its ToolFinished carries it, the turn's later calls ask
    for it, and the records after it (which name it) reproduce."""
    v = "2.1.56"
    recs = [
        _user("u1", None, "review it", v),
        _assistant(
            "a1",
            "u1",
            "m1",
            {"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "quick"}},
            v,
        ),
        _user(
            "r1",
            "a1",
            [{"type": "tool_result", "tool_use_id": "t1", "content": "Launching skill: quick"}],
            v,
            toolUseResult={
                "success": True,
                "commandName": "quick",
                "model": "claude-haiku-4-5-20251001",
            },
        ),
        _assistant("a2", "r1", "m2", _text("Looks fine."), v),
    ]
    recs[3]["message"]["model"] = "claude-haiku-4-5-20251001"
    import_file(_write(tmp_path, recs), tmp_path / "out")
    reader = TraceReader(tmp_path / "out" / "s1.t001.jsonl")
    steps = [r for r in reader if isinstance(r, StepRecord)]
    assert reader.header is not None and reader.header.provenance["reproduced"] is True
    (done,) = [r.event for r in steps if isinstance(r.event, ToolFinished)]
    assert done.model == "claude-haiku-4-5-20251001"
    calls = [e for r in steps for e in r.effects if isinstance(e, CallModel)]
    assert [c.model for c in calls] == ["claude-opus-4-6", "claude-haiku-4-5-20251001"]


@pytest.mark.spec("VER-10", "IMP-17")
def test_api_errors_without_a_category_are_named_by_their_status() -> None:
    """`unknown` or no `error` field: the HTTP status decides, else the text."""

    def err(text: str, kind: str = "unknown", status: int | None = None) -> AssistantMessage:
        return AssistantMessage(
            id="a", response_id="r", model="<synthetic>", content=(TextBlock(text=text),),
            api_error=ErrorInfo(kind=kind, message=text, status=status),
        )  # fmt: skip

    assert api_failure_kind(err("API Error: 500 {}")) == "server_error"
    assert api_failure_kind(err("API Error: 502 Bad Gateway")) == "server_error"
    assert api_failure_kind(err("API Error: 529 overloaded")) == "overloaded"
    assert api_failure_kind(err("API Error: 429 slow down")) == "rate_limited"
    assert api_failure_kind(err("API Error: 401 nope")) == "auth"
    assert api_failure_kind(err("API Error: 400 bad")) == "invalid_request"
    assert api_failure_kind(err("API Error: something", status=503)) == "server_error"
    assert api_failure_kind(err("Claude AI usage limit reached|1756890000")) == "rate_limited"
    assert api_failure_kind(err("API Error: Connection error.")) == "connection"
    assert api_failure_kind(err("API Error: Request timed out.")) == "connection"
    assert api_failure_kind(err("API Error: who knows")) == "unknown"
    assert api_failure_kind(err("API Error: 500 x", kind="rate_limit")) == "rate_limited"


@pytest.mark.spec("IMP-21", "I-3")
def test_an_interrupt_while_tools_run_writes_the_marker_for_tool_use() -> None:
    """Issue 27 item 10: where Claude Code wrote `[Request interrupted by user for tool use]` (a
    2.1.38 session whose user stopped two calls), the machine writes it too, after the calls'
    rejection texts, and the turn reproduces."""
    rep = imported("spotter/short.jsonl")
    (turn,) = rep.turns
    assert turn.reproduced and turn.terminal == "aborted_tools"


@pytest.mark.spec("IMP-21", "IMP-15", "VER-5", "R-PERM-3")
@pytest.mark.parametrize("version", ["2.0.76", "2.1.56"])
def test_a_call_the_user_refused_is_a_rejection_in_every_version(
    tmp_path: Path, version: str
) -> None:
    """Claude Code's rejection text, then `[Request interrupted by user for tool use]`: the
    call's permission is answered `rejected_by_user` where its result stands, so the machine
    writes the rejection text and the marker, with the streaming executor (2.1.x) or without
    it (2.0.x, whose interrupted calls would otherwise read `Interrupted by user`)."""
    reject = (
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if "
        "it was a file edit, the new_string was NOT written to the file). STOP what you are "
        "doing and wait for the user to tell you how to proceed."
    )
    recs = [
        _user("u1", None, "fix it", version),
        _assistant("a1", "u1", "m1", _text("I'll edit the file."), version),
        _assistant(
            "a2",
            "a1",
            "m1",
            {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "/a"}},
            version,
        ),
        _user(
            "r1",
            "a2",
            [{"type": "tool_result", "tool_use_id": "t1", "content": reject, "is_error": True}],
            version,
        ),
        _user("i1", "r1", [_text("[Request interrupted by user for tool use]")], version),
    ]
    (turn,) = import_file(_write(tmp_path, recs), None).turns
    assert turn.reproduced, turn.divergence
    assert turn.terminal == "aborted_tools" and turn.inferred["IMP-21"] == 1


@pytest.mark.spec("IMP-21")
def test_an_older_wording_of_a_stopped_call_is_an_interrupt(tmp_path: Path) -> None:
    """ "The user doesn't want to take this action right now…" before the marker: the user's
    interrupt (the machine ends the turn aborted_tools); the machine's own text differs and the
    divergence is named `interrupt-result-text`."""
    v = "2.1.39"
    old = (
        "The user doesn't want to take this action right now. STOP what you are doing and wait "
        "for the user to tell you how to proceed."
    )
    recs = [
        _user("u1", None, "go", v),
        _assistant(
            "a1",
            "u1",
            "m1",
            {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "/a"}},
            v,
        ),
        _user(
            "r1",
            "a1",
            [{"type": "tool_result", "tool_use_id": "t1", "content": old, "is_error": True}],
            v,
        ),
        _user("i1", "r1", [_text("[Request interrupted by user for tool use]")], v),
    ]
    (turn,) = import_file(_write(tmp_path, recs), None).turns
    assert turn.terminal == "aborted_tools"
    assert turn.divergence is not None and turn.divergence.cause == "interrupt-result-text"


# --- every divergence named: the summaries -----------------------------------------------------


def _assistant_msg(
    model: str, text: str = "same text", stop: str | None = None
) -> AssistantMessage:
    return AssistantMessage(
        id="x", response_id="r", model=model, content=(TextBlock(text=text),), stop_reason=stop
    )


@pytest.mark.spec("IMP-19")
def test_a_divergence_only_in_the_model_names_the_model() -> None:
    """Two records alike but for the model that served them: the lines name both models."""
    want, got = summarize_pair(
        _assistant_msg("claude-haiku-4-5"), _assistant_msg("claude-opus-4-6")
    )
    assert want != got
    assert "model claude-haiku-4-5" in want and "model claude-opus-4-6" in got


@pytest.mark.spec("IMP-19")
@pytest.mark.parametrize(
    ("a", "b", "shown"),
    [
        (_assistant_msg("m", "x" * 200 + "A"), _assistant_msg("m", "x" * 200 + "B"), "text at 200"),
        (_assistant_msg("m", stop="end_turn"), _assistant_msg("n", stop="tool_use"), "stop reason"),
        (
            UserMessage(id="u", content=(TextBlock(text="a"),), is_meta=True),
            UserMessage(id="u", content=(TextBlock(text="a"),)),
            "(meta)",
        ),
        (
            UserMessage(
                id="u", content=(ToolResultBlock(tool_use_id="t", content="r" * 300 + "1"),)
            ),
            UserMessage(
                id="u", content=(ToolResultBlock(tool_use_id="t", content="r" * 300 + "2"),)
            ),
            "content at 300",
        ),
        (
            SystemMessage(id="s", subtype="stop_hook_summary", text="", level="suggestion"),
            SystemMessage(id="s", subtype="stop_hook_summary", text="", level="info"),
            "level",
        ),
        (
            AttachmentMessage(id="a", attachment_type="queued_command", data=(("prompt", "a"),)),
            AttachmentMessage(id="a", attachment_type="queued_command", data=(("prompt", "b"),)),
            "prompt",
        ),
        (
            AssistantMessage(id="x", response_id="r", model="m", content=(TextBlock(text="a"),)),
            AssistantMessage(
                id="x",
                response_id="r",
                model="m",
                content=(TextBlock(text="a"), TextBlock(text="b")),
            ),
            "blocks 1",
        ),
    ],
)
def test_a_divergence_summary_shows_the_field_that_differs(a: Any, b: Any, shown: str) -> None:
    """The two lines of a divergence are never the same string, and they show the field."""
    want, got = summarize_pair(a, b)
    assert want != got
    assert shown in want + got


@pytest.mark.spec("IMP-19")
def test_every_cause_is_documented_and_every_documented_cause_exists() -> None:
    """specs/import.md's table of causes is CAUSES, both ways."""
    text = (ROOT / "specs" / "import.md").read_text("utf-8")
    table = text[text.index("| cause | meaning |") :].split("\n\n")[0]
    documented = re.findall(r"^\| `([a-z-]+)` \|", table, re.M)
    assert sorted(documented) == sorted(CAUSES)


@pytest.mark.spec("VER-0")
def test_the_import_command_takes_a_profile(tmp_path: Path) -> None:
    """``--profile`` runs every turn under the named profile; an unknown one is a usage error."""
    out = io.StringIO()
    src = str(DATA / "erk" / "8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl")
    code = main(["import", src, "-o", str(tmp_path / "a"), "--profile", "claude_code_2_1_88"], out)
    assert code == 0
    report = json.loads((tmp_path / "a" / "import-report.json").read_text("utf-8"))
    (turn,) = report["reports"][0]["turns"]
    assert turn["profile"] == "claude_code_2_1_88" and turn["reproduced"] is False
    assert main(["import", src, "-o", str(tmp_path / "b")], io.StringIO()) == 0
    report = json.loads((tmp_path / "b" / "import-report.json").read_text("utf-8"))
    assert report["reports"][0]["turns"][0]["reproduced"] is True
    assert main(["import", src, "-o", str(tmp_path / "c"), "--profile", "nope"], io.StringIO()) == 2
