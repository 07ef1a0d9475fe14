"""A session transcript in Claude Code's JSONL format (queryloop-facts section 12).

:class:`TranscriptWriter` appends one JSON object per line for every message the loop yields,
so that hook scripts written for Claude Code can read the file at ``transcript_path`` unchanged:

* every record carries ``type`` (``user`` / ``assistant`` / ``system`` / ``attachment``),
  ``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``, ``cwd``, ``version``,
  ``isSidechain: false`` and ``userType: "external"``;
* ``uuid`` is derived (uuid5) from the session id and the steploop message id, so the same
  message always gets the same uuid and a :class:`~reducer.messages.Tombstone` can find it;
* ``parentUuid`` is the previous record's uuid (``null`` at the root), except that a
  ``tool_result`` user record points at the assistant record that holds its ``tool_use``;
* content blocks are spelled as the Anthropic Messages API spells them.

The writer only ever receives conversation messages, so it cannot leak credentials: nothing
from the environment or the configuration is written.

I/O is blocking but small (one line per message, flushed); the ``a``-prefixed coroutines run
the same operations in a worker thread for callers that must not block the event loop. Await
them one at a time, in the order the messages were yielded.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import anyio.to_thread

from reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    Emitted,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

__all__ = [
    "TRANSCRIPT_NAMESPACE",
    "TranscriptWriter",
    "block_to_api",
    "format_timestamp",
    "record_uuid",
]

#: Namespace of the uuid5 record ids (fixed forever: changing it changes every uuid).
TRANSCRIPT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://steploop.invalid/transcript")

_MESSAGE_TYPES = frozenset({"user", "assistant", "system", "attachment"})


def record_uuid(session_id: str, message_id: str) -> str:
    """The transcript uuid of steploop message ``message_id`` in session ``session_id``."""
    return str(uuid.uuid5(TRANSCRIPT_NAMESPACE, f"{session_id}\x00{message_id}"))


def format_timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a ``Z``, as JavaScript's ``toISOString`` writes."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _utc_now() -> datetime:
    return datetime.now(UTC)


def block_to_api(block: Block) -> dict[str, Any]:
    """One content block in the Anthropic Messages API spelling."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
            "is_error": block.is_error,
        }
    if isinstance(block, ImageBlock):
        kind = "image" if block.media_type.startswith("image/") else "document"
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
        return {"type": kind, "source": source}
    raise TypeError(f"unknown content block {type(block).__name__}")


def _usage_to_api(usage: Usage | None) -> dict[str, int]:
    u = usage if usage is not None else Usage()
    return {
        "input_tokens": u.input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "output_tokens": u.output_tokens,
    }


def _user_content(message: UserMessage) -> str | list[dict[str, Any]]:
    # A plain prompt is written as a string (as Claude Code writes typed prompts); anything
    # else (tool results, several blocks, images) as a list of blocks.
    if len(message.content) == 1 and isinstance(message.content[0], TextBlock):
        return message.content[0].text
    return [block_to_api(b) for b in message.content]


def _dumps(record: dict[str, Any]) -> bytes:
    # json escapes "\n" inside strings, so one record is always exactly one line.
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (B-TEXT-1): written as its \udXXX escape
        return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


class TranscriptWriter:
    """Appends the yielded conversation to ``path`` as Claude Code JSONL.

    The file (and its parent directories) is created on the first :meth:`append`, with mode
    0600. If it already holds records (a resumed session), the chain continues from its last
    message record.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_id: str,
        cwd: str,
        version: str,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._path = Path(path)
        self._session_id = session_id
        self._cwd = cwd
        self._version = version
        self._clock = clock
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._closed = False
        self._loaded = False
        self._last_uuid: str | None = None
        self._tool_use_records: dict[str, str] = {}  # tool_use id -> uuid of its record

    @property
    def path(self) -> Path:
        return self._path

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def closed(self) -> bool:
        return self._closed

    def uuid_of(self, message_id: str) -> str:
        """The uuid the record of ``message_id`` has (or would have) in this session."""
        return record_uuid(self._session_id, message_id)

    # -- public, blocking ---------------------------------------------------------------

    def append(self, message: Message) -> dict[str, Any]:
        """Write one record for ``message``, flush it, and return the record written."""
        with self._lock:
            self._check_open()
            self._load_existing()
            record = self._build_record(message)
            handle = self._open_for_append()
            handle.write(_dumps(record))
            handle.flush()
            self._last_uuid = record["uuid"]
            if isinstance(message, AssistantMessage):
                for block in message.content:
                    if isinstance(block, ToolUseBlock):
                        self._tool_use_records[block.id] = record["uuid"]
            return record

    def tombstone(self, message_id: str) -> bool:
        """Remove the record of ``message_id`` by rewriting the file without it.

        Records whose ``parentUuid`` pointed at the removed record are re-linked to its parent,
        so the chain stays unbroken. Returns whether a record was removed.
        """
        with self._lock:
            self._check_open()
            self._load_existing()
            target = self.uuid_of(message_id)
            if self._file is not None:
                self._file.flush()
            try:
                lines = self._path.read_bytes().split(b"\n")
            except FileNotFoundError:
                return False
            removed: dict[str, Any] | None = None
            kept: list[bytes] = []
            for line in lines:
                record = _parse(line)
                if removed is None and record is not None and record.get("uuid") == target:
                    removed = record
                    continue
                kept.append(line)
            if removed is None:
                return False
            new_parent = removed.get("parentUuid")
            for i, line in enumerate(kept):
                record = _parse(line)
                if record is None:
                    continue
                changed = False
                if record.get("parentUuid") == target:
                    record["parentUuid"] = new_parent
                    changed = True
                if record.get("sourceToolAssistantUUID") == target:
                    del record["sourceToolAssistantUUID"]
                    changed = True
                if changed:
                    kept[i] = _dumps(record).rstrip(b"\n")
            self._replace_file(b"\n".join(kept))
            if self._last_uuid == target:
                self._last_uuid = new_parent if isinstance(new_parent, str) else None
            self._tool_use_records = {
                k: v for k, v in self._tool_use_records.items() if v != target
            }
            return True

    def record(self, item: Emitted) -> None:
        """Apply one item the loop yielded: append a message, honour a tombstone, skip the rest."""
        if isinstance(item, Tombstone):
            self.tombstone(item.message_id)
        elif isinstance(item, (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)):
            self.append(item)

    def close(self) -> None:
        """Close the file. Idempotent; appending afterwards raises ``ValueError``."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- public, async (a worker thread does the I/O) ---------------------------------------

    async def aappend(self, message: Message) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self.append, message)

    async def atombstone(self, message_id: str) -> bool:
        return await anyio.to_thread.run_sync(self.tombstone, message_id)

    async def arecord(self, item: Emitted) -> None:
        await anyio.to_thread.run_sync(self.record, item)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    # -- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"transcript {self._path} is closed")

    def _open_for_append(self) -> IO[bytes]:
        if self._file is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._file = os.fdopen(fd, "ab")
        return self._file

    def _replace_file(self, data: bytes) -> None:
        # Write the new content next to the file, then swap it in atomically. The append
        # handle points at the old inode, so it is closed first and reopened lazily.
        if self._file is not None:
            self._file.close()
            self._file = None
        fd, tmp = tempfile.mkstemp(prefix=f".{self._path.name}.", dir=self._path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, self._path)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def _load_existing(self) -> None:
        """Pick up the chain of a file that already has records (once)."""
        if self._loaded:
            return
        self._loaded = True
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return
        for line in data.split(b"\n"):
            record = _parse(line)
            if record is None or record.get("type") not in _MESSAGE_TYPES:
                continue
            uid = record.get("uuid")
            if not isinstance(uid, str):
                continue
            self._last_uuid = uid
            if record.get("type") == "assistant":
                content = (record.get("message") or {}).get("content")
                for block in content if isinstance(content, list) else ():
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        self._tool_use_records[str(block.get("id"))] = uid

    def _build_record(self, message: Message) -> dict[str, Any]:
        uid = self.uuid_of(message.id)
        parent = self._last_uuid
        source_tool: str | None = None
        if isinstance(message, UserMessage):
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    source_tool = self._tool_use_records.get(block.tool_use_id)
                    break
            if source_tool is not None:
                parent = source_tool
        record: dict[str, Any] = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self._cwd,
            "sessionId": self._session_id,
            "version": self._version,
            "type": message.TAG,
        }
        if isinstance(message, UserMessage):
            record["message"] = {"role": "user", "content": _user_content(message)}
            if message.is_meta:
                record["isMeta"] = True
            if source_tool is not None:
                record["sourceToolAssistantUUID"] = source_tool
        elif isinstance(message, AssistantMessage):
            record["message"] = {
                "id": message.response_id,
                "type": "message",
                "role": "assistant",
                "model": message.model,
                "content": [block_to_api(b) for b in message.content],
                "stop_reason": message.stop_reason,
                "stop_sequence": None,
                "usage": _usage_to_api(message.usage),
            }
            if message.api_error is not None:
                record["isApiErrorMessage"] = True
                record["error"] = message.api_error.kind
                if message.api_error.status is not None:
                    record["apiErrorStatus"] = message.api_error.status
        elif isinstance(message, SystemMessage):
            record["subtype"] = message.subtype
            record["content"] = message.text
            record["level"] = message.level
        elif isinstance(message, AttachmentMessage):
            attachment: dict[str, Any] = {"type": message.attachment_type}
            attachment.update((k, v) for k, v in message.data if k != "type")
            record["attachment"] = attachment
        else:  # pragma: no cover - the Message union is closed
            raise TypeError(f"not a message: {type(message).__name__}")
        record["uuid"] = uid
        record["timestamp"] = format_timestamp(self._clock())
        return record


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
