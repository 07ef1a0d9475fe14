"""A scripted local server that speaks the Anthropic Messages API over a real socket.

The server answers ``POST /v1/messages`` from a queue of scripted responses, one per request, in
order. A streaming request (``"stream": true``) gets ``text/event-stream`` frames written one by one
(HTTP/1.1, chunked transfer encoding, ``Connection: close``); a non-streaming request gets the
message the same script describes, folded into one JSON body. Every request is recorded, raw bytes
and parsed JSON, so tests can compare what the SDK really sent.

A script is a list of items: :class:`Frame` (one server-sent event), :class:`Sleep` (a stall), and
:class:`Drop` (the connection is cut with the chunked body unfinished). Leaving out
``message_stop`` gives a stream that ends cleanly but too early. :class:`HttpError` answers with an
error status and the API's JSON error body.

Typical use::

    with MessagesServer() as server:
        server.enqueue(text_response("hi"), error_response(529, "overloaded_error", "Overloaded"))
        client = AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0)
        ...
        assert server.requests[0].json["stream"] is True

Accepted sockets get ``TCP_NODELAY`` so small frames are not held back by Nagle's algorithm (a
40 ms stall per request otherwise). Sleeps wake up early when the server shuts down, so closing
never waits for a scripted stall.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, TypeAlias

__all__ = [
    "DEFAULT_MODEL",
    "Body",
    "Drop",
    "Frame",
    "HttpError",
    "MessagesServer",
    "RecordedRequest",
    "Sleep",
    "StreamScript",
    "block_frames",
    "error_event",
    "error_response",
    "ping",
    "redacted_thinking_block",
    "response_script",
    "text_block",
    "text_response",
    "thinking_block",
    "tool_use_block",
    "tool_use_response",
]

DEFAULT_MODEL = "claude-test-1"


# ---------------------------------------------------------------------------------------------
# Script items


@dataclass(frozen=True)
class Frame:
    """One server-sent event: ``event: NAME`` then ``data: JSON``."""

    event: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        payload = json.dumps(self.data, separators=(",", ":"))
        return f"event: {self.event}\ndata: {payload}\n\n".encode()


@dataclass(frozen=True)
class Sleep:
    """Stall for ``seconds`` before the next item (wakes early when the server closes)."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Cut the connection here, leaving the chunked body unfinished.

    ``reset=True`` sends a TCP RST (SO_LINGER 0) instead of an orderly FIN.
    """

    reset: bool = False


Item: TypeAlias = Frame | Sleep | Drop


@dataclass(frozen=True)
class StreamScript:
    """A scripted 200 answer: the items, in order. Non-streaming requests get it folded."""

    items: tuple[Item, ...]
    headers: tuple[tuple[str, str], ...] = ()

    def frames(self) -> list[Frame]:
        return [i for i in self.items if isinstance(i, Frame)]

    def without(self, event: str) -> StreamScript:
        """The same script with every frame of this event name removed."""
        kept = tuple(i for i in self.items if not (isinstance(i, Frame) and i.event == event))
        return StreamScript(kept, self.headers)

    def cut(self, n_frames: int, *tail: Item) -> StreamScript:
        """Keep the first ``n_frames`` frames (and items between them), then ``tail``."""
        kept: list[Item] = []
        seen = 0
        for item in self.items:
            if isinstance(item, Frame):
                if seen == n_frames:
                    break
                seen += 1
            kept.append(item)
        return StreamScript((*kept, *tail), self.headers)

    def insert(self, before_frame: int, *items: Item) -> StreamScript:
        """Insert ``items`` just before frame number ``before_frame`` (0-based)."""
        out: list[Item] = []
        seen = 0
        done = False
        for item in self.items:
            if isinstance(item, Frame):
                if seen == before_frame and not done:
                    out.extend(items)
                    done = True
                seen += 1
            out.append(item)
        if not done:
            out.extend(items)
        return StreamScript(tuple(out), self.headers)

    def to_message(self) -> dict[str, Any]:
        """Fold the frames into the message a non-streaming request would get."""
        message: dict[str, Any] = {}
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        for frame in self.frames():
            data = frame.data
            if frame.event == "message_start":
                message = json.loads(json.dumps(data["message"]))
                for i, b in enumerate(message.get("content") or []):
                    blocks[i] = b  # blocks that arrive complete in message_start
            elif frame.event == "content_block_start":
                blocks[data["index"]] = dict(data["content_block"])
            elif frame.event == "content_block_delta":
                block = blocks[data["index"]]
                delta = data["delta"]
                kind = delta["type"]
                if kind == "text_delta":
                    block["text"] = block.get("text", "") + delta["text"]
                elif kind == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                elif kind == "signature_delta":
                    block["signature"] = block.get("signature", "") + delta["signature"]
                elif kind == "input_json_delta":
                    partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
                elif kind == "citations_delta":
                    if block.get("citations") is None:
                        block["citations"] = []
                    block["citations"].append(delta["citation"])
            elif frame.event == "message_delta":
                message.update(data["delta"])
                usage = message.setdefault("usage", {})
                usage.update({k: v for k, v in data.get("usage", {}).items() if v is not None})
        for index, text in partial.items():
            try:
                blocks[index]["input"] = json.loads(text) if text else {}
            except ValueError:
                blocks[index]["input"] = {}
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message


@dataclass(frozen=True)
class HttpError:
    """An error status with the API's JSON error body."""

    status: int
    error_type: str
    message: str
    retry_after: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> bytes:
        err = {"type": "error", "error": {"type": self.error_type, "message": self.message}}
        return json.dumps(err).encode()


@dataclass(frozen=True)
class Body:
    """A 200 answer with exactly this body text (for a non-streaming request whose body is
    not a message: bad JSON, a proxy's page, a message with a malformed field)."""

    text: str
    content_type: str = "application/json"


Response: TypeAlias = StreamScript | HttpError | Body


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any

    @property
    def stream(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True


# ---------------------------------------------------------------------------------------------
# Builders


@dataclass(frozen=True)
class BlockSpec:
    """A content block to stream: its start payload and its deltas (index added later)."""

    start: dict[str, Any]
    deltas: tuple[dict[str, Any], ...] = ()


def _split(text: str, chunks: int) -> list[str]:
    """Split ``text`` into ``chunks`` non-empty pieces (fewer if the text is shorter)."""
    if not text:
        return []
    n = max(1, min(chunks, len(text)))
    size, extra = divmod(len(text), n)
    out: list[str] = []
    pos = 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(text[pos : pos + step])
        pos += step
    return out


def text_block(text: str, *, chunks: int = 1) -> BlockSpec:
    """A text block whose text arrives over ``chunks`` text_delta frames."""
    deltas = tuple({"type": "text_delta", "text": part} for part in _split(text, chunks))
    return BlockSpec({"type": "text", "text": ""}, deltas)


def thinking_block(thinking: str, signature: str, *, chunks: int = 1) -> BlockSpec:
    """A thinking block: thinking_delta frames then one signature_delta."""
    deltas: list[dict[str, Any]] = [
        {"type": "thinking_delta", "thinking": part} for part in _split(thinking, chunks)
    ]
    deltas.append({"type": "signature_delta", "signature": signature})
    return BlockSpec({"type": "thinking", "thinking": "", "signature": ""}, tuple(deltas))


def redacted_thinking_block(data: str) -> BlockSpec:
    """A redacted_thinking block (its data sits in the start frame, no deltas)."""
    return BlockSpec({"type": "redacted_thinking", "data": data})


def tool_use_block(
    id: str, name: str, input: dict[str, Any] | str, *, chunks: int = 3
) -> BlockSpec:
    """A tool_use block; ``input`` (a dict, or raw JSON text, possibly cut short) is split over
    ``chunks`` input_json_delta frames."""
    text = input if isinstance(input, str) else json.dumps(input)
    deltas = tuple({"type": "input_json_delta", "partial_json": p} for p in _split(text, chunks))
    return BlockSpec({"type": "tool_use", "id": id, "name": name, "input": {}}, deltas)


def block_frames(index: int, spec: BlockSpec) -> list[Frame]:
    """The start, delta and stop frames of one block at ``index``."""
    frames = [
        Frame(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": spec.start},
        )
    ]
    for delta in spec.deltas:
        frames.append(
            Frame(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
    frames.append(Frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames


def ping() -> Frame:
    return Frame("ping", {"type": "ping"})


def error_event(error_type: str, message: str) -> Frame:
    """An ``event: error`` frame, as the API sends inside a 200 stream."""
    return Frame("error", {"type": "error", "error": {"type": error_type, "message": message}})


_DEFAULT_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


def response_script(
    *blocks: BlockSpec,
    stop_reason: str | None = "end_turn",
    usage: dict[str, int] | None = None,
    model: str = DEFAULT_MODEL,
    message_id: str = "msg_test_001",
    pings: bool = False,
) -> StreamScript:
    """A complete stream: message_start, each block, message_delta, message_stop.

    ``usage`` is the final usage; message_start carries its input and cache counts and one
    output token, message_delta the cumulative output tokens (as the API does).
    """
    final = {**_DEFAULT_USAGE, **(usage or {})}
    start_usage = {**final, "output_tokens": 1}
    frames: list[Item] = [
        Frame(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    ]
    if pings:
        frames.append(ping())
    for index, spec in enumerate(blocks):
        frames.extend(block_frames(index, spec))
        if pings:
            frames.append(ping())
    frames.append(
        Frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": final["output_tokens"]},
            },
        )
    )
    frames.append(Frame("message_stop", {"type": "message_stop"}))
    return StreamScript(tuple(frames))


def text_response(
    text: str,
    *,
    stop_reason: str | None = "end_turn",
    usage: dict[str, int] | None = None,
    chunks: int = 1,
    model: str = DEFAULT_MODEL,
) -> StreamScript:
    """A one-text-block answer."""
    return response_script(
        text_block(text, chunks=chunks), stop_reason=stop_reason, usage=usage, model=model
    )


def tool_use_response(
    id: str,
    name: str,
    input: dict[str, Any] | str,
    *,
    chunks: int = 3,
    text: str | None = None,
    stop_reason: str | None = "tool_use",
    usage: dict[str, int] | None = None,
    model: str = DEFAULT_MODEL,
) -> StreamScript:
    """An answer with an optional text block then one tool_use block."""
    blocks = [text_block(text)] if text is not None else []
    blocks.append(tool_use_block(id, name, input, chunks=chunks))
    return response_script(*blocks, stop_reason=stop_reason, usage=usage, model=model)


def error_response(
    status: int,
    error_type: str,
    message: str,
    *,
    retry_after: str | float | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> HttpError:
    """An HTTP error answer, e.g. ``error_response(529, "overloaded_error", "Overloaded")``."""
    ra = None if retry_after is None else str(retry_after)
    return HttpError(status, error_type, message, ra, tuple(headers))


# ---------------------------------------------------------------------------------------------
# The server


def _send_headers(handler: BaseHTTPRequestHandler, headers: tuple[tuple[str, str], ...]) -> None:
    """A script's headers; ``request-id: req_test`` unless the script gives its own."""
    if not any(k.lower() == "request-id" for k, _ in headers):
        handler.send_header("request-id", "req_test")
    for k, v in headers:
        handler.send_header(k, v)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY on every accepted socket
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        owner = self.server.owner
        owner._record(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                raw=raw,
                json=parsed,
            )
        )
        if self.path.split("?", 1)[0] != "/v1/messages":
            self._send_error(HttpError(404, "not_found_error", f"no route {self.path}"))
            return
        response = owner._next_response()
        if response is None:
            self._send_error(HttpError(500, "api_error", "messages_server: no scripted response"))
        elif isinstance(response, HttpError):
            self._send_error(response)
        elif isinstance(response, Body):
            self._send_body(response)
        elif isinstance(parsed, dict) and parsed.get("stream") is True:
            self._send_stream(response)
        else:
            self._send_message(response)

    def _send_error(self, err: HttpError) -> None:
        body = err.body()
        self.send_response(err.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.send_header("request-id", "req_test")
        if err.retry_after is not None:
            self.send_header("retry-after", err.retry_after)
        for k, v in err.headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _send_stream(self, script: StreamScript) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        _send_headers(self, script.headers)
        self.end_headers()
        self.close_connection = True
        for item in script.items:
            if isinstance(item, Sleep):
                if self.server.owner._stopping.wait(item.seconds):
                    return
            elif isinstance(item, Drop):
                self._drop(item)
                return
            else:
                data = item.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")

    def _send_message(self, script: StreamScript) -> None:
        for item in script.items:
            if isinstance(item, Sleep):
                if self.server.owner._stopping.wait(item.seconds):
                    return
            elif isinstance(item, Drop):
                self._drop(item)
                return
        body = json.dumps(script.to_message()).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        _send_headers(self, script.headers)
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _send_body(self, body: Body) -> None:
        data = body.text.encode()
        self.send_response(200)
        self.send_header("content-type", body.content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        self.send_header("request-id", "req_test")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _drop(self, drop: Drop) -> None:
        self.close_connection = True
        try:
            if drop.reset:
                # Linger 0: the close that follows sends RST instead of FIN.
                linger = struct.pack("ii", 1, 0)
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = False  # joined on close: no thread outlives the server
    block_on_close = True

    def __init__(self, owner: MessagesServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-answer (timeouts, cancellation) is expected here.
        pass


class MessagesServer:
    """The scripted Messages API server. Use as a context manager (or call start/close)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Response] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> MessagesServer:
        if self._server is not None:
            raise RuntimeError("MessagesServer already started")
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="messages-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake scripted stalls, join every handler thread, close the socket."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        thread.join()
        server.server_close()
        self._server = None
        self._thread = None

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # scripting -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("MessagesServer is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def enqueue(self, *responses: Response) -> None:
        """Append responses; each request takes the next one."""
        with self._lock:
            self._queue.extend(responses)

    def reset(self) -> None:
        """Forget unused responses and recorded requests (between tests sharing a server)."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    @property
    def pending(self) -> int:
        """How many scripted responses are still unused."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def __iter__(self) -> Iterator[RecordedRequest]:
        return iter(self.requests)

    # called from handler threads ----------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_response(self) -> Response | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None
