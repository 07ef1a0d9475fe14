"""A session transcript in Claude Code's JSONL format (queryloop-facts section 12).

:class:`TranscriptWriter` appends one JSON object per line for every message the loop yields,
so that hook scripts written for Claude Code can read the file at ``transcript_path`` unchanged:

* every record carries ``type`` (``user`` / ``assistant`` / ``system`` / ``attachment``),
  ``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``, ``cwd``, ``version``,
  ``isSidechain: false`` and ``userType: "external"``;
* ``uuid`` is derived (uuid5) from the session id and the steploop message id, so the same
  message always gets the same uuid and a :class:`~steploop.reducer.messages.Tombstone` can find it;
* ``parentUuid`` is the previous record's uuid (``null`` at the root), except that a
  ``tool_result`` user record points at the assistant record that holds its ``tool_use``;
* content blocks are spelled as the Anthropic Messages API spells them;
* every assistant record of one response shares ``message.id`` (``msg_...``) and ``requestId``
  (``req_...``): the API's own, from the model client's ``api_ids`` (the message id and the
  ``request-id`` header, as Claude Code writes them), else derived from the session and the
  response; and carries the response's ``usage``; the last one carries its ``stop_reason``. So
  that these are known when they are written, :meth:`record` holds a response's records until
  it ends (:meth:`observe` sees ``ModelResponseEnded``) or anything else is recorded;
* ``sessionId`` is the one given, else a fresh UUID (as Claude Code's);
* a tool result carries ``toolUseResult``, the structured result of the built-in tools (Read,
  Write, Edit, Glob, Grep, Bash) as far as the tool's input and result text tell it, and
  ``"Error: ..."`` for an error;
* compaction writes a ``compact_boundary`` system record (``parentUuid: null``,
  ``logicalParentUuid``, ``compactMetadata {trigger, preTokens}``) and an ``isCompactSummary``
  user record; stop hooks a ``stop_hook_summary`` record with ``hookCount``, ``hookInfos``
  (command, durationMs), ``hookErrors``, ``preventedContinuation`` and ``stopReason``.

Secrets never reach the file: the values of ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_AUTH_TOKEN``,
any ``secrets=`` given, and the model client's credentials (a key given to the client directly,
a custom auth header) are replaced, in every string of a record before it is encoded, by the
same marker the trace uses (:mod:`steploop.effects.redaction`: ``[REDACTED***]`` of the
secret's length; so a secret with ``"``, ``\\`` or non-ASCII characters is found too).

I/O is blocking but small (one line per message, flushed); the ``a``-prefixed coroutines run
the same operations in a worker thread for callers that must not block the event loop. Await
them one at a time, in the order the messages were yielded.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import anyio.to_thread

from steploop.effects.redaction import REDACTED, Redactor
from steploop.reducer.effects import CallModel, Compact, Effect
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    ModelCallFailed,
    ModelResponseEnded,
    StopHooksFinished,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    Emitted,
    ImageBlock,
    Message,
    OpaqueBlock,
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
    "REDACTED",
    "TRANSCRIPT_NAMESPACE",
    "TranscriptWriter",
    "block_to_api",
    "format_timestamp",
    "record_uuid",
    "tool_use_result",
]

#: Namespace of the uuid5 record ids (fixed forever: changing it changes every uuid).
TRANSCRIPT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://steploop.invalid/transcript")

_MESSAGE_TYPES = frozenset({"user", "assistant", "system", "attachment"})

def _api_id(prefix: str, session_id: str, response_id: str) -> str:
    """A stable id in the API's shape for a response the client gave no id for."""
    digest = uuid.uuid5(TRANSCRIPT_NAMESPACE, f"{prefix}\x00{session_id}\x00{response_id}").hex
    return f"{prefix}_steploop{digest[:16]}"


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
        if block.citations is not None:  # as the API sent them (specs/ R-BLOCK-2)
            return {"type": "text", "text": block.text, "citations": json.loads(block.citations)}
        return {"type": "text", "text": block.text}
    if isinstance(block, OpaqueBlock):  # a server block, exactly as the API sent it
        return json.loads(block.raw)  # type: ignore[no-any-return]
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):  # is_error only when set, as Claude Code writes it
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
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


_NUMBERED = re.compile(r"^ *(\d+)\t(.*)$")
_TOOL_ERROR = re.compile(r"^<tool_use_error>(.*)</tool_use_error>$", re.S)


def _abs(cwd: str, raw: object) -> str:
    text = str(raw)
    return text if text.startswith("/") else os.path.join(cwd, text)


def tool_use_result(
    name: str, input: Mapping[str, Any], block: ToolResultBlock, cwd: str
) -> Any | None:
    """The ``toolUseResult`` Claude Code writes for a built-in tool's result (None for other
    tools): derived from the call's input and the result text."""
    if block.is_error:
        m = _TOOL_ERROR.match(block.content)
        return f"Error: {m.group(1) if m else block.content}"
    text = block.content
    if name == "Read":
        lines = [] if text.startswith("(file is empty") else text.split("\n")
        numbered = [_NUMBERED.match(line) for line in lines]
        body = [m.group(2) if m else line for m, line in zip(numbered, lines, strict=True)]
        start = int(numbered[0].group(1)) if numbered and numbered[0] else 1
        return {
            "type": "text",
            "file": {
                "filePath": _abs(cwd, input.get("file_path", "")),
                "content": "\n".join(body),
                "numLines": len(body),
                "startLine": start,
                "totalLines": start - 1 + len(body),
            },
        }
    if name == "Write":
        return {
            "type": "update" if text.startswith("Updated") else "create",
            "filePath": _abs(cwd, input.get("file_path", "")),
            "content": input.get("content", ""),
            "structuredPatch": [],
            "originalFile": None,
        }
    if name == "Edit":
        return {
            "filePath": _abs(cwd, input.get("file_path", "")),
            "oldString": input.get("old_string", ""),
            "newString": input.get("new_string", ""),
            "originalFile": None,
            "structuredPatch": [],
            "userModified": False,
            "replaceAll": bool(input.get("replace_all", False)),
        }
    if name == "Glob":
        files = [] if text == "No files found" else text.split("\n")
        truncated = bool(files) and files[-1].startswith("(results truncated")
        files = files[:-1] if truncated else files
        return {"filenames": files, "durationMs": 0, "numFiles": len(files), "truncated": truncated}
    if name == "Grep":
        lines = [] if text == "No matches found" else text.split("\n")
        if lines and lines[-1].startswith("(results truncated"):
            lines = lines[:-1]
        files = sorted({line.split(":", 1)[0] for line in lines})
        return {
            "mode": "content",
            "numFiles": len(files),
            "filenames": files,
            "content": "\n".join(lines),
            "numLines": len(lines),
        }
    if name == "Bash":
        return {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
    return None


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

    ``session_id``: None gives a fresh UUID (:attr:`session_id` says which). ``api_ids``: the
    API's ``(message id, request id)`` of a call's response, by ``call_id``, when the model
    client has them (``AnthropicModelClient.api_ids``); either may be None. ``secrets``: more
    strings to redact. ``model``: the model client, whose credentials are redacted too (None:
    the client ``api_ids`` is a method of, if it is one). ``agent_id``: a sub-agent's id; its
    records are a sidechain (``isSidechain: true``, ``agentId``), as Claude Code writes
    ``<session>/subagents/agent-<id>.jsonl``. ``version``: the records' ``version`` (None:
    the installed steploop's).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_id: str | None = None,
        cwd: str,
        version: str | None = None,
        clock: Callable[[], datetime] = _utc_now,
        secrets: Iterable[str] | None = None,
        stop_hooks: object | None = None,
        api_ids: Callable[[int], tuple[str | None, str | None]] | None = None,
        model: object | None = None,
        agent_id: str | None = None,
    ) -> None:
        self._path = Path(path)
        self._agent_id = agent_id  # a sub-agent's sidechain: isSidechain, agentId
        self._session_id = str(uuid.uuid4()) if session_id is None else session_id
        self._api_ids = api_ids
        self._ids_of: tuple[int, tuple[str | None, str | None]] = (-1, (None, None))
        self._call_id: int | None = None  # the model call streaming now (its records held)
        self._cwd = cwd
        self._version = version if version is not None else _installed_version()
        self._clock = clock
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._closed = False
        self._loaded = False
        self._last_uuid: str | None = None
        self._tool_use_records: dict[str, str] = {}  # tool_use id -> uuid of its record
        self._tool_uses: dict[str, tuple[str, Mapping[str, Any]]] = {}  # id -> (name, input)
        # the client's credentials: the model given, else the owner of ``api_ids`` (run()
        # passes the model client's bound ``api_ids``)
        owner = model if model is not None else getattr(api_ids, "__self__", None)
        self._redactor = Redactor(secrets, model=owner)
        self._stop_hooks = stop_hooks  # has .report(hooks_id) -> runs (steploop.effects.hooks.StopHooks)
        self._pending: list[tuple[AssistantMessage, dict[str, Any]]] = []  # held, one response
        self._compacts: dict[int, Compact] = {}  # running compactions, by id
        self._compact_meta: dict[str, Any] | None = None  # for the next compact_boundary
        self._hook_meta: dict[str, Any] | None = None  # for the next stop_hook_summary

    @property
    def path(self) -> Path:
        return self._path

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def redactions(self) -> int:
        """How many times a secret was replaced in this file."""
        return self._redactor.redactions

    def uuid_of(self, message_id: str) -> str:
        """The uuid the record of ``message_id`` has (or would have) in this session."""
        return record_uuid(self._session_id, message_id)

    # -- public, blocking ---------------------------------------------------------------

    def append(self, message: Message) -> dict[str, Any]:
        """Write one record for ``message``, flush it, and return the record written."""
        with self._lock:
            self._check_open()
            self._load_existing()
            self._flush_pending()
            record = self._build_record(message)
            self._write_records([record])
            return record

    def observe(self, event: Event | None, state: object, effects: Sequence[Effect]) -> None:
        """Learn from a step what the emitted messages do not carry (the observer protocol of
        ``steploop.effects.run``): a response's usage and stop reason (its held records are then
        written), a compaction's trigger and size, the stop hooks' outcome."""
        with self._lock:
            if self._closed:
                return
            for effect in effects:
                if isinstance(effect, Compact):
                    self._compacts[effect.compact_id] = effect
                elif isinstance(effect, CallModel):
                    self._call_id = effect.call_id
            if isinstance(event, ModelResponseEnded):
                call_id = getattr(getattr(state, "round", None), "call_id", event.call_id)
                if event.call_id == call_id and self._pending:
                    self._stamp_pending(event)
                    self._stamp_ids(event.call_id)
                self._flush_pending()
            elif isinstance(event, ModelCallFailed):
                self._flush_pending()
            elif isinstance(event, CompactionFinished):
                c = self._compacts.pop(event.compact_id, None)
                if c is not None:
                    trigger = "manual" if getattr(c, "trigger", "auto") == "manual" else "auto"
                    self._compact_meta = {"trigger": trigger, "preTokens": c.pre_tokens}
            elif isinstance(event, StopHooksFinished):
                self._hook_meta = self._hook_summary(event)

    def _hook_summary(self, e: StopHooksFinished) -> dict[str, Any]:
        report = getattr(self._stop_hooks, "report", None)
        runs = report(e.hooks_id) if callable(report) else None
        infos: list[dict[str, Any]] = []
        errors: list[str] = []
        if runs:
            for run in runs:
                infos.append({"command": run.name, "durationMs": run.duration_ms})
                if run.result.error is not None:
                    errors.append(run.result.error)
        elif e.error is not None:
            errors.append(e.error)
        return {
            "hookCount": e.hook_count,
            "hookInfos": infos,
            "hookErrors": errors,
            "preventedContinuation": e.prevent,
            "stopReason": e.stop_reason,
            "hasOutput": bool(e.blocking_errors or errors or e.prevent),
        }

    def _stamp_pending(self, e: ModelResponseEnded) -> None:
        usage = _usage_to_api(e.usage)
        for k, (_, record) in enumerate(self._pending):
            record["message"]["usage"] = dict(usage)
            if k == len(self._pending) - 1:
                record["message"]["stop_reason"] = e.stop_reason

    def _ids(self, call_id: int) -> tuple[str | None, str | None]:
        """The API's ids of call ``call_id``, asked of the model client once they exist (they
        do from the response's start) and kept for the call's later records."""
        if self._ids_of[0] == call_id:
            return self._ids_of[1]
        if self._api_ids is None:
            return (None, None)
        ids = self._api_ids(call_id)
        if ids != (None, None):
            self._ids_of = (call_id, ids)
        return ids

    def _stamp_ids(self, call_id: int) -> None:
        """The API's ids of the response, where the model client has them."""
        message_id, request_id = self._ids(call_id)
        for _, record in self._pending:
            if isinstance(message_id, str) and message_id:
                record["message"]["id"] = message_id
            if isinstance(request_id, str) and request_id:
                record["requestId"] = request_id

    def _flush_pending(self) -> None:
        if self._pending:
            # Written before its response ended (a tool result or a notice came first): the
            # records still carry the response's ids, which exist from its start [TR-2].
            if self._call_id is not None:
                self._stamp_ids(self._call_id)
            records = [r for _, r in self._pending]
            self._pending = []
            self._write_records(records)

    def _write_records(self, records: list[dict[str, Any]]) -> None:
        data = b"".join(_dumps(self._redacted(r)) for r in records)
        handle = self._open_for_append()
        handle.write(data)
        handle.flush()

    def _redacted(self, record: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._redactor.value(record)
        return out

    def _hold(self, message: AssistantMessage) -> None:
        """Keep a response's record until the response ends (its usage is not known yet)."""
        if self._pending and self._pending[0][0].response_id != message.response_id:
            self._flush_pending()
        self._pending.append((message, self._build_record(message)))

    def tombstone(self, message_id: str) -> bool:
        """Remove the record of ``message_id`` by rewriting the file without it.

        Records whose ``parentUuid`` pointed at the removed record are re-linked to its parent,
        so the chain stays unbroken. Returns whether a record was removed.
        """
        with self._lock:
            self._check_open()
            self._load_existing()
            target = self.uuid_of(message_id)
            held = [k for k, (m, _) in enumerate(self._pending) if m.id == message_id]
            if held:
                self._drop_held(held[0])
                return True
            self._flush_pending()
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

    def _drop_held(self, k: int) -> None:
        _, removed = self._pending.pop(k)
        uid, parent = removed["uuid"], removed["parentUuid"]
        for _, rec in self._pending[k:]:
            if rec.get("parentUuid") == uid:
                rec["parentUuid"] = parent
        if self._last_uuid == uid:
            self._last_uuid = parent
        self._tool_use_records = {t: v for t, v in self._tool_use_records.items() if v != uid}

    def record(self, item: Emitted) -> None:
        """Apply one item the loop yielded: append a message, honour a tombstone, skip the rest.

        An assistant record is held until its response ends (see :meth:`observe`) or anything
        else is recorded, so that it is written with the response's usage."""
        if isinstance(item, Tombstone):
            self.tombstone(item.message_id)
        elif isinstance(item, AssistantMessage) and item.usage is None and item.api_error is None:
            with self._lock:
                self._check_open()
                self._load_existing()
                self._hold(item)
        elif isinstance(item, (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)):
            self.append(item)

    def close(self) -> None:
        """Close the file. Idempotent; appending afterwards raises ``ValueError``."""
        with self._lock:
            if not self._closed:
                try:
                    self._flush_pending()
                except OSError:
                    pass  # closing must not fail; the held records are lost with the disk
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

    def _tool_use_result(self, message: UserMessage) -> Any | None:
        block = _first_result(message)
        if block is None:
            return None
        name, input = self._tool_uses.get(block.tool_use_id, ("", {}))
        return tool_use_result(name, input, block, self._cwd) if name else None

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
            kind = record.get("type") if record is not None else None
            if record is None or not isinstance(kind, str) or kind not in _MESSAGE_TYPES:
                continue
            uid = record.get("uuid")
            if not isinstance(uid, str):
                continue
            self._last_uuid = uid
            message = record.get("message")
            if kind == "assistant" and isinstance(message, dict):
                content = message.get("content")
                for block in content if isinstance(content, list) else ():
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        self._tool_use_records[str(block.get("id"))] = uid
                        given = block.get("input")
                        given = given if isinstance(given, dict) else {}
                        self._tool_uses[str(block.get("id"))] = (str(block.get("name")), given)

    def _build_record(self, message: Message) -> dict[str, Any]:
        """The record of ``message``; the chain (last uuid, tool_use records) moves on to it."""
        record = self._make_record(message)
        self._last_uuid = record["uuid"]
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    self._tool_use_records[block.id] = record["uuid"]
                    self._tool_uses[block.id] = (block.name, block.input)
        return record

    def _make_record(self, message: Message) -> dict[str, Any]:
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
            "isSidechain": self._agent_id is not None,
            "userType": "external",
            "cwd": self._cwd,
            "sessionId": self._session_id,
            "version": self._version,
            "type": message.TAG,
        }
        if self._agent_id is not None:
            record["agentId"] = self._agent_id
        if isinstance(message, SystemMessage) and message.subtype == "compact_boundary":
            record["parentUuid"] = None
            record["logicalParentUuid"] = parent
        if isinstance(message, UserMessage):
            record["message"] = {"role": "user", "content": _user_content(message)}
            if message.origin == "compact_summary":
                record["isCompactSummary"] = True
                record["isVisibleInTranscriptOnly"] = True
            elif message.is_meta:
                record["isMeta"] = True
            if source_tool is not None:
                record["sourceToolAssistantUUID"] = source_tool
                result = self._tool_use_result(message)
                if result is not None:
                    record["toolUseResult"] = result
        elif isinstance(message, AssistantMessage):
            rid = message.response_id
            msg_id = rid if rid.startswith("msg_") else _api_id("msg", self._session_id, rid)
            record["message"] = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": message.model,
                "content": [block_to_api(b) for b in message.content],
                "stop_reason": message.stop_reason,
                "stop_sequence": None,
                "usage": _usage_to_api(message.usage),
            }
            record["requestId"] = _api_id("req", self._session_id, rid)
            if message.api_error is not None:
                record["isApiErrorMessage"] = True
                # Claude Code's category under its texts ("": it writes none), else the kind
                category = message.api_error.category
                if category is None:
                    record["error"] = message.api_error.kind
                elif category:
                    record["error"] = category
                if message.api_error.status is not None:
                    record["apiErrorStatus"] = message.api_error.status
        elif isinstance(message, SystemMessage):
            record["subtype"] = message.subtype
            if message.subtype == "compact_boundary":
                record["content"] = "Conversation compacted"
                record["isMeta"] = False
                record["level"] = "info"
                meta, self._compact_meta = self._compact_meta, None
                record["compactMetadata"] = meta or {"trigger": "auto", "preTokens": 0}
            elif message.subtype == "stop_hook_summary":
                meta, self._hook_meta = self._hook_meta, None
                record.update(meta or {"hookCount": 0, "hookInfos": [], "hookErrors": [],
                                       "preventedContinuation": False, "stopReason": "",
                                       "hasOutput": False})
                record["level"] = message.level
                record["toolUseID"] = str(uuid.uuid5(TRANSCRIPT_NAMESPACE, f"{uid}\x00hooks"))
            else:
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


def _first_result(message: UserMessage) -> ToolResultBlock | None:
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            return block
    return None


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("steploop")
    except PackageNotFoundError:
        return "0+unknown"
