"""Purity and determinism of start and step (specs/rules.md R-PURE-1, M-1)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steploop.reducer import (
    IllegalEvent,
    LoopConfig,
    LoopState,
    Request,
    claude_code_2_1_88,
    default,
    full,
    start,
    step,
)
from steploop.reducer.config import Gates
from steploop.reducer.effects import Effect, Finish
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage, UserMessage
from steploop.reducer.serialize import unstructure
from tests.reducer.driver import BASH, SAFE, UNSAFE, usage

ROOT = Path(__file__).resolve().parents[2]


# --- R-PURE-1 ---------------------------------------------------------------------------------

FORBIDDEN = {
    "anyio",
    "asyncio",
    "trio",
    "anthropic",
    "httpx2",
    "os",
    "io",
    "time",
    "random",
    "uuid",
    "logging",
    "socket",
    "subprocess",
    "threading",
    "datetime",
    "pathlib",
    "sys",
    "steploop.effects",
}


def _forbidden(modules: set[str]) -> set[str]:
    """The forbidden names among ``modules`` (a name forbids itself and its submodules)."""
    return {f for m in modules for f in FORBIDDEN if m == f or m.startswith(f + ".")}


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            if (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return found


@pytest.mark.spec("R-PURE-1")
def test_reducer_imports_nothing_impure() -> None:
    """No module of steploop/reducer/ (but steploop/reducer/testing) imports I/O, clocks, randomness or effects."""
    pkg = ROOT / "steploop" / "reducer"
    modules = [p for p in pkg.rglob("*.py") if "testing" not in p.relative_to(pkg).parts]
    assert len(modules) >= 10
    bad: dict[str, set[str]] = {}
    for path in modules:
        hits = _forbidden(_imports(ast.parse(path.read_text(encoding="utf-8"))))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    assert not bad, bad


@pytest.mark.spec("R-PURE-1")
def test_purity_scan_detects_forbidden_imports() -> None:
    """The scan itself catches each import form."""
    src = "import os.path\nfrom time import monotonic\nfrom steploop.effects.cli import main\n__import__('random')\n"
    assert _forbidden(_imports(ast.parse(src))) == {"os", "time", "steploop.effects", "random"}
    assert not _forbidden(
        _imports(
            ast.parse("from steploop.reducer.effects import Emit\nfrom .effects import Emit\n")
        )
    )


# --- M-1 --------------------------------------------------------------------------------------


def _run(
    cfg: LoopConfig, events: list[Callable[[LoopState], Event]]
) -> list[tuple[LoopState, tuple[Effect, ...]]]:
    state, fx = start(Request(prompt="go", at_ms=1), cfg, None)
    out = [(state, fx)]
    for make in events:
        state, fx = step(state, make(state), cfg)
        if state.phase == "refreshing_tools":  # [R-REFRESH-1] the list, read at once
            state, more = step(state, ToolsRefreshed(call_id=state.round.call_id), cfg)
            fx = (*fx, *more)
        out.append((state, fx))
    return out


@pytest.mark.spec("M-1")
def test_same_events_same_results() -> None:
    """The same event sequence gives equal states and effects every time."""
    tid = ToolUseBlock(id="t1", name="Read", input={"k": "v"})
    events: list[Callable[[LoopState], Event]] = [
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=TextBlock(text="a")),
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=tid, tool=SAFE),
        lambda s: PermissionAnswered(
            generation=s.round.generation, tool_use_id="t1", decision="allow"
        ),
        lambda s: ModelResponseEnded(
            call_id=s.round.call_id, model="m", stop_reason="tool_use", usage=usage(), at_ms=5
        ),
        lambda s: ToolFinished(
            generation=s.round.generation, tool_use_id="t1", content="x", at_ms=6
        ),
        lambda s: ModelCallFailed(call_id=s.round.call_id, kind="server_error", status=500),
        lambda s: WaitElapsed(wait_id=s.round.pending_id, at_ms=600),
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=TextBlock(text="done")),
        lambda s: ModelResponseEnded(
            call_id=s.round.call_id, model="m", stop_reason="end_turn", usage=usage(), at_ms=700
        ),
        lambda s: StopHooksFinished(hooks_id=s.round.pending_id),
    ]
    for cfg in (default(), claude_code_2_1_88(), full()):
        a = _run(cfg, events)
        b = _run(cfg, events)
        assert a == b
        assert [unstructure(s) for s, _ in a] == [unstructure(s) for s, _ in b]
        assert isinstance(a[-1][1][-1], Finish)
        # stepping the same state with the same event twice gives equal results
        s5 = a[5][0]
        e = events[5](s5)
        assert step(s5, e, cfg) == step(s5, e, cfg)


# The common, turn-extending events are repeated so that sequences reach deep phases; the
# turn-ending and illegal ones appear once.
ALPHABET = [
    *["text", "tool_safe", "tool_unsafe", "end_tool_use", "allow", "finish_ok"] * 4,
    *["end_turn", "end_big", "hooks_pass", "hooks_block", "compact_ok", "wait", "summary"] * 2,
    "tool_bash",
    "tool_unknown",
    "tool_truncated",
    "end_max_tokens",
    "fail_overloaded",
    "fail_ptl",
    "fail_media",
    "fail_auth",
    "fail_stream",
    "fail_unknown",
    "fail_image",
    "deny",
    "reject",
    "finish_err",
    "finish_hook",
    "late_tool",
    "hard",
    "submit",
    "compact_fail",
    "hooks_prevent",
    "hooks_error",
    "command",
    "bogus_generation",
    "bogus_call",
]

CONFIGS = {
    "default": default(context_window=50_000, gates=Gates(tool_use_summaries=True), max_turns=3),
    "cc": claude_code_2_1_88(context_window=50_000, fallback_model="claude-haiku-4-5"),
    "full": full(context_window=50_000),
}


def _pick(s: LoopState, statuses: tuple[str, ...]) -> str:
    for sl in s.round.slots:
        if sl.status in statuses:
            return sl.tool_use_id
    return s.round.slots[0].tool_use_id if s.round.slots else "t0"


def _event(name: str, s: LoopState, n: int, at: int) -> Event:
    r = s.round
    call, gen = r.call_id, r.generation
    big = Usage(input_tokens=31_000, output_tokens=200)
    small_u = Usage(input_tokens=200, output_tokens=20)

    def tool(traits: ToolTraits | None, nm: str = "Read", complete: bool = True) -> Event:
        return ModelBlockReceived(
            call_id=call,
            block=ToolUseBlock(id=f"t{n}", name=nm, input={"command": "ls"}),
            tool=traits,
            input_complete=complete,
            at_ms=at,
        )

    table: dict[str, Callable[[], Event]] = {
        "text": lambda: ModelBlockReceived(call_id=call, block=TextBlock(text="x" * 40), at_ms=at),
        "tool_safe": lambda: tool(SAFE),
        "tool_unsafe": lambda: tool(UNSAFE, "Edit"),
        "tool_bash": lambda: tool(BASH, "Bash"),
        "tool_unknown": lambda: tool(None, "Nope"),
        "tool_truncated": lambda: tool(SAFE, complete=False),
        "end_turn": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="end_turn", usage=small_u, at_ms=at
        ),
        "end_tool_use": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="tool_use", usage=small_u, at_ms=at
        ),
        "end_max_tokens": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="max_tokens", usage=small_u, at_ms=at
        ),
        "end_big": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="end_turn", usage=big, at_ms=at
        ),
        "fail_overloaded": lambda: ModelCallFailed(
            call_id=call, kind="overloaded", status=529, at_ms=at
        ),
        "fail_ptl": lambda: ModelCallFailed(
            call_id=call, kind="prompt_too_long", status=400, at_ms=at
        ),
        "fail_media": lambda: ModelCallFailed(call_id=call, kind="media", status=413, at_ms=at),
        "fail_auth": lambda: ModelCallFailed(call_id=call, kind="auth", status=401, at_ms=at),
        "fail_stream": lambda: ModelCallFailed(call_id=call, kind="stream_broken", at_ms=at),
        "fail_unknown": lambda: ModelCallFailed(call_id=call, kind="unknown", at_ms=at),
        "fail_image": lambda: ModelCallFailed(call_id=call, kind="image_client", at_ms=at),
        "allow": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="allow", at_ms=at
        ),
        "deny": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="deny_by_rule", at_ms=at
        ),
        "reject": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="rejected_by_user", at_ms=at
        ),
        "finish_ok": lambda: ToolFinished(
            generation=gen, tool_use_id=_pick(s, ("running",)), content="ok", at_ms=at
        ),
        "finish_err": lambda: ToolFinished(
            generation=gen,
            tool_use_id=_pick(s, ("running",)),
            content="bad",
            is_error=True,
            at_ms=at,
        ),
        "finish_hook": lambda: ToolFinished(
            generation=gen,
            tool_use_id=_pick(s, ("running",)),
            content="ok",
            hook_stopped=True,
            at_ms=at,
        ),
        "late_tool": lambda: ToolFinished(
            generation=max(0, gen - 1), tool_use_id="t0", content="late", at_ms=at
        ),
        "hard": lambda: Interrupted(kind="hard", at_ms=at),
        "submit": lambda: Interrupted(kind="submit", at_ms=at),
        "compact_ok": lambda: CompactionFinished(
            compact_id=r.pending_id,
            messages=(UserMessage(id=f"c{n}", content=(TextBlock(text="summary"),), is_meta=True),),
            at_ms=at,
        ),
        "compact_fail": lambda: CompactionFailed(compact_id=r.pending_id, at_ms=at),
        "wait": lambda: WaitElapsed(wait_id=r.pending_id, at_ms=at),
        "hooks_pass": lambda: StopHooksFinished(hooks_id=r.pending_id, hook_count=1, at_ms=at),
        "hooks_block": lambda: StopHooksFinished(
            hooks_id=r.pending_id, blocking_errors=("no",), at_ms=at
        ),
        "hooks_prevent": lambda: StopHooksFinished(hooks_id=r.pending_id, prevent=True, at_ms=at),
        "hooks_error": lambda: StopHooksFinished(hooks_id=r.pending_id, error="crash", at_ms=at),
        "summary": lambda: ToolUseSummaryReady(
            summary_id=s.summary_id or s.ids.summary, summary="sum", at_ms=at
        ),
        "command": lambda: CommandQueued(command_id=f"c{n}", text="cmd", at_ms=at),
        "bogus_generation": lambda: ToolFinished(
            generation=gen + 7, tool_use_id="t1", content="x", at_ms=at
        ),
        "bogus_call": lambda: ModelResponseEnded(
            call_id=call + 7, model="m", stop_reason="end_turn", usage=small_u, at_ms=at
        ),
    }
    return table[name]()


def _explore(cfg: LoopConfig, names: list[str]) -> tuple[list[Event], list[Any]]:
    """Feed events built from ``names``; returns the events and each step's outcome."""
    state, fx = start(Request(prompt="go", at_ms=0, token_budget=50_000), cfg, None)
    events: list[Event] = []
    outcomes: list[Any] = [(state, fx)]
    for n, name in enumerate(names, 1):
        if state.phase == "done":
            break
        ev = _event(name, state, n, n * 1_000_000)
        events.append(ev)
        try:
            state, fx = step(state, ev, cfg)
        except IllegalEvent as err:
            outcomes.append(("illegal", str(err)))
            continue
        assert all(not isinstance(e, Finish) for e in fx[:-1])  # M-4: Finish is last
        assert (
            isinstance(fx[-1], Finish) == (state.phase == "done") if fx else state.phase != "done"
        )
        outcomes.append((state, fx))
    return events, outcomes


def _replay(cfg: LoopConfig, events: list[Event]) -> list[Any]:
    state, fx = start(Request(prompt="go", at_ms=0, token_budget=50_000), cfg, None)
    outcomes: list[Any] = [(state, fx)]
    for ev in events:
        try:
            state, fx = step(state, ev, cfg)
        except IllegalEvent as err:
            outcomes.append(("illegal", str(err)))
            continue
        outcomes.append((state, fx))
    return outcomes


@pytest.mark.spec("M-1", "M-5", "M-4", "M-2")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(sorted(CONFIGS)),
    names=st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=30),
)
def test_random_event_sequences_are_deterministic(profile: str, names: list[str]) -> None:
    """Random event sequences: step raises only IllegalEvent and replays identically."""
    cfg = CONFIGS[profile]
    events, first = _explore(cfg, names)
    assert _replay(cfg, events) == first
    last = [o for o in first if o[0] != "illegal"][-1][0]
    if last.phase == "done":
        with pytest.raises(IllegalEvent):
            step(last, Interrupted(kind="hard"), cfg)
