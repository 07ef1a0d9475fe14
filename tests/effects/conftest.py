"""Fixtures of the model-client tests (test_model_client, test_model_stream, test_model_request):
both anyio backends, one local Messages API server per test module (reset before each test and
checked that every scripted response was requested) and an SDK client pointed at it. A module
that defines a fixture of the same name uses its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anthropic
import pytest

from steploop.effects.model import make_client
from tests.support.messages_server import MessagesServer


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        yield server


@pytest.fixture
def server(shared_server: MessagesServer) -> Iterator[MessagesServer]:
    shared_server.reset()
    yield shared_server
    assert shared_server.pending == 0, "a scripted response was never requested"


@pytest.fixture
async def sdk(server: MessagesServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = make_client(server.base_url, "test-key", connect_timeout=1.0, read_timeout=5.0)
    try:
        yield client
    finally:
        await client.close()
