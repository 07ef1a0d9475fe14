"""One redaction for every output (issue 27 item 4): the transcript hides what the trace hides,
with the same marker, through the library API too."""

from __future__ import annotations

from pathlib import Path

import anthropic
import pytest

from steploop.effects import run
from steploop.effects.model import AnthropicModelClient, make_client
from steploop.effects.redaction import Redactor, redaction_marker
from steploop.reducer import Request, default
from steploop.reducer.events import ToolTraits
from tests.support.messages_server import MessagesServer, error_response, text_response


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_redactor_hides_the_environment_the_given_and_the_client_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Env key, a given secret and a client's custom auth header become same-length markers,
    in keys and values, and are counted."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-0123456789")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    sdk = anthropic.AsyncAnthropic(api_key="sk-ant-direct-0123456789", default_headers={"X-Auth": "Bearer gw-0123456789"})
    r = Redactor(["given-secret-42"], model=AnthropicModelClient(sdk, traits_for=lambda n, i: ToolTraits()))
    text = "sk-ant-env-0123456789 sk-ant-direct-0123456789 gw-0123456789 given-secret-42 short"
    assert r.text(text) == " ".join(redaction_marker(n) for n in (21, 24, 13, 15)) + " short"
    assert r.value({"sk-ant-env-0123456789": ["given-secret-42", 3]}) == {
        redaction_marker(21): [redaction_marker(15), 3]
    }
    assert r.redactions == 6


@pytest.mark.anyio
@pytest.mark.spec("TR-1")
@pytest.mark.parametrize("how", ["api_key", "custom_header"])
async def test_the_transcript_hides_a_key_the_client_holds_when_the_server_echoes_it(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through run(): a key given to the client directly, or a custom auth header, echoed in an
    API error and then in the answer, never reaches the transcript; the trace's marker replaces
    it."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    secret = "sk-ant-direct-KEY-0123456789" if how == "api_key" else "gw-SECRET-token-98765"
    transcript = tmp_path / "session.jsonl"
    config = default().with_overrides({"retry.max_retries": 0})
    with MessagesServer() as server:
        server.enqueue(error_response(529, "overloaded_error", f"overloaded (caller {secret})"))
        server.enqueue(text_response(f"Your credential is {secret}."))
        if how == "api_key":
            sdk = make_client(server.base_url, secret, connect_timeout=1.0, read_timeout=5.0)
        else:
            sdk = anthropic.AsyncAnthropic(
                base_url=server.base_url,
                api_key="sk-ant-other-0123456789",
                max_retries=0,
                default_headers={"X-Gateway-Auth": f"Bearer {secret}"},
            )
        model = AnthropicModelClient(sdk, traits_for=lambda n, i: ToolTraits())
        try:
            for _ in range(2):  # the error ends the first turn; the second is answered
                r = run(Request(prompt="hi"), model=model, config=config, workspace=tmp_path, transcript_path=transcript)
                async with r:
                    async for _item in r:
                        pass
        finally:
            await sdk.close()
    text = transcript.read_text("utf-8")
    assert secret not in text
    assert f"(caller {redaction_marker(len(secret))})" in text
    assert f"Your credential is {redaction_marker(len(secret))}." in text
