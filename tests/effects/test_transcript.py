"""TranscriptWriter: Claude Code JSONL records, the parentUuid chain, tombstones."""

from __future__ import annotations

import json
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.transcript import TranscriptWriter, format_timestamp, record_uuid
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    ImageBlock,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)

SESSION = "5f0c7a52-1a0e-4c1e-9d43-3b1f1d0a9e11"
MOMENT = datetime(2025, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _writer(path: Path, **kw: Any) -> TranscriptWriter:
    return TranscriptWriter(
        path, session_id=SESSION, cwd="/home/u/proj", version="0.1.0", clock=lambda: MOMENT, **kw
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


def _prompt(mid: str, text: str = "hello") -> UserMessage:
    return UserMessage(id=mid, content=(TextBlock(text=text),))


def _assistant(mid: str, block: Any, *, resp: str = "msg_1", **kw: Any) -> AssistantMessage:
    return AssistantMessage(id=mid, response_id=resp, model="claude-x", content=(block,), **kw)


def _tool_result(mid: str, tool_use_id: str, content: str = "ok") -> UserMessage:
    return UserMessage(
        id=mid,
        content=(ToolResultBlock(tool_use_id=tool_use_id, content=content),),
        origin="tool_result",
    )


def test_user_record_has_the_common_fields(tmp_path: Path) -> None:
    """A prompt becomes a user record with the session stamp and string content."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
    [rec] = _records(path)
    assert rec == {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/u/proj",
        "sessionId": SESSION,
        "version": "0.1.0",
        "type": "user",
        "message": {"role": "user", "content": "hello"},
        "uuid": record_uuid(SESSION, "u1"),
        "timestamp": "2025-01-02T03:04:05.678Z",
    }


def test_uuid_is_deterministic_uuid5() -> None:
    """Record uuids are uuid5 of (session, message id): stable, and distinct per session."""
    a = record_uuid(SESSION, "m1")
    assert a == record_uuid(SESSION, "m1")
    assert a != record_uuid("other-session", "m1")
    assert a != record_uuid(SESSION, "m2")
    assert uuid.UUID(a).version == 5


def test_timestamp_format_handles_naive_and_offset_times() -> None:
    """Timestamps are UTC ISO 8601 with milliseconds and Z, whatever the clock's zone."""
    from datetime import timedelta, timezone

    plus2 = datetime(2025, 1, 2, 5, 4, 5, 1_000, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(plus2) == "2025-01-02T03:04:05.001Z"
    assert format_timestamp(datetime(2025, 1, 2, 3, 4, 5)) == "2025-01-02T03:04:05.000Z"


def test_meta_user_and_block_content(tmp_path: Path) -> None:
    """A meta message carries isMeta; several blocks are written as an API block list."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
        w.append(
            UserMessage(
                id="u2",
                content=(
                    TextBlock(text="Stop hook feedback:\nfix it"),
                    ImageBlock(media_type="image/png", data="QUJD"),
                    ImageBlock(media_type="application/pdf", data="UERG"),
                ),
                is_meta=True,
                origin="stop_hook",
            )
        )
    first, second = _records(path)
    assert "isMeta" not in first
    assert second["isMeta"] is True
    assert second["message"]["content"] == [
        {"type": "text", "text": "Stop hook feedback:\nfix it"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "UERG"},
        },
    ]


def test_assistant_record_is_an_api_message_with_one_block(tmp_path: Path) -> None:
    """Assistant records hold the API message: id, model, one block, stop_reason, usage."""
    path = tmp_path / "s.jsonl"
    usage = Usage(
        input_tokens=10, output_tokens=5, cache_creation_input_tokens=3, cache_read_input_tokens=2
    )
    with _writer(path) as w:
        w.append(_assistant("a1", ThinkingBlock(thinking="hmm", signature="sig")))
        w.append(_assistant("a2", RedactedThinkingBlock(data="xyz")))
        w.append(_assistant("a3", TextBlock(text="done"), stop_reason="end_turn", usage=usage))
    recs = _records(path)
    assert [r["type"] for r in recs] == ["assistant"] * 3
    assert recs[0]["message"] == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        },
    }
    assert recs[1]["message"]["content"] == [{"type": "redacted_thinking", "data": "xyz"}]
    last = recs[2]["message"]
    assert last["content"] == [{"type": "text", "text": "done"}]
    assert last["stop_reason"] == "end_turn"
    assert last["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 2,
        "output_tokens": 5,
    }
    assert all("isApiErrorMessage" not in r for r in recs)


def test_api_error_assistant_is_flagged(tmp_path: Path) -> None:
    """A synthetic API-error assistant message carries isApiErrorMessage, error and status."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(
            AssistantMessage(
                id="e1",
                response_id="synthetic-1",
                model="<synthetic>",
                content=(TextBlock(text="API Error: overloaded"),),
                stop_reason="stop_sequence",
                api_error=ErrorInfo(kind="overloaded", message="overloaded", status=529),
            )
        )
    [rec] = _records(path)
    assert rec["isApiErrorMessage"] is True
    assert rec["error"] == "overloaded"
    assert rec["apiErrorStatus"] == 529
    assert rec["message"]["model"] == "<synthetic>"


def test_system_and_attachment_records(tmp_path: Path) -> None:
    """System records carry subtype/content/level; attachments carry {type, ...data}."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(SystemMessage(id="s1", subtype="api_error", text="retrying", level="warning"))
        w.append(
            AttachmentMessage(
                id="t1",
                attachment_type="max_turns_reached",
                data=(("maxTurns", 3), ("turnCount", 4), ("note", None), ("flag", True)),
            )
        )
    sys_rec, att_rec = _records(path)
    assert sys_rec["type"] == "system"
    assert (sys_rec["subtype"], sys_rec["content"], sys_rec["level"]) == (
        "api_error",
        "retrying",
        "warning",
    )
    assert att_rec["type"] == "attachment"
    assert att_rec["attachment"] == {
        "type": "max_turns_reached",
        "maxTurns": 3,
        "turnCount": 4,
        "note": None,
        "flag": True,
    }
    assert att_rec["parentUuid"] == sys_rec["uuid"]


def test_parent_chain_and_tool_results_point_at_their_tool_use(tmp_path: Path) -> None:
    """parentUuid follows the previous record; a tool_result points at its tool_use record."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
        w.append(_assistant("a1", TextBlock(text="let me look")))
        w.append(_assistant("a2", ToolUseBlock(id="toolu_A", name="Read", input={"p": "x"})))
        w.append(
            _assistant(
                "a3", ToolUseBlock(id="toolu_B", name="Grep", input={}), stop_reason="tool_use"
            )
        )
        w.append(_tool_result("r1", "toolu_A"))
        w.append(_tool_result("r2", "toolu_B", "found"))
        w.append(_assistant("a4", TextBlock(text="all done"), resp="msg_2"))
    recs = {r["uuid"]: r for r in _records(path)}
    u = {mid: record_uuid(SESSION, mid) for mid in ("u1", "a1", "a2", "a3", "r1", "r2", "a4")}
    assert recs[u["u1"]]["parentUuid"] is None
    assert recs[u["a1"]]["parentUuid"] == u["u1"]
    assert recs[u["a2"]]["parentUuid"] == u["a1"]
    assert recs[u["a3"]]["parentUuid"] == u["a2"]
    assert recs[u["r1"]]["parentUuid"] == u["a2"]
    assert recs[u["r1"]]["sourceToolAssistantUUID"] == u["a2"]
    assert recs[u["r2"]]["parentUuid"] == u["a3"]
    assert recs[u["a4"]]["parentUuid"] == u["r2"]
    assert recs[u["a2"]]["message"]["content"] == [
        {"type": "tool_use", "id": "toolu_A", "name": "Read", "input": {"p": "x"}}
    ]
    assert recs[u["r2"]]["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_B", "content": "found"}
    ]


def test_one_line_per_record_even_with_newlines_and_unicode(tmp_path: Path) -> None:
    """Newlines (and U+2028) inside text never split a record across lines."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1", "line one\nline two\u2028ünïcode"))
        w.append(_assistant("a1", TextBlock(text="x\r\ny")))
    raw = path.read_bytes().split(b"\n")
    assert raw[-1] == b""
    assert len(raw) == 3
    assert json.loads(raw[0])["message"]["content"] == "line one\nline two\u2028ünïcode"


def test_file_is_private_and_created_lazily(tmp_path: Path) -> None:
    """No file until the first append; then mode 0600, parent directories created."""
    path = tmp_path / "projects" / "-home-u-proj" / "s.jsonl"
    w = _writer(path)
    assert not path.exists()
    w.append(_prompt("u1"))
    w.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    """close() twice is fine; appending after close raises ValueError."""
    w = _writer(tmp_path / "s.jsonl")
    w.append(_prompt("u1"))
    w.close()
    w.close()
    assert w.closed
    with pytest.raises(ValueError):
        w.append(_prompt("u2"))


def test_tombstone_removes_the_record_and_relinks_the_chain(tmp_path: Path) -> None:
    """A tombstoned record disappears; its child is re-parented to its parent."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
        w.append(_assistant("a1", TextBlock(text="partial")))
        w.append(_assistant("a2", TextBlock(text="after")))
        before = _records(path)
        assert w.tombstone("a1") is True
        recs = _records(path)
        assert [r["uuid"] for r in recs] == [before[0]["uuid"], before[2]["uuid"]]
        assert recs[1]["parentUuid"] == before[0]["uuid"]
        # untouched records are byte-identical
        assert recs[0] == before[0]
        # the writer keeps appending to the rewritten file
        w.append(_assistant("a3", TextBlock(text="more")))
    recs = _records(path)
    assert len(recs) == 3
    assert recs[2]["parentUuid"] == before[2]["uuid"]


def test_tombstone_of_the_last_record_moves_the_chain_head_back(tmp_path: Path) -> None:
    """After tombstoning the newest record, the next record's parent is the one before it."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
        w.append(_assistant("a1", ToolUseBlock(id="toolu_X", name="Bash", input={})))
        w.record(Tombstone(message_id="a1"))
        w.append(_assistant("a2", TextBlock(text="retry"), resp="msg_2"))
        # a result for the removed tool_use falls back to the ordinary chain
        w.append(_tool_result("r1", "toolu_X"))
    recs = _records(path)
    assert [r["uuid"] for r in recs] == [
        record_uuid(SESSION, "u1"),
        record_uuid(SESSION, "a2"),
        record_uuid(SESSION, "r1"),
    ]
    assert recs[1]["parentUuid"] == record_uuid(SESSION, "u1")
    assert recs[2]["parentUuid"] == record_uuid(SESSION, "a2")
    assert "sourceToolAssistantUUID" not in recs[2]


def test_tombstone_of_an_unknown_id_changes_nothing(tmp_path: Path) -> None:
    """Tombstoning an id that was never written returns False and leaves the file alone."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        assert w.tombstone("nothing-yet") is False
        w.append(_prompt("u1"))
        data = path.read_bytes()
        assert w.tombstone("zzz") is False
    assert path.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_record_dispatches_emitted_items(tmp_path: Path) -> None:
    """record() appends messages, applies tombstones and ignores tool-use summaries."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.record(_prompt("u1"))
        w.record(ToolUseSummary(summary="read a file", preceding_tool_use_ids=("t",)))
        w.record(_assistant("a1", TextBlock(text="x")))
        w.record(Tombstone(message_id="u1"))
    [rec] = _records(path)
    assert rec["uuid"] == record_uuid(SESSION, "a1")
    assert rec["parentUuid"] is None


def test_resumed_writer_continues_the_chain(tmp_path: Path) -> None:
    """A new writer on an existing file links to its last record and its tool_use records."""
    path = tmp_path / "s.jsonl"
    with _writer(path) as w:
        w.append(_prompt("u1"))
        w.append(_assistant("a1", ToolUseBlock(id="toolu_R", name="Read", input={})))
        w.append(SystemMessage(id="s1", subtype="informational", text="note"))
    with _writer(path) as w2:
        w2.append(_tool_result("r1", "toolu_R"))
        w2.append(_assistant("a2", TextBlock(text="ok"), resp="msg_2"))
    recs = _records(path)
    assert recs[3]["parentUuid"] == record_uuid(SESSION, "a1")
    assert recs[4]["parentUuid"] == record_uuid(SESSION, "r1")


def test_default_clock_is_real_utc_time(tmp_path: Path) -> None:
    """Without an injected clock the timestamp is the current UTC time."""
    path = tmp_path / "s.jsonl"
    with TranscriptWriter(path, session_id=SESSION, cwd="/", version="v") as w:
        before = datetime.now(UTC)
        w.append(_prompt("u1"))
        after = datetime.now(UTC)
    stamp = datetime.strptime(_records(path)[0]["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    stamp = stamp.replace(tzinfo=UTC)
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= stamp <= after


@pytest.mark.anyio
async def test_async_variants_write_the_same_records(tmp_path: Path) -> None:
    """aappend/atombstone/arecord/aclose do the same work from a worker thread."""
    path = tmp_path / "s.jsonl"
    w = _writer(path)
    await w.aappend(_prompt("u1"))
    await w.aappend(_assistant("a1", TextBlock(text="gone soon")))
    await w.arecord(_assistant("a2", TextBlock(text="kept")))
    assert await w.atombstone("a1") is True
    await w.aclose()
    recs = _records(path)
    assert [r["uuid"] for r in recs] == [record_uuid(SESSION, "u1"), record_uuid(SESSION, "a2")]
    assert recs[1]["parentUuid"] == recs[0]["uuid"]


# -- held responses, usage, redaction -------------------------------------------------------


def test_records_of_a_response_wait_for_its_usage(tmp_path: Path) -> None:
    """record() holds a response's records until observe() sees it end: then all carry the
    usage and the last one the stop reason; anything else recorded first flushes them."""
    from steploop.reducer.events import ModelResponseEnded

    path = tmp_path / "s.jsonl"
    usage = Usage(input_tokens=7, output_tokens=3)
    with _writer(path) as w:
        w.record(_prompt("u1"))
        w.record(_assistant("a1", TextBlock(text="one"), resp="r1"))
        w.record(_assistant("a2", ToolUseBlock(id="t1", name="Read", input={"file_path": "x"}), resp="r1"))
        assert len(_records(path)) == 1  # held
        w.observe(ModelResponseEnded(call_id=1, model="m", stop_reason="tool_use", usage=usage), object(), ())
        recs = _records(path)
        assert [r["message"]["usage"]["input_tokens"] for r in recs[1:]] == [7, 7]
        assert [r["message"]["stop_reason"] for r in recs[1:]] == [None, "tool_use"]
        assert recs[1]["message"]["id"] == recs[2]["message"]["id"] and recs[1]["requestId"] == recs[2]["requestId"]
        w.record(_assistant("a3", TextBlock(text="cut"), resp="r2"))
        w.record(Tombstone(message_id="a3"))  # a held record is dropped, never written
        w.record(_assistant("a4", TextBlock(text="two"), resp="r3"))
    recs = _records(path)  # close() wrote the held a4
    assert [r["uuid"] for r in recs] == [record_uuid(SESSION, m) for m in ("u1", "a1", "a2", "a4")]
    assert recs[3]["parentUuid"] == recs[2]["uuid"]


@pytest.mark.spec("TR-1")
def test_secrets_are_redacted_on_values_before_encoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API key from the environment and extra secrets with quotes, backslashes or
    non-ASCII characters never reach the file, wherever they appear."""
    key = "sk-ant-api03-TESTKEY-0123456789"
    odd = 'pa"ss\\wörd-äö'
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    path = tmp_path / "s.jsonl"
    with _writer(path, secrets=[odd]) as w:
        w.append(_prompt("u1", f"my key is {key}"))
        w.append(_assistant("a1", ToolUseBlock(id="t1", name="Bash", input={"command": f"echo {odd}", key: 1})))
        w.append(_tool_result("u2", "t1", f"{odd}\n{key}"))
        assert w.redactions == 7  # the prompt, the input (a value and a key), the result and its toolUseResult
    raw = path.read_bytes()
    assert key.encode() not in raw and odd.encode() not in raw
    assert json.dumps(odd)[1:-1].encode() not in raw and json.dumps(odd, ensure_ascii=True)[1:-1].encode() not in raw
    assert raw.count(b"[REDACTED") == 7  # the same-length marker of steploop.effects.redaction
