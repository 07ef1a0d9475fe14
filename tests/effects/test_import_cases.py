"""The importer's rules one by one, and the derived cases of tests/data/cc-transcripts/derived/.

Each derived file is a shipped transcript changed by one edit (make_derived.py); expected.json
pins the exact problem lines and the verdict for it.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import attrs
import pytest

from steploop.effects.importer.compare import comparable
from steploop.effects.importer.convert import OPAQUE_PREFIX, Converter, user_origin
from steploop.effects.importer.driver import api_failure_kind
from steploop.effects.importer.infer import (
    bash_is_read_only,
    config_for,
    stop_reason_for,
    traits_for,
)
from steploop.effects.importer.segment import classify
from steploop.effects.importer.session import _ranges, import_file
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    OpaqueBlock,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

ROOT = Path(__file__).resolve().parents[2]
DERIVED = ROOT / "tests" / "data" / "cc-transcripts" / "derived"
EXPECTED: dict[str, dict[str, Any]] = json.loads((DERIVED / "expected.json").read_text("utf-8"))


@pytest.mark.spec("IMP-1", "IMP-4", "IMP-5", "IMP-6", "IMP-23")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_derived_case(name: str) -> None:
    """Each bad or unusual file: exactly its problem lines, then its turns and verdicts."""
    want = EXPECTED[name]
    rep = import_file(DERIVED / name, None, name=name)
    assert [f"{p.severity}: {p}" for p in rep.problems] == want["problems"]
    assert len(rep.turns) == want["turns"]
    assert sum(1 for t in rep.turns if t.reproduced) == want["reproduced"]
    causes: dict[str, int] = {}
    for t in rep.turns:
        if t.divergence is not None:
            causes[t.divergence.cause] = causes.get(t.divergence.cause, 0) + 1
    assert causes == want.get("causes", {})
    assert sum(1 for t in rep.turns if t.verdict == "reproduced-to-cut") == want.get("cut", 0)
    if "threads" in want:  # each thread's place: where it forks, its chains, its call (IMP-23)
        got = []
        for th in rep.thread_list:
            entry: dict[str, Any] = {
                "name": th.name, "own": th.own, "fork": th.fork,
                "chains": [c["root"] for c in th.chains], "turns": th.turns,
            }  # fmt: skip
            if th.parent is not None:
                entry["parent"] = th.parent["tool_use_id"]
            got.append(entry)
        assert got == want["threads"]


@pytest.mark.spec("Q-13", "IMP-19")
def test_stop_hook_feedback_reproduces_by_q13(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code writes a blocking hook's feedback before the stop-hook summary: the turn
    reproduces under the shipped profile (Q-13 on); with the flag off the machine writes the
    summary first and the divergence is named ``stop-hook-order``."""
    from steploop.effects.importer import session

    name = "stop_hook_feedback.jsonl"
    assert all(t.reproduced for t in import_file(DERIVED / name, None, name=name).turns)
    real = config_for

    def without_q13(*a: Any, **kw: Any) -> Any:
        cfg = real(*a, **kw)
        return attrs.evolve(cfg, compat=attrs.evolve(cfg.compat, stop_hook_summary_last=False))

    monkeypatch.setattr(session, "config_for", without_q13)
    rep = import_file(DERIVED / name, None, name=name)
    causes = [t.divergence.cause for t in rep.turns if t.divergence is not None]
    assert causes == ["stop-hook-order"]


def test_every_derived_file_is_expected() -> None:
    assert sorted(p.name for p in DERIVED.glob("*.jsonl")) == sorted(EXPECTED)


@pytest.mark.spec("IMP-1")
def test_nothing_raises_for_a_missing_or_empty_file(tmp_path: Path) -> None:
    missing = import_file(tmp_path / "gone.jsonl", None, name="gone.jsonl")
    assert [str(p) for p in missing.problems] == ["gone.jsonl: cannot be read: No such file or directory"]
    (tmp_path / "empty.jsonl").write_text("")
    empty = import_file(tmp_path / "empty.jsonl", None, name="empty.jsonl")
    assert [str(p) for p in empty.problems] == ["empty.jsonl: the file is empty; not a Claude Code transcript"]
    (tmp_path / "dir.jsonl").mkdir()
    assert import_file(tmp_path / "dir.jsonl", None, name="dir.jsonl").problems[0].line is None


@pytest.mark.spec("IMP-4", "IMP-5")
def test_the_uuid_lookup_table_probes_and_finds_repeats() -> None:
    """Keys that fall on the same slot (and wrap past the table's end) are all found; a key
    met again is a duplicate of its first row; an absent key is None."""
    from array import array

    from steploop.effects.importer.source import Index

    ix = Index()
    size = 2 * 4 + 1  # four rows: the table has nine slots
    ix.uuid = array("Q", [8, 8 + size, 8 + 2 * size, 8])  # all on the last slot
    assert [ix.find(k) for k in (8, 8 + size, 8 + 2 * size)] == [0, 1, 2]
    assert ix.find(8 + 3 * size) is None and ix.find(5) is None
    assert ix.duplicates() == [(3, 0)]


# --- IMP-6, IMP-7, IMP-8: records as messages ----------------------------------------------------


def _conv() -> tuple[Converter, list[tuple[int, str]]]:
    seen: list[tuple[int, str]] = []
    return Converter(lambda line, text: seen.append((line, text))), seen


@pytest.mark.spec("IMP-6")
def test_tool_result_lists_are_flattened_and_unknown_blocks_kept_as_text() -> None:
    conv, seen = _conv()
    msg = conv.message(
        {
            "type": "user",
            "uuid": "u1",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "text", "text": "line one"},
                            {"type": "image", "source": {"media_type": "image/png", "data": "AA"}},
                        ],
                    }
                ],
            },
        },
        7,
    )
    assert isinstance(msg, UserMessage) and msg.id == "u1"
    assert msg.content == (ToolResultBlock(tool_use_id="t1", content="line one\n[image: image/png]"),)
    assert seen == [(7, "a tool result holds an image; it is kept as the text '[image: image/png]'")]
    block = conv.block({"type": "web_search_tool_result", "content": []}, 9)
    assert block == OpaqueBlock(block_type="web_search_tool_result", raw='{"type":"web_search_tool_result","content":[]}')
    text = conv.message(
        {"type": "user", "uuid": "u2", "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "mcp_thing"}]}]}},
        10,
    )
    assert isinstance(text, UserMessage) and isinstance(text.content[0], ToolResultBlock)
    assert text.content[0].content.startswith(OPAQUE_PREFIX + "mcp_thing")
    tool = conv.block({"type": "tool_use", "id": "x", "name": "Read", "input": {"a": 1}, "caller": {}}, 9)
    assert tool == ToolUseBlock(id="x", name="Read", input={"a": 1})


@pytest.mark.spec("IMP-6")
def test_api_error_records_are_synthetic_errors() -> None:
    conv, _ = _conv()
    msg = conv.message(
        {
            "type": "assistant",
            "uuid": "a1",
            "isApiErrorMessage": True,
            "error": "rate_limit",
            "message": {"id": "x", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 429"}]},
        },
        3,
    )
    assert isinstance(msg, AssistantMessage)
    assert msg.api_error == ErrorInfo(kind="rate_limit", message="API Error: 429", category="rate_limit")
    bare = conv.message(
        {"type": "assistant", "uuid": "a2", "isApiErrorMessage": True,
         "message": {"id": "y", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: image"}]}},
        4,
    )  # fmt: skip
    assert isinstance(bare, AssistantMessage) and bare.api_error is not None
    assert bare.api_error.category == ""  # no `error` field written


@pytest.mark.spec("IMP-19", "R-CATEGORY-1")
def test_api_errors_are_compared_by_the_category_claude_code_writes() -> None:
    """The machine's kind is steploop's (``auth``); what is compared is the ``error`` field
    Claude Code writes (``authentication_failed``), as read from the record."""

    def err(info: ErrorInfo) -> AssistantMessage:
        return AssistantMessage(
            id="a", response_id="r", model="<synthetic>", content=(TextBlock(text=info.message),),
            api_error=info,
        )  # fmt: skip

    text = "API Error: 401 invalid x-api-key"
    machine = err(ErrorInfo(kind="auth", message=text, status=401, category="authentication_failed"))
    record = err(ErrorInfo(kind="authentication_failed", message=text, category="authentication_failed"))
    assert comparable(machine) == comparable(record)
    assert comparable(machine) != comparable(err(ErrorInfo(kind="rate_limit", message=text, category="rate_limit")))
    # "" means Claude Code writes no `error`; a record without one reads as ""
    none_written = err(ErrorInfo(kind="image_client", message="x", category=""))
    assert comparable(none_written) == comparable(err(ErrorInfo(kind="unknown", message="x", category="")))
    # steploop's texts (no category): the kind is what the transcript writer writes
    assert comparable(err(ErrorInfo(kind="auth", message=text))) != comparable(record)


@pytest.mark.spec("IMP-7")
@pytest.mark.parametrize(
    ("record", "content", "origin"),
    [
        ({}, (ToolResultBlock(tool_use_id="t", content="x"),), "tool_result"),
        ({"isCompactSummary": True}, (TextBlock(text="This session is being continued"),), "compact_summary"),
        ({}, (TextBlock(text="[Request interrupted by user]"),), "interrupt"),
        ({"isMeta": True}, (TextBlock(text="Stop hook feedback:\n[x]: no"),), "stop_hook_feedback"),
        ({"isMeta": True}, (TextBlock(text="<local-command-caveat>"),), "inserted"),
        ({}, (TextBlock(text="fix the bug"),), "prompt"),
    ],
)
def test_origins(record: dict[str, Any], content: tuple[Any, ...], origin: str) -> None:
    assert user_origin(record, content) == origin


@pytest.mark.spec("IMP-8")
@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"type": "assistant", "message": {"content": []}}, "block"),
        ({"type": "assistant", "isApiErrorMessage": True, "message": {"content": []}}, "api_error"),
        ({"type": "user", "message": {"content": "fix it"}}, "candidate"),
        ({"type": "user", "isMeta": True, "message": {"content": "expanded"}}, "inserted"),
        ({"type": "user", "isCompactSummary": True, "message": {"content": "summary"}}, "compact_summary"),
        ({"type": "system", "subtype": "compact_boundary", "compactMetadata": {"trigger": "auto"}}, "compact"),
        ({"type": "system", "subtype": "compact_boundary", "compactMetadata": {"trigger": "manual"}}, "manual_compact"),
        ({"type": "system", "subtype": "stop_hook_summary"}, "stop_summary"),
        ({"type": "system", "subtype": "turn_duration"}, "system_other"),
        ({"type": "system", "subtype": "api_error"}, "retry_notice"),
        ({"type": "attachment", "attachment": {"type": "hook_stopped_continuation", "hookName": "Stop"}}, "stop_prevent"),
        ({"type": "attachment", "attachment": {"type": "hook_stopped_continuation", "hookName": "PostToolUse:Edit"}}, "hook_stop"),
        ({"type": "attachment", "attachment": {"type": "queued_command"}}, "machine_attachment"),
        ({"type": "attachment", "attachment": {"type": "edited_text_file"}}, "inserted"),
    ],
)
def test_kinds(record: dict[str, Any], kind: str) -> None:
    conv, _ = _conv()
    record = {"uuid": "u", **record}
    assert classify(record, conv.message(record, 1)) == kind


# --- IMP-12..IMP-17: inference --------------------------------------------------------------------


@pytest.mark.spec("IMP-12")
@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("ls -la", True),
        ("git status && git diff --stat", True),
        ("grep -rn foo src | head -20", True),
        ("cat a.txt 2>&1 | wc -l", True),
        ("mix test", False),
        ("git commit -m x", False),
        ("echo hi > out.txt", False),
        ("ls $(pwd)", False),
        ("find . -name '*.py' -delete", False),
        ("bd close spotter-gqc.6", False),
        ("", False),
        ("echo 'unterminated", False),
    ],
)
def test_bash_read_only_check(command: str, read_only: bool) -> None:
    assert bash_is_read_only(command) is read_only


@pytest.mark.spec("IMP-12")
def test_traits_by_name() -> None:
    assert traits_for("Read", {}).concurrency_safe
    assert not traits_for("Edit", {}).concurrency_safe
    assert traits_for("Read", {}).max_result_chars is None
    bash = traits_for("Bash", {"command": "ls"}, cancels_siblings=True)
    assert bash.concurrency_safe and bash.cancels_siblings_on_error
    assert not traits_for("Bash", {"command": "ls"}).cancels_siblings_on_error
    assert traits_for("Sleep", {}).interrupt == "cancel"
    assert not traits_for("Nope", {}, known=False).known


@pytest.mark.spec("IMP-13")
def test_config_from_the_model() -> None:
    opus = config_for("claude-opus-4-6")
    assert opus.profile_name == "claude_code_2_1_88" and opus.max_output_tokens == 64_000
    assert opus.autocompact_threshold == 167_000
    assert config_for("claude-sonnet-4-5[1m]").context_window == 1_000_000
    assert config_for("claude-sonnet-4-5", largest_context=250_000).context_window == 1_000_000
    side = config_for("claude-haiku-4-5", query_source="agent:a1", agent_id="a1")
    assert side.is_subagent and side.query_source == "agent:a1"


@pytest.mark.spec("IMP-14")
def test_stop_reasons() -> None:
    assert stop_reason_for("end_turn", True, False) == "end_turn"
    assert stop_reason_for(None, True, False) == "tool_use"
    assert stop_reason_for(None, False, False) == "end_turn"
    assert stop_reason_for(None, False, True) == "max_tokens"


@pytest.mark.spec("IMP-17")
def test_api_error_kinds() -> None:
    def err(kind: str, text: str = "API Error: x") -> AssistantMessage:
        return AssistantMessage(
            id="a", response_id="r", model="<synthetic>", content=(TextBlock(text=text),),
            api_error=ErrorInfo(kind=kind, message=text),
        )

    assert api_failure_kind(err("rate_limit")) == "rate_limited"
    assert api_failure_kind(err("authentication_failed")) == "auth"
    assert api_failure_kind(err("invalid_request", "Prompt is too long")) == "prompt_too_long"
    assert api_failure_kind(err("something_new")) == "unknown"


# --- the driver on small synthetic transcripts ---------------------------------------------------


def _rec(kind: str, uuid: str, parent: str | None, **kw: Any) -> dict[str, Any]:
    return {
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "version": "2.1.88",
        "isSidechain": False, "timestamp": "2026-02-01T10:00:00.000Z", **kw,
    }  # fmt: skip


def _assistant(uuid: str, parent: str, mid: str, block: dict[str, Any]) -> dict[str, Any]:
    return _rec(
        "assistant", uuid, parent,
        message={"id": mid, "model": "claude-opus-4-6", "role": "assistant", "content": [block],
                 "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 5}},
    )  # fmt: skip


def _user(uuid: str, parent: str | None, content: Any, **kw: Any) -> dict[str, Any]:
    return _rec("user", uuid, parent, message={"role": "user", "content": content}, **kw)


def _write(tmp: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp / "s1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.spec("IMP-15", "IMP-18")
def test_queued_prompt_rides_along_and_permissions_are_allowed(tmp_path: Path) -> None:
    """A prompt queued during the turn and removed at its tool round becomes CommandQueued; the
    machine's queued_command attachment has no record (the file holds no attachments)."""
    path = _write(
        tmp_path,
        [
            _user("u1", None, "list the files"),
            _assistant("a1", "u1", "m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "mix test"}}),
            {"type": "queue-operation", "operation": "enqueue", "sessionId": "s1", "content": "also lint"},
            {"type": "queue-operation", "operation": "remove", "sessionId": "s1"},
            _user("r1", "a1", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
            _assistant("a2", "r1", "m2", {"type": "text", "text": "Done, and linted."}),
        ],
    )
    rep = import_file(path, None, name="s1.jsonl")
    (turn,) = rep.turns
    assert turn.reproduced, turn.divergence
    assert turn.inferred["IMP-18"] == 1 and turn.inferred["IMP-15"] == 1


@pytest.mark.spec("IMP-9")
def test_the_next_turn_starts_from_the_transcript_after_its_compaction(tmp_path: Path) -> None:
    """A manual /compact between turns: the second turn's session is the boundary, the summary
    and what follows it, not the whole history."""
    path = _write(
        tmp_path,
        [
            _user("u1", None, "hello"),
            _assistant("a1", "u1", "m1", {"type": "text", "text": "Hi."}),
            _rec("system", "b1", None, logicalParentUuid="a1", subtype="compact_boundary",
                 content="Conversation compacted", level="info",
                 compactMetadata={"trigger": "manual", "preTokens": 100}),
            _user("s1x", "b1", "This session is being continued...", isCompactSummary=True),
            _user("u2", "s1x", "and now?"),
            _assistant("a2", "u2", "m2", {"type": "text", "text": "Now this."}),
        ],
    )  # fmt: skip
    traces = tmp_path / "out"
    rep = import_file(path, traces, name="s1.jsonl")
    assert [t.reproduced for t in rep.turns] == [True, True]
    header = json.loads((traces / "s1.t002.jsonl").read_text().splitlines()[0])
    ids = [m["id"] for m in header["session"]["conversation"]]
    assert ids == ["b1", "s1x"]


@pytest.mark.spec("IMP-16", "IMP-22")
def test_a_turn_cut_off_waiting_for_the_model(tmp_path: Path) -> None:
    """A prompt and nothing after it: the call is left waiting, the turn reproduced up to the
    cut (the prompt), not a divergence."""
    path = _write(tmp_path, [_user("u1", None, "anyone there?")])
    (turn,) = import_file(path, None, name="s1.jsonl").turns
    assert turn.terminal is None and not turn.reproduced
    assert turn.verdict == "reproduced-to-cut" and turn.divergence is None
    assert turn.cut == (
        "after line 1: the transcript's turn ends here while the machine is streaming model call 1"
    )


@pytest.mark.spec("IMP-22")
def test_a_cut_after_a_tools_hook_progress_is_a_cut(tmp_path: Path) -> None:
    """Claude Code 2.1.x chains a tool's hook progress records into the session; a transcript
    cut right after one (a killed session, or a file's first lines) has no later turn: the
    turn is reproduced up to the cut, not diverged as if the session had gone on (seen on a
    2.1.20 transcript whose last record was a PostToolUse hook_progress)."""
    read = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}
    other = {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/b"}}
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]
    progress = {"type": "hook_progress", "hookEvent": "PostToolUse", "hookName": "PostToolUse:Read", "command": "h"}
    path = _write(
        tmp_path,
        [
            _user("u1", None, "read a and b"),
            _assistant("a1", "u1", "m1", read),
            _assistant("a2", "a1", "m1", other),
            _user("r1", "a2", result, toolUseResult={"type": "text"}, sourceToolAssistantUUID="a1"),
            _rec("progress", "p1", "r1", data=progress, toolUseID="t1", parentToolUseID="t1"),
        ],
    )  # fmt: skip
    (turn,) = import_file(path, None, name="s1.jsonl").turns
    assert (turn.verdict, turn.divergence) == ("reproduced-to-cut", None)
    assert turn.cut is not None and "waiting for Read t2" in turn.cut


@pytest.mark.spec("IMP-22")
def test_a_turn_cut_off_mid_tool_is_reproduced_up_to_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The transcript ends after a tool call with no result: the turn is compared up to the cut
    and reported as reproduced up to the cut, counted apart from the turns that ended, in the
    report, the table, the summary and the trace's provenance."""
    from steploop.effects.cli import main

    path = _write(
        tmp_path,
        [
            _user("u1", None, "hello"),
            _assistant("a1", "u1", "m1", {"type": "text", "text": "Hi."}),
            _user("u2", "a1", "run the tests"),
            _assistant("a2", "u2", "m2", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "mix test"}}),
        ],
    )  # fmt: skip
    out_dir = tmp_path / "out"
    text = io.StringIO()
    assert main(["import", str(path), "-o", str(out_dir)], text) == 0
    printed = " ".join(text.getvalue().split())
    assert "2 user turn(s): 1 ended, 1 reproduced exactly (100.0% of those that ended); 1 cut off by the transcript, reproduced up to the cut" in printed
    assert printed.split("first divergences ")[1].startswith(f"{path} 2 1 1 1 1 file(s)")
    report = json.loads((out_dir / "import-report.json").read_text(encoding="utf-8"))
    t1, t2 = report["reports"][0]["turns"]
    assert (t1["verdict"], t1["reproduced"]) == ("reproduced", True)
    assert (t2["verdict"], t2["reproduced"], t2["divergence"]) == ("reproduced-to-cut", False, None)
    assert t2["cut"] == (
        "after line 4: the transcript's turn ends here while the machine is running_tools, "
        "waiting for Bash t1"
    )
    assert report["reproduced"] == 1 and report["reproduced_to_cut"] == 1 and report["causes"] == {}
    header = json.loads((out_dir / "s1.t002.jsonl").read_text(encoding="utf-8").splitlines()[0])
    prov = header["provenance"]
    assert prov["verdict"] == "reproduced-to-cut" and prov["reproduced"] is False
    assert prov["cut"] == t2["cut"] and prov["cause"] is None
    capsys.readouterr()


@pytest.mark.spec("IMP-19")
def test_comparison_leaves_out_ids_and_what_was_given() -> None:
    a = AssistantMessage(id="m3", response_id="r1", model="x", content=(TextBlock(text="hi"),))
    b = AssistantMessage(id="uuid-1", response_id="msg_1", model="x", content=(TextBlock(text="hi"),), stop_reason="end_turn")
    assert comparable(a) == comparable(b)
    s1 = SystemMessage(id="m4", subtype="stop_hook_summary", text="Ran 1 stop hook(s)", level="suggestion")
    s2 = SystemMessage(id="u", subtype="stop_hook_summary", text="", level="suggestion")
    assert comparable(s1) == comparable(s2)
    u1 = UserMessage(id="m1", content=(TextBlock(text="x"),), origin="prompt")
    u2 = UserMessage(id="m1", content=(TextBlock(text="x"),), is_meta=True)
    assert comparable(u1) != comparable(u2)


@pytest.mark.spec("IMP-20")
def test_step_ranges() -> None:
    assert _ranges([1, 2, 3, 7, 9, 10]) == "1-3,7,9-10"
    assert _ranges([]) == ""


def test_the_driver_stops_where_step_rejects(tmp_path: Path) -> None:
    """A result for a tool call that does not exist: the driver stops there and says why."""
    path = _write(
        tmp_path,
        [
            _user("u1", None, "go"),
            _assistant("a1", "u1", "m1", {"type": "text", "text": "Sure."}),
            _user("r1", "a1", [{"type": "tool_result", "tool_use_id": "ghost", "content": "?"}]),
        ],
    )
    (turn,) = import_file(path, None, name="s1.jsonl").turns
    assert turn.divergence is not None and turn.divergence.line == 3
    assert "ghost" in turn.divergence.got and turn.divergence.cause == "unknown-call"


def _mutate(obj: Any, rnd: random.Random) -> None:
    values: list[Any] = [None, 1, -5, 2.5, "x", [], {}, [1], {"a": 1}, True, "", "toolu_x"]
    if isinstance(obj, dict) and obj:
        k = rnd.choice(list(obj))
        r = rnd.random()
        if r < 0.3:
            del obj[k]
        elif r < 0.6:
            obj[k] = rnd.choice(values)
        else:
            _mutate(obj[k], rnd)
    elif isinstance(obj, list) and obj:
        i = rnd.randrange(len(obj))
        r = rnd.random()
        if r < 0.3:
            del obj[i]
        elif r < 0.5:
            obj[i] = rnd.choice(values)
        else:
            _mutate(obj[i], rnd)


@pytest.mark.spec("IMP-1")
def test_records_with_anything_in_them_never_crash_the_importer(tmp_path: Path) -> None:
    """A real transcript with keys deleted and values replaced by values of other types, at
    random (fixed seeds; 400 seeds passed when this was written): every file imports, with its
    problems as lines, and every trace written replays exactly."""
    from steploop.effects.trace import replay_exact

    base = [
        json.loads(line)
        for line in (ROOT / "tests/data/cc-transcripts/spotter/tool_heavy.jsonl").read_text("utf-8").splitlines()
    ]
    for seed in range(25):
        rnd = random.Random(seed)
        records = json.loads(json.dumps(base))
        for _ in range(rnd.randint(1, 6)):
            _mutate(records[rnd.randrange(len(records))], rnd)
        path = tmp_path / f"m{seed}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        out = tmp_path / f"out{seed}"
        rep = import_file(path, out, name=path.name)
        assert all(str(p).startswith(f"{path.name}") for p in rep.problems)
        assert not any("importer failed" in p.message for p in rep.problems), rep.problems
        for trace in out.glob("*.jsonl"):
            assert replay_exact(trace).ok, (seed, trace.name)


# --- issue 27 item 18: reading odd files, and what a failed command leaves ---------------------


@pytest.mark.spec("IMP-1")
def test_a_utf8_bom_does_not_lose_the_first_record(tmp_path: Path) -> None:
    """A file saved with a UTF-8 byte-order mark: its first record is read like the others."""
    records = [
        _user("u1", None, "hello"),
        _assistant("a1", "u1", "m1", {"type": "text", "text": "Hi."}),
    ]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in records).encode())
    rep = import_file(path, None, name="bom.jsonl")
    assert rep.problems == []
    (turn,) = rep.turns
    assert turn.lines == (1, 2) and turn.reproduced


@pytest.mark.spec("IMP-1")
def test_a_control_character_is_named_once_with_its_column(tmp_path: Path) -> None:
    """json's message "Invalid control character at" is not followed by a second "at"."""
    path = tmp_path / "ctl.jsonl"
    good = json.dumps(_user("u1", None, "hello"))
    path.write_text('{"type": "user", "x": "a\tb"}\n' + good + "\n", encoding="utf-8")
    rep = import_file(path, None, name="ctl.jsonl")
    assert [str(p) for p in rep.problems] == [
        "ctl.jsonl:1: not valid JSON: Invalid control character at column 25; skipped"
    ]


@pytest.mark.spec("IMP-1")
def test_an_unknown_record_type_is_a_warning_once_per_type(tmp_path: Path) -> None:
    """A record type a newer Claude Code added is read past: one warning per type with its
    count and first line, and the file still imports without an error."""
    path = _write(
        tmp_path,
        [
            {"type": "hologram", "payload": 1},
            _user("u1", None, "hello"),
            {"type": "hologram", "payload": 2},
            {"type": "sparkle"},
            _assistant("a1", "u1", "m1", {"type": "text", "text": "Hi."}),
        ],
    )
    rep = import_file(path, None, name="s1.jsonl")
    assert [f"{p.severity}: {p}" for p in rep.problems] == [
        "warning: s1.jsonl:1: unknown record type 'hologram' (2 records, the first here); skipped",
        "warning: s1.jsonl:4: unknown record type 'sparkle'; skipped",
    ]
    assert [t.reproduced for t in rep.turns] == [True]


# --- IMP-23: whole files -------------------------------------------------------------------------


def _header(path: Path) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    return header


@pytest.mark.spec("IMP-23", "IMP-9")
def test_a_1_0_x_file_with_continuation_chains_imports_every_chain(tmp_path: Path) -> None:
    """1.0.x continues a compacted conversation as a new chain (a compact summary with no
    parent): every chain's turns are imported, each turn's conversation starting from the
    summary of its chain, and each interleaved sidechain is linked to its Task call."""
    name = "continuation_chains.jsonl"
    out = tmp_path / "out"
    rep = import_file(DERIVED / name, out, name=name)
    assert rep.problems == []
    main = [t for t in rep.turns if t.thread == "main"]
    assert [(t.turn, t.chain, t.reproduced) for t in main] == [(1, 1, True), (2, 2, True), (3, 3, True)]
    (info,) = [t for t in rep.thread_list if t.name == "main"]
    assert [(c["root"], c["link"], c["continues"]) for c in info.chains] == [
        (2, None, None), (434, "compact summary", 433), (440, "compact summary", 439),
    ]  # fmt: skip
    # turn 2 starts from the first summary, turn 3 from the second (not from turn 1's records)
    for turn, summary in ((2, "c0c0c0c0-0000-4000-8000-000000000001"), (3, "c0c0c0c0-0000-4000-8000-000000000002")):
        header = _header(out / f"continuation_chains.t00{turn}.jsonl")
        assert [m["id"] for m in header["session"]["conversation"]] == [summary]
        assert header["provenance"]["chain"] == turn
    # the sidechains, each with the call that started it, in the trace and in both reports
    sides = sorted(out.glob("continuation_chains.side*.t001.jsonl"))
    assert len(sides) == 5
    prov = _header(out / "continuation_chains.side1.t001.jsonl")["provenance"]
    assert prov["parent_tool_use_id"] == "toolu_01LS6tcVd796SbQKmZqeVnWY"
    assert prov["parent_session"] == "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    assert prov["parent_link"] == "the call's prompt is its first record's text"
    calls = {c["tool_use_id"]: c for c in rep.children}
    assert calls["toolu_01LS6tcVd796SbQKmZqeVnWY"]["traces"] == ["continuation_chains.side1.t001.jsonl"]
    assert sum(1 for c in rep.children if c["traces"]) == 5


@pytest.mark.spec("IMP-23")
def test_a_branch_is_imported_from_where_it_forks(tmp_path: Path) -> None:
    """A rewound prompt leaves a branch: it is imported as its own thread, its turn starting
    from the conversation up to the fork, its trace saying where it forks."""
    name = "branch.jsonl"
    out = tmp_path / "out"
    rep = import_file(DERIVED / name, out, name=name)
    (branch,) = [t for t in rep.turns if t.thread == "main branch 1"]
    assert branch.turn == 3 and branch.reproduced and branch.lines == (19, 20)
    header = _header(out / "branch.b1.t003.jsonl")
    assert header["provenance"]["forks_from"] == "main after line 17"
    assert header["request"]["prompt"] == "actually, delete it"
    # the conversation up to the fork: turns 1 and 2 of main, not main's turn 3
    main3 = _header(out / "branch.t003.jsonl")
    assert header["session"] == main3["session"]


@pytest.mark.spec("IMP-23")
def test_a_2_0_x_agent_file_beside_its_session_names_its_call(tmp_path: Path) -> None:
    """2.0.x writes agent-<id>.jsonl beside <session>.jsonl; the session's Task result names
    the agent (toolUseResult.agentId): the agent's trace names the call, the session's report
    lists the agent's file and traces beside the call; the agent file is read first."""
    call = {"type": "tool_use", "id": "toolu_T1", "name": "Task", "input": {"prompt": "look around"}}
    result = _user(
        "r1", "a1", [{"type": "tool_result", "tool_use_id": "toolu_T1", "content": "found it"}],
        toolUseResult={"status": "completed", "agentId": "ab12cd3", "totalDurationMs": 5},
    )  # fmt: skip
    session = [
        _user("u1", None, "explore"),
        _assistant("a1", "u1", "m1", call),
        result,
        _assistant("a2", "r1", "m2", {"type": "text", "text": "It found it."}),
    ]
    agent = [
        _user("x1", None, "look around", isSidechain=True, agentId="ab12cd3"),
        {**_assistant("x2", "x1", "mx", {"type": "text", "text": "found it"}), "isSidechain": True, "agentId": "ab12cd3"},
    ]  # fmt: skip
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "s1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in session), "utf-8")
    (proj / "agent-ab12cd3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in agent), "utf-8")
    from steploop.effects.importer import import_paths

    reports: list[Any] = []
    import_paths([proj], tmp_path / "out", on_file=reports.append)
    assert [r.file for r in reports] == ["agent-ab12cd3.jsonl", "s1.jsonl"]
    (side,) = reports[0].thread_list
    assert side.parent == {
        "session_id": "s1", "tool_use_id": "toolu_T1", "line": 3, "file": "s1.jsonl",
        "how": "the call's toolUseResult.agentId",
    }  # fmt: skip
    (child,) = reports[1].children
    assert child == {
        "tool_use_id": "toolu_T1", "line": 2, "tool": "Task", "agent_id": "ab12cd3",
        "file": "agent-ab12cd3.jsonl", "thread": "sidechain ab12cd3",
        "traces": ["agent-ab12cd3.side1.t001.jsonl"],
    }  # fmt: skip
