"""Build tests/data/malformed_traces/: one small broken trace per way a trace can be wrong.

Each file is derived from one valid trace (a two-round turn recorded with ``record_sequence``)
by one edit; ``expected.json`` maps each file to the exact one-line error ``steploop replay``
must print for it. The messages below are written by hand: they are the specification, and
tests/effects/test_trace.py checks the code against them.

Run from the repository root: ``.venv/bin/python tests/data/make_malformed.py``
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from steploop.effects.trace import record_sequence  # noqa: E402
from steploop.reducer import Request, default  # noqa: E402
from steploop.reducer.events import (  # noqa: E402
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage  # noqa: E402

OUT = Path(__file__).resolve().parent / "malformed_traces"
PROVENANCE = {"created_at": "2026-01-01T00:00:00Z", "client": "hand-written", "steploop": "test"}
EVENTS: list[Event] = [
    ModelBlockReceived(call_id=1, block=TextBlock(text="Let me read it.")),
    ModelBlockReceived(
        call_id=1,
        block=ToolUseBlock(id="toolu_1", name="Read", input={"file_path": "a.py"}),
        tool=ToolTraits(concurrency_safe=True),
    ),
    ModelResponseEnded(
        call_id=1,
        model="claude-sonnet-4-5",
        stop_reason="tool_use",
        usage=Usage(input_tokens=100, output_tokens=10),
    ),
    PermissionAnswered(generation=1, tool_use_id="toolu_1", decision="allow"),
    ToolFinished(generation=1, tool_use_id="toolu_1", content="print('hi')"),
    ModelBlockReceived(call_id=2, block=TextBlock(text="It prints hi.")),
    ModelResponseEnded(
        call_id=2,
        model="claude-sonnet-4-5",
        stop_reason="end_turn",
        usage=Usage(input_tokens=150, output_tokens=5),
    ),
    StopHooksFinished(hooks_id=1),
]
# Lines of the valid trace (1-based), for reference:
#  1 header            5 step 1 (text)        9 step 4 (permission)   13 step 6 (text)
#  2 message m1        6 message m3          10 message m4            14 step 7 (end)
#  3 step 0 (start)    7 step 2 (tool_use)   11 step 5 (tool result)  15 step 8 (hooks)
#  4 message m2        8 step 3 (end)        12 message m5            16 end

EVENT_TAGS = (
    "command_queued, compaction_failed, compaction_finished, interrupted, messages_inserted, "
    "model_block_received, "
    "model_call_failed, model_response_ended, permission_answered, stop_hooks_finished, "
    "tool_finished, tool_use_summary_ready, tools_refreshed, wait_elapsed"
)
EFFECT_TAGS = (
    "acknowledge_commands, ask_permission, call_model, cancel_compaction, cancel_model_call, "
    "cancel_refresh_tools, cancel_stop_hooks, cancel_tools, cancel_wait, compact, emit, finish, "
    "persist_tool_result, refresh_tools, run_stop_hooks, start_tool, summarize_tool_use, wait"
)
TERMINAL_TAGS = (
    "aborted_streaming, aborted_tools, blocking_limit, completed, hook_stopped, image_error, "
    "max_turns, model_error, prompt_too_long, stop_hook_prevented"
)
TRANSITION_TAGS = (
    "aborted_streaming, aborted_tools, blocking_limit, collapse_drain_retry, completed, "
    "hook_stopped, image_error, max_output_tokens_escalate, max_output_tokens_recovery, "
    "max_turns, model_error, next_turn, prompt_too_long, reactive_compact_retry, "
    "stop_hook_blocking, stop_hook_prevented, token_budget_continuation"
)
STREAMING_ACCEPTS = (
    "CommandQueued, Interrupted, MessagesInserted, ModelBlockReceived, ModelCallFailed, "
    "ModelResponseEnded, "
    "PermissionAnswered, ToolFinished, ToolUseSummaryReady"
)
TRUNCATED = (
    "the last line is truncated (the run was probably killed while writing it); "
    "`steploop resume` drops it"
)


def base_lines() -> list[str]:
    """The valid trace, one JSON text per line (no newlines)."""
    tmp = OUT / "_base.tmp"
    record_sequence(
        tmp,
        default(),
        Request(prompt="What does a.py print?"),
        EVENTS,
        provenance=PROVENANCE,
    )
    lines = tmp.read_text(encoding="utf-8").splitlines()
    tmp.unlink()
    assert len(lines) == 16, len(lines)
    return lines


def join(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def edit(n: int, fn: Callable[[dict[str, Any]], None]) -> Callable[[list[str]], bytes]:
    """Change the JSON record on line ``n`` (1-based) with ``fn``."""

    def build(lines: list[str]) -> bytes:
        obj = json.loads(lines[n - 1])
        fn(obj)
        out = list(lines)
        out[n - 1] = json.dumps(obj, separators=(",", ":"))
        return join(out)

    return build


def put(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        obj[key] = value

    return fn


def drop(key: str) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        del obj[key]

    return fn


def lines_op(fn: Callable[[list[str]], list[str]]) -> Callable[[list[str]], bytes]:
    return lambda lines: join(fn(list(lines)))


def raw(fn: Callable[[list[str]], bytes]) -> Callable[[list[str]], bytes]:
    return fn


def _set_event(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        obj["event"].update(changes)

    return fn


def _set_block_type(obj: dict[str, Any]) -> None:
    obj["event"]["block"]["type"] = "video"


def _set_effect(k: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        obj["effects"][k].update(changes)

    return fn


def _config(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        obj["config"][key] = value

    return fn


def _gate(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        obj["config"]["gates"][key] = value

    return fn


def _nested(n: int, depth: int) -> Callable[[list[str]], bytes]:
    """Line ``n``'s event at_ms replaced by an array nested ``depth`` levels (with the line's
    own two levels above it)."""

    def build(lines: list[str]) -> bytes:
        out = list(lines)
        out[n - 1] = out[n - 1].replace('"at_ms":0', '"at_ms":' + "[" * depth + "]" * depth, 1)
        assert out[n - 1] != lines[n - 1]
        return join(out)

    return build


def _number(n: int, text: str) -> Callable[[list[str]], bytes]:
    """Line ``n``'s event at_ms written as ``text``."""

    def build(lines: list[str]) -> bytes:
        out = list(lines)
        out[n - 1] = out[n - 1].replace('"at_ms":0', f'"at_ms":{text}', 1)
        assert out[n - 1] != lines[n - 1]
        return join(out)

    return build


def _message_type(obj: dict[str, Any]) -> None:
    obj["message"]["type"] = "fax"


def _message_id(obj: dict[str, Any]) -> None:
    obj["message"]["id"] = "m7"


def _truncate_at_line(n: int) -> Callable[[list[str]], bytes]:
    def build(lines: list[str]) -> bytes:
        head = join(lines[: n - 1])
        return head + lines[n - 1][: len(lines[n - 1]) // 2].encode("utf-8")

    return build


def _utf8_cut(lines: list[str]) -> bytes:
    return join(lines[:3]) + b'{"record":"message","id":"m2","message":{"text":"caf\xc3'


def _invalid_utf8(lines: list[str]) -> bytes:
    data = lines[3].encode("utf-8")
    at = data.index(b"Let me")
    broken = data[:at] + b"\xff" + data[at:]
    return join(lines[:3]) + broken + b"\n" + join(lines[4:])


def _binary(lines: list[str]) -> bytes:
    return join(lines[:1]) + b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\n"


def _bad_json(lines: list[str]) -> list[str]:
    lines[4] = lines[4][:-1]  # drop the closing brace of line 5
    return lines


CASES: list[tuple[str, Callable[[list[str]], bytes], str]] = [
    ("empty.jsonl", lambda lines: b"", "1: the file is empty; a trace starts with a header record"),
    (
        "not_json.jsonl",
        lines_op(lambda ls: ["hello world", *ls[1:]]),
        "1: not valid JSON: Expecting value at column 1",
    ),
    (
        "array_record.jsonl",
        lines_op(lambda ls: ["[1, 2, 3]", *ls[1:]]),
        "1: a record must be a JSON object, got list",
    ),
    (
        "no_record_key.jsonl",
        edit(3, drop("record")),
        "3: a record needs a 'record' key (header, message, step, end or resume)",
    ),
    (
        "unknown_record_type.jsonl",
        lines_op(lambda ls: [*ls[:3], '{"record":"snapshot","state":{}}', *ls[3:]]),
        '4: unknown record type "snapshot"; expected one of header, message, step, end, resume',
    ),
    (
        "missing_header.jsonl",
        lines_op(lambda ls: ls[1:]),
        "1: the trace must start with a header record, found a 'message' record",
    ),
    (
        "header_not_first.jsonl",
        lines_op(lambda ls: [*ls[:4], ls[0], *ls[4:]]),
        "5: a second header record; only line 1 holds the header",
    ),
    (
        "wrong_format.jsonl",
        edit(1, put("format", "other-trace")),
        "1: not a steploop trace: format is \"other-trace\", expected 'steploop-trace'",
    ),
    (
        "newer_version.jsonl",
        edit(1, put("version", 3)),
        "1: format version 3 is newer than this steploop reads (version 2); upgrade steploop",
    ),
    (
        "unknown_version.jsonl",
        edit(1, put("version", 0)),
        "1: unknown format version 0; this steploop reads versions 1 and 2",
    ),
    (
        "version_not_integer.jsonl",
        edit(1, put("version", "1")),
        '1: the format version must be an integer, got "1"',
    ),
    ("truncated_last_line.jsonl", raw(_truncate_at_line(11)), f"11: {TRUNCATED}"),
    ("truncated_mid_character.jsonl", raw(_utf8_cut), f"4: {TRUNCATED}"),
    ("invalid_utf8.jsonl", raw(_invalid_utf8), "4: not UTF-8 text (byte 0xff at column 119)"),
    (
        "binary_garbage.jsonl",
        raw(_binary),
        "2: binary data, not a JSON line (a NUL byte at column 8)",
    ),
    (
        "bad_json_middle.jsonl",
        lines_op(_bad_json),
        "5: not valid JSON: Expecting ',' delimiter at column 388",
    ),
    (
        "unknown_event_type.jsonl",
        edit(5, _set_event(type="model_exploded")),
        f"5: step 1: event: unknown type 'model_exploded'; expected one of {EVENT_TAGS}",
    ),
    (
        "unknown_effect_type.jsonl",
        edit(3, _set_effect(1, type="launch_rocket")),
        f"3: step 0: effect 1: unknown type 'launch_rocket'; expected one of {EFFECT_TAGS}",
    ),
    (
        "unknown_block_type.jsonl",
        edit(5, _set_block_type),
        "5: step 1: event: unknown type 'video'; expected one of image, opaque, redacted_thinking, "
        "text, thinking, tool_result, tool_use @ $.block",
    ),
    (
        "unknown_message_type.jsonl",
        edit(2, _message_type),
        "2: message 'm1': unknown type 'fax'; expected one of assistant, attachment, system, user",
    ),
    (
        "unknown_message_ref.jsonl",
        edit(5, _set_effect(0, item={"ref": "m99"})),
        "5: step 1: effect 0: refers to message 'm99', which no message record before this line "
        "binds (never written, or out of the window of 1024 message records)",
    ),
    (
        "message_ref_extra_key.jsonl",
        edit(5, _set_effect(0, item={"ref": "m2", "inline": True})),
        '5: step 1: effect 0: a message inside an event or effect must be written as {"ref": '
        '"<id>"}, got {"ref": "m2", "inline": true}',
    ),
    (
        "message_id_mismatch.jsonl",
        edit(2, _message_id),
        "2: message record: id 'm1' but the message's id is 'm7'",
    ),
    (
        "steps_out_of_order.jsonl",
        lines_op(lambda ls: [*ls[:7], *ls[8:]]),
        "8: step 4 follows step 2; expected step 3",
    ),
    (
        "first_step_not_zero.jsonl",
        edit(3, put("i", 1)),
        "3: the first step record must be step 0 (start), found step 1",
    ),
    (
        "start_with_event.jsonl",
        edit(3, put("event", {"type": "interrupted", "kind": "hard", "at_ms": 0})),
        '3: step 0 is start() and has "event": null',
    ),
    (
        "step_without_event.jsonl",
        edit(5, put("event", None)),
        "5: step 1 has no event; only step 0 (start) has none",
    ),
    (
        "illegal_event.jsonl",
        edit(5, put("event", {"type": "wait_elapsed", "wait_id": 1, "at_ms": 0})),
        "5: step 1: step() rejects the event: WaitElapsed is illegal in phase 'streaming'; "
        f"it accepts {STREAMING_ACCEPTS}",
    ),
    (
        "event_for_unknown_call.jsonl",
        edit(5, _set_event(call_id=7)),
        "5: step 1: step() rejects the event: ModelBlockReceived is illegal in phase "
        f"'streaming'; it accepts {STREAMING_ACCEPTS} (no model call 7 was made)",
    ),
    (
        "event_after_turn_ended.jsonl",
        lines_op(lambda ls: [*ls[:15], ls[14].replace('"i":8', '"i":9')]),
        "16: step 9: step() rejects the event: StopHooksFinished is illegal in phase 'done'; "
        "it accepts nothing (the turn has ended)",
    ),
    (
        "step_extra_key.jsonl",
        edit(7, put("colour", "red")),
        "7: step record: unexpected key(s) 'colour'",
    ),
    (
        "record_after_end.jsonl",
        lines_op(lambda ls: [*ls, ls[1]]),
        "17: a message record after the end record (line 16)",
    ),
    ("missing_digest.jsonl", edit(7, drop("digest")), "7: step record: missing 'digest'"),
    (
        "bad_digest.jsonl",
        edit(7, put("digest", "xyz")),
        "7: step 2: 'digest' must be 32 lowercase hex digits",
    ),
    (
        "bad_conversation.jsonl",
        edit(3, _set_effect(1, conversation=[])),
        '3: step 0: effect 1: a conversation must be written as {"length": n, "digest": '
        '"<32 hex digits>"}, got []',
    ),
    (
        "extra_event_field.jsonl",
        edit(5, _set_event(colour="red")),
        "5: step 1: event: extra fields found (colour) @ $",
    ),
    (
        "bad_config_key.jsonl",
        edit(1, _config("turbo", True)),
        "1: header: config: extra fields found (turbo) @ $",
    ),
    (
        "bad_config_value.jsonl",
        edit(1, _config("context_window", -5)),
        "1: header: config: context_window must be a positive integer, got -5",
    ),
    ("missing_request.jsonl", edit(1, drop("request")), "1: header record: missing 'request'"),
    (
        "bad_message_window.jsonl",
        edit(1, put("message_window", 0)),
        "1: header: 'message_window' must be at least 1, got 0",
    ),
    (
        "blank_line.jsonl",
        lines_op(lambda ls: [*ls[:5], "", *ls[5:]]),
        "6: a blank line; every line holds one JSON record",
    ),
    (
        "unknown_terminal.jsonl",
        edit(16, put("terminal", {"type": "exploded"})),
        f"16: end record: terminal: unknown type 'exploded'; expected one of {TERMINAL_TAGS}",
    ),
    (
        "end_names_wrong_step.jsonl",
        edit(16, put("i", 3)),
        "16: the end record names step 3, but the last step is 8",
    ),
    (
        "unknown_phase.jsonl",
        edit(7, put("phase", "dreaming")),
        '7: step 2: unknown phase "dreaming"',
    ),
    (
        "unknown_transition.jsonl",
        edit(11, put("transition", {"type": "teleport"})),
        f"11: step 5: transition: unknown type 'teleport'; expected one of {TRANSITION_TAGS}",
    ),
    (
        "step_index_not_integer.jsonl",
        edit(7, put("i", "2")),
        "7: step record: 'i' must be an integer, got \"2\"",
    ),
    (
        "effects_not_list.jsonl",
        edit(7, put("effects", {})),
        "7: step 2: 'effects' must be a list",
    ),
    # issue #17: values the converter used to coerce, and what escaped as a traceback
    (
        "bool_as_string.jsonl",
        edit(1, _gate("auto_compact", "false")),
        '1: header: config: gates.auto_compact must be true or false, got "false"',
    ),
    (
        "float_for_int.jsonl",
        edit(1, _config("max_turns", 2.9)),
        "1: header: config: max_turns must be an integer, got 2.9",
    ),
    (
        "list_for_name.jsonl",
        edit(1, _config("profile_name", ["default"])),
        '1: header: config: profile_name must be a string, got ["default"]',
    ),
    (
        "config_not_object.jsonl",
        edit(1, put("config", ["default"])),
        '1: header: config: must be an object, got ["default"]',
    ),
    (
        "session_not_object.jsonl",
        edit(1, put("session", "s1")),
        '1: header: session: must be an object, got "s1"',
    ),
    (
        "request_not_object.jsonl",
        edit(1, put("request", 7)),
        "1: header: request: must be an object, got 7",
    ),
    (
        "provenance_bad_value.jsonl",
        edit(1, put("provenance", {**PROVENANCE, "client": 3})),
        "1: header: provenance: client must be a string or null, got 3",
    ),
    (
        "event_field_wrong_type.jsonl",
        edit(5, _set_event(call_id="1")),
        '5: step 1: event: call_id must be an integer, got "1"',
    ),
    (
        "deep_nesting.jsonl",
        raw(_nested(5, 5_000)),
        "5: nested deeper than 128 levels of arrays and objects",
    ),
    (
        "nesting_past_limit.jsonl",
        raw(_nested(5, 127)),  # 2 levels of the record + 127 = 129
        "5: nested deeper than 128 levels of arrays and objects",
    ),
    (
        "huge_integer.jsonl",
        raw(_number(5, "9" * 5_000)),
        "5: an integer of more than 100 digits",
    ),
    ("nan_number.jsonl", raw(_number(5, "NaN")), "5: not valid JSON: NaN is not a JSON number"),
    (
        "overflowing_number.jsonl",
        raw(_number(5, "1e400")),
        "5: not valid JSON: 1e400 is out of the range of a JSON number",
    ),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.jsonl"):
        old.unlink()
    lines = base_lines()
    expected: dict[str, str] = {}
    for name, build, message in CASES:
        (OUT / name).write_bytes(build(lines))
        expected[name] = f"{name}:{message}"
    (OUT / "expected.json").write_text(
        json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {len(CASES)} malformed traces and expected.json to {OUT}")


if __name__ == "__main__":
    main()
