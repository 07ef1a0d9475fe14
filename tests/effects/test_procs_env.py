"""The API's credentials stay out of Bash commands and tools' subprocesses unless asked;
command stop hooks get the whole environment, as Claude Code gives its own to hooks
(specs/rules.md E-ENV-1, steploop/effects/procs.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from steploop.effects.hooks import PASS, CommandStopHook, StopHookInput
from steploop.effects.procs import SECRET_ENV, open_process_tree, tool_environment
from steploop.effects.tools import Bash, ToolContext, ToolOutput

KEY = "sk-ant-api03-ENVTEST-0123456789"
TOKEN = "auth-token-ENVTEST-0123456789"
SHOW = 'echo "${ANTHROPIC_API_KEY-unset} ${ANTHROPIC_AUTH_TOKEN-unset} ${OTHER_SETTING-unset}"'


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", TOKEN)
    monkeypatch.setenv("OTHER_SETTING", "kept")


def ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws, tool_use_id="toolu_1")


@pytest.mark.spec("E-ENV-1")
@pytest.mark.anyio
async def test_bash_does_not_get_the_api_credentials(tmp_path: Path, secrets_set: None) -> None:
    """A Bash command saw ANTHROPIC_API_KEY and ANTHROPIC_AUTH_TOKEN (a prompt injection could
    print them); now both are left out, and the rest of the environment is kept."""
    out = await Bash(workspace=tmp_path).call({"command": SHOW}, ctx(tmp_path))
    assert out == ToolOutput(content="unset unset kept\n")


@pytest.mark.spec("E-ENV-1")
@pytest.mark.anyio
async def test_bash_gets_them_when_asked(tmp_path: Path, secrets_set: None) -> None:
    """``Bash(pass_secrets=True)`` passes both, for a user whose commands need the key."""
    out = await Bash(workspace=tmp_path, pass_secrets=True).call({"command": SHOW}, ctx(tmp_path))
    assert out == ToolOutput(content=f"{KEY} {TOKEN} kept\n")


@pytest.mark.spec("E-ENV-1")
@pytest.mark.anyio
async def test_a_tool_subprocess_does_not_get_them_by_default(
    tmp_path: Path, secrets_set: None
) -> None:
    """A tool's subprocess started by open_process_tree without ``env`` gets the environment
    without the credentials; an explicit ``env`` is taken as it is."""
    for env, expected in (
        (None, "unset unset kept\n"),
        ({"OTHER_SETTING": "x"}, "unset unset x\n"),
    ):
        tree = await open_process_tree(
            SHOW, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=tmp_path, env=env
        )
        try:
            assert tree.stdout is not None
            data = b"".join([chunk async for chunk in tree.stdout])
            assert await tree.wait() == 0
        finally:
            await tree.aclose()
        assert data.decode() == expected


@pytest.mark.spec("E-ENV-1")
@pytest.mark.anyio
async def test_a_command_stop_hook_gets_the_whole_environment(
    tmp_path: Path, secrets_set: None
) -> None:
    """Claude Code runs hooks "with Claude Code's environment": a command stop hook gets the
    key and the token too, and CLAUDE_PROJECT_DIR."""
    hook = CommandStopHook(
        f"{SHOW} > env.txt; echo $CLAUDE_PROJECT_DIR >> env.txt", cwd=str(tmp_path)
    )
    payload = StopHookInput(session_id="s", transcript_path="t.jsonl", cwd=str(tmp_path))
    assert await hook(payload) == PASS
    assert (tmp_path / "env.txt").read_text() == f"{KEY} {TOKEN} kept\n{tmp_path}\n"


@pytest.mark.spec("E-ENV-1")
def test_tool_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """tool_environment() drops exactly SECRET_ENV from the given or current environment."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert SECRET_ENV == ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    assert "ANTHROPIC_API_KEY" not in tool_environment()
    assert tool_environment(pass_secrets=True)["ANTHROPIC_API_KEY"] == KEY
    base = {"ANTHROPIC_AUTH_TOKEN": TOKEN, "PATH": "/bin", "ANTHROPIC_BASE_URL": "u"}
    assert tool_environment(base=base) == {"PATH": "/bin", "ANTHROPIC_BASE_URL": "u"}
    assert tool_environment(base=base, pass_secrets=True) == base
