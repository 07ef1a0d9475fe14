"""The model client leaves a finished response's connection reusable (HTTP/1.1 keep-alive).

The Messages API keeps connections open between requests. A response body read to its end goes
back to the SDK's pool; one closed early (before the chunked body's terminator) takes its
connection with it, and the next call pays for a new connection (a TLS handshake against the
real API). The scripted server of ``tests/support`` always closes; this module has a small
keep-alive one that counts the connections it accepts.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import anthropic
import pytest

from steploop.effects.model import AnthropicModelClient, make_client
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, ToolTraits
from steploop.reducer.messages import TextBlock, UserMessage
from tests.support.messages_server import text_response


class _KeepAliveHandler(socketserver.StreamRequestHandler):
    """Serves POST /v1/messages streams on one connection for as long as the client keeps it."""

    server: _KeepAliveServer

    def handle(self) -> None:
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.accepted += 1
        while True:
            request_line = self.rfile.readline()
            if not request_line:
                return
            length = 0
            while True:
                header = self.rfile.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            self.rfile.read(length)
            self.server.requests += 1
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for frame in self.server.frames:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            if self.server.stall_before_end:
                # The message is complete but the body's terminator is late.
                if self.server.stopping.wait(self.server.stall_before_end):
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class _KeepAliveServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, frames: list[bytes], stall_before_end: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _KeepAliveHandler)
        self.frames = frames
        self.stall_before_end = stall_before_end
        self.accepted = 0
        self.requests = 0
        self.stopping = threading.Event()


def _frames() -> list[bytes]:
    return [frame.encode() for frame in text_response("hello", chunks=2).frames()]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _serve(stall_before_end: float = 0.0) -> Iterator[_KeepAliveServer]:
    server = _KeepAliveServer(_frames(), stall_before_end)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def keepalive() -> Iterator[_KeepAliveServer]:
    yield from _serve()


@pytest.fixture
def late_end() -> Iterator[_KeepAliveServer]:
    yield from _serve(stall_before_end=30.0)


def _traits(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=True)


async def _call(sdk: anthropic.AsyncAnthropic, call_id: int) -> list[Event]:
    client = AnthropicModelClient(sdk, traits_for=_traits)
    prompt = Conversation.of([UserMessage(id="u0", content=(TextBlock(text="hi"),))])
    effect = CallModel(call_id=call_id, model="claude-test-1", conversation=prompt, max_tokens=64)
    async with aclosing(client.stream(effect)) as events:
        return [e async for e in events]


@pytest.fixture
async def sdk_for(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Any]:
    clients: list[anthropic.AsyncAnthropic] = []

    def make(server: _KeepAliveServer, read_timeout: float = 5.0) -> anthropic.AsyncAnthropic:
        host, port = server.server_address[:2]
        base_url = f"http://{host!s}:{port}"
        client = make_client(base_url, "k", connect_timeout=1.0, read_timeout=read_timeout)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.mark.anyio
async def test_successive_calls_share_one_connection(
    keepalive: _KeepAliveServer, sdk_for: Any
) -> None:
    sdk = sdk_for(keepalive)
    for call_id in (1, 2, 3):
        events = await _call(sdk, call_id)
        assert [e.TAG for e in events] == ["model_block_received", "model_response_ended"]
    assert keepalive.requests == 3
    assert keepalive.accepted == 1


@pytest.mark.anyio
async def test_a_late_body_end_does_not_hold_the_result(
    late_end: _KeepAliveServer, sdk_for: Any
) -> None:
    """message_stop arrived, the body's terminator does not: the call still ends at once (it
    does not wait for the read timeout), and the next call gets a fresh connection."""
    sdk = sdk_for(late_end, read_timeout=20.0)
    start = time.monotonic()
    events = await _call(sdk, 1)
    assert [e.TAG for e in events] == ["model_block_received", "model_response_ended"]
    assert time.monotonic() - start < 2.0
    await _call(sdk, 2)
    assert late_end.accepted == 2


def test_frames_are_what_the_scripted_server_sends() -> None:
    first = json.loads(_frames()[0].split(b"data: ", 1)[1])
    assert first["type"] == "message_start"
