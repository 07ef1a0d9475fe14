"""Reading: :class:`TraceReader` streams a trace file record by record and raises
:class:`~steploop.effects.trace.format.TraceError` (``FILE:LINE: what is wrong``) for the first bad line.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

import attrs
import cattrs

from steploop.effects.trace.format import (
    ALLOWED,
    CONV_EFFECTS,
    DEFAULT_MESSAGE_WINDOW,
    EFFECT_CLASSES,
    EVENT_CLASSES,
    FORMAT,
    KEYS,
    MAX_MESSAGE_WINDOW,
    READS,
    RECORD_TYPES,
    VERSION,
    BadValue,
    EndRecord,
    Record,
    ResumeRecord,
    StepRecord,
    TraceError,
    TraceHeader,
    hollow_conversation,
)
from steploop.effects.trace.strict import (
    MAX_INT_DIGITS,
    MAX_LINE_DEPTH,
    limits_problem,
    provenance_problem,
    type_problem,
)
from steploop.reducer import PHASES, ConfigError, LoopConfig, Request, Session, fastpaths
from steploop.reducer.conversation import Conversation
from steploop.reducer.digest import STATE_FIELDS
from steploop.reducer.effects import Effect, Emit
from steploop.reducer.events import CompactionFinished, Event
from steploop.reducer.messages import Message
from steploop.reducer.serialize import SerializationError, converter, explain_error, fast_structurer
from steploop.reducer.transitions import Terminal, Transition

_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX_DIGITS = "0123456789abcdef"  # s.strip(_HEX_DIGITS) == "": s is lowercase hex (or empty)

_STATE_FIELD_SET = frozenset(STATE_FIELDS)


def _check_keys(obj: dict[str, Any], kind: str) -> None:
    required, optional = KEYS[kind]
    keys = obj.keys()
    if required <= keys <= ALLOWED[kind]:
        return
    missing = sorted(required - obj.keys())
    if missing:
        raise BadValue(f"{kind} record: missing {', '.join(repr(k) for k in missing)}")
    extra = sorted(obj.keys() - required - optional)
    if extra:
        raise BadValue(f"{kind} record: unexpected key(s) {', '.join(repr(k) for k in extra)}")


def _int(value: Any, what: str, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadValue(f"{what} must be an integer, got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise BadValue(f"{what} must be at least {minimum}, got {value}")
    return value


def _find(exc: BaseException, cls: type[BaseException]) -> BaseException | None:
    if isinstance(exc, cls):
        return exc
    for sub in getattr(exc, "exceptions", ()) or ():
        got = _find(sub, cls)
        if got is not None:
            return got
    return None


def _structure(data: Any, cls: Any, what: str, problem: str | None = "check") -> Any:
    """``cls`` from ``data``, strictly: the compiled structurer (which never coerces) when it
    takes the data; else the data must pass :func:`type_problem` (``problem``: its verdict,
    already made by the caller on the data as written) and then the converter. An error of the
    converter's own (an unknown tag, a config the config rejects) is worded as it words it;
    otherwise the strict check's finding (the converter would have coerced "false" to True)."""
    fast = fast_structurer(cls)
    if fast is not None:
        try:
            return fast(data)
        except Exception:  # the general code below decides, and words the error
            pass
    if problem == "check":
        problem = type_problem(data, cls)
    try:
        value = converter.structure(data, cls)
    except Exception as e:
        cfg = _find(e, ConfigError)
        if cfg is not None:
            raise BadValue(f"{what}: {cfg}") from None
        # the converter's own wording (an unknown tag, an extra field, ...), which the
        # malformed-trace corpus pins; else the strict check's (the converter failed in a way
        # it cannot word, an AttributeError on a list where an object belongs)
        if isinstance(e, (SerializationError, cattrs.BaseValidationError)):
            raise BadValue(f"{what}: {explain_error(e)}") from None
        raise BadValue(f"{what}: {problem or f'{type(e).__name__}: {e}'}") from None
    if problem is not None:  # the converter took it only by coercing ("false" -> True)
        raise BadValue(f"{what}: {problem}")
    return value


_DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))  # each digit -> "0"
_HUGE_NUMBER = b"0" * (MAX_INT_DIGITS + 1)  # a run this long may be an integer over the limit


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # 1e400 reads as inf, which JSON cannot carry
        raise ValueError(f"{text} is out of the range of a JSON number")
    return value


# Python's json, without what only it accepts: NaN, Infinity and numbers that overflow to inf
_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
_decode = _DECODER.decode


def _loads(raw: bytes) -> Any:
    """``json.loads(raw.decode("utf-8"))`` for a line that is valid; anything may raise otherwise.

    (orjson was tried here and measured side by side: 1.30x on reading alone, 0.96-1.03x on an
    exact replay, item 3 of benchmarks/; under the 10% a fast path must earn, so it is gone.)
    """
    return _decode(raw.decode("utf-8"))


class _ReaderBindings:
    def __init__(self, window: int) -> None:
        self.window = window
        self.seq = 0
        self.by_id: dict[str, tuple[int, Message]] = {}
        self.order: deque[tuple[int, str]] = deque()

    def bind(self, m: Message) -> None:
        self.seq += 1
        self.by_id[m.id] = (self.seq, m)
        self.order.append((self.seq, m.id))

    def evict(self) -> None:
        """After a step record: keep the newest ``window`` message records bound."""
        while len(self.order) > self.window:
            seq, old = self.order.popleft()
            if self.by_id.get(old, (0, None))[0] == seq:
                del self.by_id[old]

    def resolve(self, data: Any) -> Message:
        if not isinstance(data, dict) or set(data) != {"ref"} or not isinstance(data["ref"], str):
            raise BadValue(
                f'a message inside an event or effect must be written as {{"ref": "<id>"}}, '
                f"got {json.dumps(data)[:80]}"
            )
        got = self.by_id.get(data["ref"])
        if got is None:
            raise BadValue(
                f"refers to message {data['ref']!r}, which no message record before this line "
                f"binds (never written, or out of the window of {self.window} message records)"
            )
        return got[1]

    def reset(self) -> None:
        self.by_id.clear()
        self.order.clear()


def _decode_conversation(data: Any) -> Conversation:
    if (
        not isinstance(data, dict)
        or set(data) != {"length", "digest"}
        or not isinstance(data["length"], int)
        or isinstance(data["length"], bool)
        or data["length"] < 0
        or not isinstance(data["digest"], str)
        or not _HEX32.fullmatch(data["digest"])
    ):
        raise BadValue(
            'a conversation must be written as {"length": n, "digest": "<32 hex digits>"}, '
            f"got {json.dumps(data)[:80]}"
        )
    return hollow_conversation(data["length"], bytes.fromhex(data["digest"]))


_CONV_TAGS = frozenset(cls.TAG for cls in CONV_EFFECTS)


def _fast_table(
    classes: Iterable[type], overrides: Mapping[type, dict[str, Callable[[Any], Any]]]
) -> dict[str, Callable[[Any], Any]]:
    """Per tag, the serializer's compiled structurer (with this module's field overrides)."""
    out: dict[str, Callable[[Any], Any]] = {}
    for cls in classes:
        fn = fast_structurer(cls, overrides.get(cls))
        if fn is not None:
            out[cls.TAG] = fn  # type: ignore[attr-defined]
    return out


# The fast paths of _decode_event and _decode_effect (fast path "trace_decoders" of
# steploop/reducer/fastpaths.py, where its figure is): each returns exactly what the general code
# below it returns for the same data, or raises (anything); the general code then decides and
# words the error. Events carrying messages (refs) and effects carrying a message (a ref) are
# left to the general code.
_FAST_MESSAGE: Callable[[Any], Any] | None = None
_FAST_EVENTS: dict[str, Callable[[Any], Any]] = {}
_FAST_EFFECTS: dict[str, Callable[[Any], Any]] = {}
_DECODERS = [True]  # the fast path "trace_decoders" is on


def _switched() -> None:
    """The fast path switch moved (steploop/reducer/fastpaths.py): rebuild or drop the tables."""
    global _FAST_MESSAGE, _FAST_EVENTS, _FAST_EFFECTS
    on = _DECODERS[0] = fastpaths.on("trace_decoders")
    _FAST_MESSAGE = fast_structurer(Message) if on else None
    _FAST_EVENTS = (
        _fast_table((c for c in EVENT_CLASSES if c is not CompactionFinished), {}) if on else {}
    )
    _FAST_EFFECTS = (
        _fast_table(
            EFFECT_CLASSES, {cls: {"conversation": _decode_conversation} for cls in CONV_EFFECTS}
        )
        if on
        else {}
    )


_switched()
fastpaths.watch(_switched)


def _decode_event(data: Any, b: _ReaderBindings, what: str) -> Event:
    if data.__class__ is dict:
        try:  # an unhashable tag raises here too; the general code words the error
            fast = _FAST_EVENTS.get(data.get("type"))  # type: ignore[arg-type]
            if fast is not None:
                return fast(data)  # type: ignore[no-any-return]
        except Exception:  # the general code decides, and words the error
            pass
    _check_tag(data, what)
    problem = type_problem(data, Event, "trace")
    if isinstance(data, dict) and data.get("type") == CompactionFinished.TAG and "messages" in data:
        raw = data["messages"]
        if not isinstance(raw, list):
            raise BadValue(f"{what}: messages must be a list")
        try:
            messages = tuple(b.resolve(x) for x in raw)
        except BadValue as e:
            raise BadValue(f"{what}: {e}") from None
        ev = _structure({**data, "messages": []}, Event, what, problem)
        return attrs.evolve(ev, messages=messages)  # type: ignore[no-any-return]
    return _structure(data, Event, what, problem)  # type: ignore[no-any-return]


_EMIT_KEYS = frozenset({"type", "item"})


def _fast_effect(data: Any, b: _ReaderBindings) -> Effect | None:
    """What ``_decode_effect`` returns for a well-formed effect; None: ask ``_decode_effect``
    (which decides, and words the error). Callers try this first. Raises nothing, for JSON data."""
    if data.__class__ is not dict or not _DECODERS[0]:
        return None
    tag = data.get("type")
    if tag == "emit":
        item = data.get("item")
        if data.keys() == _EMIT_KEYS and item.__class__ is dict and len(item) == 1:
            ref = item.get("ref")
            if ref.__class__ is str:
                got = b.by_id.get(ref)
                return None if got is None else Emit(item=got[1])
    try:
        fast = _FAST_EFFECTS.get(tag)  # type: ignore[arg-type]  # an unhashable tag: raises
        if fast is not None:
            return fast(data)  # type: ignore[no-any-return]
    except Exception:  # _decode_effect decides, and words the error (or raises the same)
        pass
    return None


def _check_tag(data: Any, what: str) -> None:
    """A record's ``"type"``, when there is one, is a string (a list or an object there is
    no tag; without this check it would fail as an unhashable key, not as a trace error)."""
    if isinstance(data, dict):
        tag = data.get("type")
        if tag is not None and not isinstance(tag, str):
            raise BadValue(f"{what}: 'type' must be a string, got {json.dumps(tag)[:80]}")


def _decode_effect(data: Any, b: _ReaderBindings, what: str) -> Effect:
    _check_tag(data, what)
    if isinstance(data, dict):
        tag = data.get("type")
        if tag == Emit.TAG and isinstance(data.get("item"), dict) and "ref" in data["item"]:
            extra = sorted(set(data) - {"type", "item"})
            if extra:
                raise BadValue(f"{what}: extra fields found ({', '.join(extra)})")
            try:
                return Emit(item=b.resolve(data["item"]))
            except BadValue as e:
                raise BadValue(f"{what}: {e}") from None
        if tag in _CONV_TAGS and "conversation" in data:
            try:
                conv = _decode_conversation(data["conversation"])
            except BadValue as e:
                raise BadValue(f"{what}: {e}") from None
            problem = type_problem(data, Effect, "trace")
            eff = _structure({**data, "conversation": []}, Effect, what, problem)
            return attrs.evolve(eff, conversation=conv)  # type: ignore[no-any-return]
    return _structure(data, Effect, what, type_problem(data, Effect, "trace"))  # type: ignore[no-any-return]


_BLOCK = 1 << 14


def _blocks(f: IO[bytes]) -> Iterator[tuple[list[bytes], int, bool]]:
    """The lines of ``f`` (as ``for raw in f`` splits them), a block of whole lines at a time,
    without their newlines: ``(lines, nl, huge)``. ``nl`` is 1; 0 for a last line without a
    newline, which comes alone, last. ``huge``: some line of the block holds a run of more than
    MAX_INT_DIGITS digits (so its lines are checked for an integer over the limit; the check
    is made once per block, not once per line).
    """
    parts: list[bytes] = []  # the start of a line that goes on in the next read
    while True:
        chunk = f.read(_BLOCK)
        if not chunk:
            break
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        if parts:
            parts.append(chunk)
            chunk = b"".join(parts)
            parts = []
        lines = chunk.split(b"\n")
        last = lines.pop()
        if last:
            parts.append(last)
        # a newline becomes a space, so no run found spans two lines
        yield lines, 1, _HUGE_NUMBER in chunk.translate(_DIGITS)
    if parts:
        yield [b"".join(parts)], 0, True


class TraceReader:
    """Streams a trace file record by record (constant memory), checking it as it goes.

    Iterating yields :class:`TraceHeader` first, then :class:`StepRecord`,
    :class:`ResumeRecord` and :class:`EndRecord` in file order; message records are bound
    internally and resolved into the records that refer to them.

    Args:
        path: the trace file; its name as given is used in error messages.
        tolerate_truncated_tail: a last line cut off mid-write ends the iteration quietly
            (``truncated_tail`` is then True) instead of raising.

    Raises:
        TraceError: ``FILE:LINE: what is wrong`` for the first bad line.
    """

    def __init__(self, path: str | os.PathLike[str], *, tolerate_truncated_tail: bool = False):
        self.path = path
        self.name = os.fspath(path)
        self.tolerate_truncated_tail = tolerate_truncated_tail
        self.header: TraceHeader | None = None
        self.end: EndRecord | None = None
        self.messages = 0
        self.valid_bytes = 0
        """Size of the prefix of complete records read so far."""
        self.missing_newline = False
        """The last complete record has no newline after it (append one before writing)."""
        self.truncated_tail = False

    def error(self, line: int | None, what: str) -> TraceError:
        return TraceError(self.name, line, what)

    def __iter__(self) -> Iterator[Record]:
        self.header, self.end, self.messages = None, None, 0
        self.valid_bytes, self.missing_newline, self.truncated_tail = 0, False, False
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            raise self.error(None, "no such file") from None
        except IsADirectoryError:
            raise self.error(None, "is a directory, not a trace file") from None
        except OSError as e:
            raise self.error(None, f"cannot open: {e.strerror}") from None
        with f:  # the loop is here, not in a generator this one delegates to: a level less
            bindings = _ReaderBindings(DEFAULT_MESSAGE_WINDOW)
            last_i = -1
            ln = 0
            offset = 0
            for lines, nl, huge in _blocks(f):
                tail = not nl
                for line in lines:
                    ln += 1
                    # _parse_line, its common case inline: a dict is what it returns
                    obj: Any = None
                    try:
                        obj = _decode(line.decode("utf-8"))
                    except Exception:  # _parse_line_checked decides, and words the error
                        pass
                    if obj.__class__ is not dict:
                        obj = self._parse_line_checked(line + b"\n" if nl else line, ln, tail)
                        if obj is None:  # a truncated tail we were told to tolerate
                            if self.header is None:  # nothing of the trace is left
                                raise self.error(
                                    ln, "the header record is truncated; there is no trace here"
                                )
                            self.truncated_tail = True
                            return
                    # the limits (trace-format.md): only a line with enough brackets to nest
                    # past them, or a long run of digits, is walked
                    if (
                        line.count(b"[") + line.count(b"{") > MAX_LINE_DEPTH
                        or (huge and _HUGE_NUMBER in line.translate(_DIGITS))
                    ) and (problem := limits_problem(obj)) is not None:
                        raise self.error(ln, problem)
                    offset += len(line) + nl
                    try:
                        rec = self._record(obj, ln, bindings, last_i)
                    except BadValue as e:
                        raise self.error(ln, str(e)) from None
                    self.valid_bytes = offset
                    self.missing_newline = tail
                    if rec is None:
                        continue
                    if isinstance(rec, TraceHeader):
                        bindings = _ReaderBindings(rec.message_window)
                    elif isinstance(rec, StepRecord):
                        last_i = rec.i
                        bindings.evict()
                    elif isinstance(rec, EndRecord):
                        self.end = rec
                    elif isinstance(rec, ResumeRecord):
                        bindings.reset()
                    yield rec
            if ln == 0:
                raise self.error(1, "the file is empty; a trace starts with a header record")

    def _parse_line(self, raw: bytes, ln: int, tail: bool) -> dict[str, Any] | None:
        try:
            obj = _loads(raw)
        except Exception:  # _parse_line_checked words it
            pass
        else:
            if obj.__class__ is dict:
                return obj
        return self._parse_line_checked(raw, ln, tail)

    def _parse_line_checked(self, raw: bytes, ln: int, tail: bool) -> dict[str, Any] | None:
        truncated = (
            "the last line is truncated (the run was probably killed while writing it); "
            "`steploop resume` drops it"
        )
        if b"\x00" in raw:
            if tail and self.tolerate_truncated_tail:  # zero padding after a crash
                return None
            col = raw.index(b"\x00") + 1
            raise self.error(ln, f"binary data, not a JSON line (a NUL byte at column {col})")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if tail and e.reason == "unexpected end of data":
                if self.tolerate_truncated_tail:
                    return None
                raise self.error(ln, truncated) from None
            raise self.error(
                ln, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
            ) from None
        if not text.strip():
            raise self.error(ln, "a blank line; every line holds one JSON record")
        try:
            obj = _decode(text[:-1] if text.endswith("\n") else text)
        except json.JSONDecodeError as e:
            if tail:
                if self.tolerate_truncated_tail:
                    return None
                raise self.error(ln, truncated) from None
            raise self.error(
                ln, f"not valid JSON: {e.msg.removesuffix(' at')} at column {e.colno}"
            ) from None
        except RecursionError:
            raise self.error(
                ln, f"nested deeper than {MAX_LINE_DEPTH} levels of arrays and objects"
            ) from None
        except ValueError as e:  # NaN, Infinity, 1e400, or an integer of thousands of digits
            if "digits" in str(e):
                raise self.error(ln, f"an integer of more than {MAX_INT_DIGITS} digits") from None
            raise self.error(ln, f"not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise self.error(ln, f"a record must be a JSON object, got {type(obj).__name__}")
        return obj

    def _record(
        self, obj: dict[str, Any], ln: int, b: _ReaderBindings, last_i: int
    ) -> Record | None:
        kind = obj.get("record")
        if kind is None:
            raise BadValue("a record needs a 'record' key (header, message, step, end or resume)")
        if kind not in RECORD_TYPES:
            raise BadValue(
                f"unknown record type {json.dumps(kind)}; expected one of {', '.join(RECORD_TYPES)}"
            )
        if self.header is None:
            if kind != "header":
                raise BadValue(f"the trace must start with a header record, found a {kind!r} record")
            self.header = self._header(obj, ln)
            return self.header
        if kind == "header":
            raise BadValue(f"a second header record; only line {self.header.line} holds the header")
        if self.end is not None:
            raise BadValue(f"a {kind} record after the end record (line {self.end.line})")
        _check_keys(obj, kind)
        if kind == "message":
            self._message(obj, b)
            return None
        if kind == "step":
            return self._step(obj, ln, b, last_i)
        if kind == "end":
            i = _int(obj["i"], "end record: 'i'")
            if i != last_i:
                raise BadValue(f"the end record names step {i}, but the last step is {last_i}")
            terminal = _structure(obj["terminal"], Terminal, "end record: terminal")
            return EndRecord(i=i, terminal=terminal, line=ln)
        # resume
        after = _int(obj["after"], "resume record: 'after'", -1)
        if after != last_i:
            raise BadValue(f"the resume record follows step {after}, but the last step is {last_i}")
        if (problem := provenance_problem(obj["provenance"])) is not None:
            raise BadValue(f"resume record: provenance: {problem}")
        if not isinstance(obj["reissued"], list):
            raise BadValue("resume record: 'reissued' must be a list")
        fresh = _ReaderBindings(b.window)
        reissued = tuple(
            _fast_effect(d, fresh)
            or _decode_effect(d, fresh, f"resume record: reissued effect {k}")
            for k, d in enumerate(obj["reissued"])
        )
        return ResumeRecord(after=after, provenance=obj["provenance"], reissued=reissued, line=ln)

    def _message(self, obj: dict[str, Any], b: _ReaderBindings) -> None:
        mid = obj["id"]
        if not isinstance(mid, str):
            raise BadValue("message record: 'id' must be a string")
        msg: Message | None = None
        if _FAST_MESSAGE is not None:
            try:
                msg = _FAST_MESSAGE(obj["message"])
            except Exception:  # _structure decides, and words the error
                msg = None
        if msg is None:
            msg = _structure(obj["message"], Message, f"message {mid!r}")
            assert msg is not None
        if msg.id != mid:
            raise BadValue(f"message record: id {mid!r} but the message's id is {msg.id!r}")
        b.bind(msg)
        self.messages += 1

    def _header(self, obj: dict[str, Any], ln: int) -> TraceHeader:
        fmt = obj.get("format")
        if fmt != FORMAT:
            raise BadValue(f"not a steploop trace: format is {json.dumps(fmt)}, expected {FORMAT!r}")
        version = obj.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise BadValue(f"the format version must be an integer, got {json.dumps(version)}")
        if version > VERSION:
            raise BadValue(
                f"format version {version} is newer than this steploop reads (version {VERSION}); "
                "upgrade steploop"
            )
        if version not in READS:
            reads = " and ".join(str(v) for v in READS)
            raise BadValue(f"unknown format version {version}; this steploop reads versions {reads}")
        _check_keys(obj, "header")
        if not isinstance(obj["steploop"], str):
            raise BadValue("header: 'steploop' must be a string")
        if (problem := provenance_problem(obj["provenance"])) is not None:
            raise BadValue(f"header: provenance: {problem}")
        window = _int(obj["message_window"], "header: 'message_window'", 1)
        if window > MAX_MESSAGE_WINDOW:
            raise BadValue(f"header: 'message_window' must be at most {MAX_MESSAGE_WINDOW}")
        config = _structure(obj["config"], LoopConfig, "header: config")
        session = None
        if obj["session"] is not None:
            session = _structure(obj["session"], Session, "header: session")
        request = _structure(obj["request"], Request, "header: request")
        return TraceHeader(
            version=version,
            steploop=obj["steploop"],
            provenance=obj["provenance"],
            message_window=window,
            config=config,
            session=session,
            request=request,
            line=ln,
        )

    def _step(self, obj: dict[str, Any], ln: int, b: _ReaderBindings, last_i: int) -> StepRecord:
        i = obj["i"]
        if i.__class__ is not int or i < 0:
            i = _int(i, "step record: 'i'", 0)  # raises
        if i != last_i + 1:
            if last_i < 0:
                raise BadValue(f"the first step record must be step 0 (start), found step {i}")
            raise BadValue(f"step {i} follows step {last_i}; expected step {last_i + 1}")
        raw_event = obj["event"]
        event: Event | None = None
        if raw_event is None:
            if i > 0:
                raise BadValue(f"step {i} has no event; only step 0 (start) has none")
        else:
            if i == 0:
                raise BadValue('step 0 is start() and has "event": null')
            event = _decode_event(raw_event, b, f"step {i}: event")
        raw_fx = obj["effects"]
        if not isinstance(raw_fx, list):
            raise BadValue(f"step {i}: 'effects' must be a list")
        # _fast_effect never raises and has no side effect, so trying every effect first
        # changes nothing; where it declined, _decode_effect decides, in order.
        tried = tuple([_fast_effect(d, b) for d in raw_fx])
        effects: tuple[Effect, ...] = tried  # type: ignore[assignment]  # no None: all() below
        if not all(tried):
            effects = tuple(
                e or _decode_effect(d, b, f"step {i}: effect {k}")
                for k, (e, d) in enumerate(zip(tried, raw_fx, strict=True))
            )
        digest = obj["digest"]
        if digest.__class__ is not str or len(digest) != 32 or digest.strip(_HEX_DIGITS):
            raise BadValue(f"step {i}: 'digest' must be 32 lowercase hex digits")
        phase = obj["phase"]
        if phase not in PHASES:
            raise BadValue(f"step {i}: unknown phase {json.dumps(phase)}")
        turn_count = obj["turn_count"]
        if turn_count.__class__ is not int or turn_count < 1:
            turn_count = _int(turn_count, f"step {i}: 'turn_count'", 1)  # raises
        transition = None
        if "transition" in obj:
            transition = _structure(obj["transition"], Transition, f"step {i}: transition")
        fields = obj.get("fields", {})
        if not isinstance(fields, dict) or not all(
            k in _STATE_FIELD_SET
            and v.__class__ is str
            and len(v) == 16
            and not v.strip(_HEX_DIGITS)
            for k, v in fields.items()
        ):
            raise BadValue(f"step {i}: 'fields' must map state field names to 16 hex digits")
        return StepRecord(
            i=i,
            event=event,
            effects=effects,
            digest=digest,
            phase=phase,
            turn_count=turn_count,
            transition=transition,
            fields=fields,
            line=ln,
        )
