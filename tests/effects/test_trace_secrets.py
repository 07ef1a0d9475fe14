"""Secrets never reach a trace, and a redacted trace replays exactly and resumes (issue #17;
specs/ TR-SECRET-1, specs/trace-format.md §2)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anthropic
import anyio
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.model import AnthropicModelClient, make_client
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.effects.trace import (
    TraceReader,
    TraceRecorder,
    make_provenance,
    replay_exact,
    resume_trace,
)
from steploop.effects.trace.provenance import client_secrets, redaction_marker
from steploop.reducer import Request, default, start, step
from steploop.reducer.events import InterruptBehavior, ToolFinished, ToolTraits
from tests.effects.trace_kit import tool_round_events
from tests.support.messages_server import MessagesServer, error_response, text_response

SAFE = ToolTraits(concurrency_safe=True)


def _strings(v: Any) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def assert_absent(path: Path, secret: str) -> None:
    """Neither the secret nor its JSON escape is in the file, and no decoded value holds it."""
    data = path.read_bytes().decode("utf-8")
    assert secret not in data and json.dumps(secret)[1:-1] not in data
    for line in data.splitlines():
        assert not any(secret in s for s in _strings(json.loads(line)))


def _record_leak(path: Path, secret: str, *, prompt: str = "read .env") -> TraceRecorder:
    events = tool_round_events()
    events[4] = ToolFinished(generation=1, tool_use_id="toolu_1", content=f"KEY={secret}\n")
    cfg = default()
    with TraceRecorder(path, config=cfg, request=Request(prompt=prompt), secrets=[secret]) as rec:
        state, fx = start(Request(prompt=prompt), cfg)
        rec(None, state, fx)
        for ev in events:
            state, fx = step(state, ev, cfg)
            rec(ev, state, fx)
    return rec


@pytest.mark.spec("TR-SECRET-1")
@pytest.mark.parametrize(
    "secret",
    [
        pytest.param("pässwörd-ключ-0123", id="non-ascii"),
        pytest.param('tok"en-0123456789', id="quote"),
        pytest.param("tok\\en-0123456789", id="backslash"),
        pytest.param("emoji-🔑-0123456789", id="astral"),
        pytest.param("line\nbreak-0123456", id="newline"),
    ],
)
def test_extra_secrets_that_json_escapes_are_redacted(tmp_path: Path, secret: str) -> None:
    """Redaction ran on the escaped JSON text, so a secret with non-ASCII, a quote or a
    backslash (written as \\u00e4, \\" or \\\\) was written as it was."""
    path = tmp_path / "t.jsonl"
    rec = _record_leak(path, secret)
    assert_absent(path, secret)
    assert rec.redactions == 1 and rec.diverged_at is None
    assert redaction_marker(len(secret)) in "".join(
        s for line in path.read_text("utf-8").splitlines() for s in _strings(json.loads(line))
    )
    assert replay_exact(path).ok


@pytest.mark.spec("TR-SECRET-1")
def test_a_secret_in_the_prompt_is_redacted_from_the_start(tmp_path: Path) -> None:
    """The header's request is redacted, and the written run starts from it."""
    secret = "sk-ant-api03-PROMPT-0123456789"
    path = tmp_path / "t.jsonl"
    _record_leak(path, secret, prompt=f"use {secret} please")
    assert_absent(path, secret)
    assert replay_exact(path).ok


def test_markers_keep_the_length() -> None:
    assert redaction_marker(8) == "********"
    assert redaction_marker(10) == "[REDACTED]"
    assert redaction_marker(14) == "[REDACTED****]"
    assert all(len(redaction_marker(n)) == n for n in range(8, 80))


@pytest.mark.spec("TR-SECRET-1")
def test_client_secrets_come_from_the_client() -> None:
    sdk = anthropic.AsyncAnthropic(
        api_key="sk-ant-direct-0123456789",
        default_headers={
            "X-Gateway-Auth": "Bearer gw-token-0123456789",
            "X-Trace-Id": "t-1234567890",
        },
    )
    model = AnthropicModelClient(sdk, traits_for=lambda n, i: ToolTraits())
    got = client_secrets(model)
    assert "sk-ant-direct-0123456789" in got
    assert "Bearer gw-token-0123456789" in got and "gw-token-0123456789" in got
    assert "t-1234567890" not in got  # not a credential-looking header
    assert client_secrets(None) == []


async def _live(
    tmp_path: Path, client: anthropic.AsyncAnthropic, server: MessagesServer
) -> tuple[Path, Any]:
    path = tmp_path / "live.jsonl"
    model = AnthropicModelClient(client, traits_for=lambda n, i: ToolTraits())
    with TraceRecorder(path, provenance=make_provenance(model=model), secrets=()) as rec:
        r = rec.attach(
            run(
                Request(prompt="hi"),
                model=model,
                config=default(),
                workspace=tmp_path,
                observer=rec,
            )
        )
        async with r:
            async for _ in r:
                pass
    return path, r.result


@pytest.mark.anyio
@pytest.mark.spec("TR-SECRET-1")
@pytest.mark.parametrize("how", ["api_key", "custom_header"])
async def test_a_key_the_client_holds_is_redacted_when_the_server_echoes_it(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key given to the client directly (not in the environment) or a custom auth header,
    echoed by the server (in an error, then in an answer), was written to the trace."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    secret = "sk-ant-direct-KEY-0123456789" if how == "api_key" else "gw-SECRET-token-98765"
    with MessagesServer() as server:
        server.enqueue(error_response(529, "overloaded_error", f"overloaded (caller {secret})"))
        server.enqueue(text_response(f"Your credential is {secret}."))
        if how == "api_key":
            client = make_client(server.base_url, secret, connect_timeout=1.0, read_timeout=5.0)
        else:
            client = anthropic.AsyncAnthropic(
                base_url=server.base_url,
                api_key="sk-ant-other-0123456789",
                max_retries=0,
                default_headers={"X-Gateway-Auth": f"Bearer {secret}"},
            )
        try:
            path, result = await _live(tmp_path, client, server)
        finally:
            await client.close()
    assert result.terminal.TAG == "completed"
    assert_absent(path, secret)
    assert "Your credential is [REDACTED" in path.read_text("utf-8")
    assert replay_exact(path).ok


# --- resume of a redacted trace --------------------------------------------------------------


class Env:
    name = "Env"
    description = "reads the environment file"
    input_schema: Mapping[str, Any] = {"type": "object"}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=f"ANTHROPIC_API_KEY={self.secret}")


@pytest.mark.anyio
@pytest.mark.spec("TR-SECRET-1")
async def test_a_killed_run_that_saw_the_key_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool read the key (from the environment); the run is cut after that step. Resume
    said "does not replay exactly at step 0"; now it continues, and the whole file replays."""
    secret = "sk-ant-api03-ENVKEY-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    tools = [Env(secret)]
    script = [
        response(tool_use("Env", {}, "toolu_1"), stop_reason="tool_use"),
        response(tool_use("Env", {}, "toolu_2"), stop_reason="tool_use"),
        reply("done"),
    ]
    path = tmp_path / "run.jsonl"
    model = ScriptedModel(script, traits_for=lambda n, i: SAFE)
    with TraceRecorder(path, provenance=make_provenance(model=model)) as rec:
        r = rec.attach(
            run(
                "go",
                model=model,
                tools=ToolRegistry(tools),
                workspace=tmp_path,
                observer=rec,
                permissions=PermissionPolicy(default="allow"),
            )
        )
        async with r:
            async for _ in r:
                pass
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert_absent(path, secret)
    assert replay_exact(path).ok
    # kill it after the first tool result: keep the lines up to the step that took it
    lines = path.read_bytes().split(b"\n")
    steps = [
        (n, json.loads(x)) for n, x in enumerate(lines) if x and json.loads(x)["record"] == "step"
    ]
    cut = next(n for n, rec_ in steps if rec_["event"] and rec_["event"]["type"] == "tool_finished")
    path.write_bytes(b"\n".join(lines[: cut + 1]) + b"\n")
    rest = ScriptedModel(script[1:], traits_for=lambda n, i: SAFE)
    with resume_trace(path) as rs:
        r2 = rs.run(
            model=rest,
            tools=ToolRegistry(tools),
            workspace=tmp_path,
            permissions=PermissionPolicy(default="allow"),
        )
        with anyio.fail_after(10):
            async with r2:
                async for _ in r2:
                    pass
    assert r2.result is not None and r2.result.terminal.TAG == "completed"
    assert_absent(path, secret)
    report = replay_exact(path)
    assert report.ok, report.describe()
    assert any(True for _ in TraceReader(path))
