"""The strict trace validator (steploop/effects/trace/strict.py): its integer-digit limit, the
types a provenance value may have, and a record's ``type`` tag that is not a string, each with
the exact text a user reads (issue 27: an outside mutation run found them unpinned)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.trace import TraceError, TraceReader, record_sequence
from steploop.effects.trace.strict import (
    MAX_INT_DIGITS,
    MAX_LINE_DEPTH,
    limits_problem,
    provenance_problem,
    type_problem,
)
from steploop.reducer import Request, default
from steploop.reducer.events import Event, ModelBlockReceived, ModelCallFailed
from steploop.reducer.messages import TextBlock

TOO_MANY_DIGITS = f"an integer of more than {MAX_INT_DIGITS} digits"
EVENT_TAGS = (
    "command_queued, compaction_failed, compaction_finished, interrupted, messages_inserted, "
    "model_block_received, model_call_failed, model_response_ended, permission_answered, "
    "stop_hooks_finished, tool_finished, tool_use_summary_ready, tools_refreshed, "
    "wait_elapsed"
)


def _text(call_id: int, words: str) -> Event:
    return ModelBlockReceived(call_id=call_id, block=TextBlock(text=words))


def _failed(call_id: int) -> Event:
    return ModelCallFailed(call_id=call_id, kind="invalid_request", status=400, message="bad")


# --- the integer-digit limit -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (10**MAX_INT_DIGITS - 1, None),  # the most digits allowed
        (-(10**MAX_INT_DIGITS - 1), None),
        (10**MAX_INT_DIGITS, TOO_MANY_DIGITS),  # one digit more
        (-(10**MAX_INT_DIGITS), TOO_MANY_DIGITS),
        (0, None),
    ],
)
def test_an_integer_may_have_at_most_max_int_digits_digits(value: int, problem: str | None) -> None:
    """MAX_INT_DIGITS (100) digits pass, one more is refused, either sign, at any depth."""
    assert MAX_INT_DIGITS == 100
    assert limits_problem(value) == problem
    assert limits_problem({"a": [1, {"b": value}]}) == problem


def test_nesting_is_limited_to_max_line_depth_levels() -> None:
    """MAX_LINE_DEPTH (128) levels of arrays and objects pass; one more is refused."""
    deep: Any = 1
    for _ in range(MAX_LINE_DEPTH):
        deep = [deep]
    assert limits_problem(deep) is None
    assert (
        limits_problem({"x": deep})
        == f"nested deeper than {MAX_LINE_DEPTH} levels of arrays and objects"
    )


# --- provenance --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provenance", "problem"),
    [
        ({"created_at": "2026-01-01", "client": None, "n": 3, "ok": True, "x": None}, None),
        ({"client": "cli", "steploop": "0.1", "python": "3.11", "platform": "linux"}, None),
        ({"workspace": "/w"}, None),
        ([], "must be an object, got []"),
        ({"created_at": 1}, "created_at must be a string, got 1"),
        ({"steploop": None}, "steploop must be a string, got null"),
        ({"python": 3.11}, "python must be a string, got 3.11"),
        ({"platform": True}, "platform must be a string, got true"),
        ({"workspace": ["w"]}, 'workspace must be a string, got ["w"]'),
        ({"client": 1}, "client must be a string or null, got 1"),
        ({"n": 1.5}, "n must be a string, an integer, true, false or null, got 1.5"),
        ({"n": [1]}, "n must be a string, an integer, true, false or null, got [1]"),
        ({"n": {"a": 1}}, 'n must be a string, an integer, true, false or null, got {"a": 1}'),
    ],
)
def test_provenance_values_have_their_types(provenance: Any, problem: str | None) -> None:
    """An object of scalars: the known keys strings (client a string or null), any other key a
    string, an integer, a boolean or null; the first wrong value named with what it is."""
    assert provenance_problem(provenance) == problem


def test_a_bad_provenance_is_a_one_line_error_of_the_reader(tmp_path: Path) -> None:
    """Read from a file: the header's wrong provenance value is the error, with its line."""
    path = tmp_path / "t.jsonl"
    record_sequence(path, default(), Request(prompt="go"), [])
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["provenance"]["python"] = 3
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        list(TraceReader(path))
    assert "python must be a string, got 3" in str(err.value) and "\n" not in str(err.value)


# --- a record's type tag -----------------------------------------------------------------------


@pytest.mark.parametrize("tag", [1, ["model_call_failed"], None, {"t": 1}, True])
def test_a_type_tag_that_is_not_a_string_is_named_never_a_crash(tag: Any) -> None:
    """A tagged record whose ``type`` is not a string (a list would not even hash) gets the
    one problem naming the allowed types."""
    got = json.dumps({"type": tag})
    want = f"must be an object with a 'type' (one of {EVENT_TAGS}), got {got}"
    assert type_problem({"type": tag}, Event) == want
    assert type_problem({"type": tag}, Event, "trace") == want


def test_an_unknown_type_tag_and_a_missing_one_are_named() -> None:
    """An unknown tag names itself and the allowed ones; no tag at all is a missing type."""
    assert (
        type_problem({"type": "nope"}, Event)
        == f'has unknown type "nope"; expected one of {EVENT_TAGS}'
    )
    assert (
        type_problem({}, Event)
        == f"must be an object with a 'type' (one of {EVENT_TAGS}), got {{}}"
    )
    assert (
        type_problem([], Event) == f"must be an object with a 'type' (one of {EVENT_TAGS}), got []"
    )


def test_a_type_tag_that_is_not_a_string_in_a_trace_file_is_one_line(tmp_path: Path) -> None:
    """In a trace file: a step's event with a list as its ``type`` is one line naming the
    line and the field, no crash."""
    path = tmp_path / "t.jsonl"
    record_sequence(path, default(), Request(prompt="go"), [_text(1, "hi"), _failed(1)])
    lines = path.read_text(encoding="utf-8").splitlines()

    def refused(key: str, edit: Any) -> str:
        at = next(k for k, line in enumerate(lines) if f'"{key}"' in line)
        step = json.loads(lines[at])
        edit(step["event"])
        path.write_text("\n".join([*lines[:at], json.dumps(step), *lines[at + 1 :]]) + "\n")
        with pytest.raises(TraceError) as err:
            list(TraceReader(path))
        text = str(err.value)
        assert text.startswith(f"{path}:{at + 1}: step ") and "\n" not in text
        return text.split(": ", 2)[2]

    got = refused("model_call_failed", lambda ev: ev.update(type=["model_call_failed"]))
    assert got == "event: 'type' must be a string, got [\"model_call_failed\"]"


# --- the wording of field problems -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"type": "stop_hooks_finished", "hooks_id": "1"}, 'hooks_id must be an integer, got "1"'),
        (
            {"type": "stop_hooks_finished", "hooks_id": True},
            "hooks_id must be an integer, got true",
        ),
        ({"type": "stop_hooks_finished"}, "is missing field(s) 'hooks_id'"),
        (
            {"type": "stop_hooks_finished", "hooks_id": 1, "z": 0, "a": 0},
            "has unexpected field(s) 'a', 'z'",
        ),
        ({"type": "wait_elapsed", "wait_id": 1.0}, "wait_id must be an integer, got 1.0"),
        (
            {"type": "command_queued", "command_id": 1, "text": "x"},
            "command_id must be a string, got 1",
        ),
        (
            {"type": "interrupted", "kind": "gentle"},
            'kind must be one of "hard", "submit", got "gentle"',
        ),
    ],
)
def test_field_problems_are_worded_for_the_reader(data: dict[str, Any], problem: str) -> None:
    """Each kind of field problem, as the user reads it (the field named by its path)."""
    assert type_problem(data, Event) == problem
