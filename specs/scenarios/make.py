"""Record the golden scenarios: one small trace per transition (all 17) and the seed's
walk-through.

Each scenario drives the pure machine with a hand-written event script (ids are read from the
state as a driver would). Its expected sequence of transitions lives beside the trace in
``NAME.expected`` and was written from specs/rules.md, not from this program's output.
``tests/test_scenarios.py`` replays every trace exactly and compares the transitions with the
expected file, so a change to the machine that alters a scenario fails CI until the scenario is
re-recorded on purpose:

    .venv/bin/python specs/scenarios/make.py            # re-record every trace
    .venv/bin/python specs/scenarios/make.py NAME ...   # re-record some
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from steploop.reducer import LoopConfig, LoopState, Request, claude_code_2_1_88, default, start, step  # noqa: E402
from steploop.reducer.events import (  # noqa: E402
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
    ToolTraits,
)
from steploop.reducer.messages import (  # noqa: E402
    OpaqueBlock,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE = ToolTraits(concurrency_safe=False)
SMALL = {"context_window": 50_000, "gates.history_snip": False, "gates.context_collapse": False}


class Script:
    """Builds an event list against the live state, so ids are the ones a driver would see."""

    def __init__(self, cfg: LoopConfig, prompt: str, **request: Any) -> None:
        self.cfg = cfg
        self.request = Request(prompt=prompt, **request)
        self.state: LoopState
        self.state, _ = start(self.request, cfg)
        self.events: list[Event] = []

    def feed(self, e: Event) -> None:
        self.events.append(e)
        self.state, _ = step(self.state, e, self.cfg)

    @property
    def call(self) -> int:
        return self.state.round.call_id

    @property
    def gen(self) -> int:
        return self.state.round.generation

    def text(self, t: str) -> None:
        self.feed(ModelBlockReceived(call_id=self.call, block=TextBlock(text=t)))

    def use(self, tid: str, name: str, traits: ToolTraits = SAFE, **inp: Any) -> None:
        self.feed(
            ModelBlockReceived(
                call_id=self.call, block=ToolUseBlock(id=tid, name=name, input=inp), tool=traits
            )
        )

    def end(self, reason: str = "end_turn", inp: int = 1_000, out: int = 20) -> None:
        self.feed(
            ModelResponseEnded(
                call_id=self.call,
                model=self.state.model,
                stop_reason=reason,
                usage=Usage(input_tokens=inp, output_tokens=out),
            )
        )

    def allow(self, tid: str) -> None:
        self.feed(PermissionAnswered(generation=self.gen, tool_use_id=tid, decision="allow"))

    def done(self, tid: str, content: str = "ok", **kw: Any) -> None:
        self.feed(ToolFinished(generation=self.gen, tool_use_id=tid, content=content, **kw))

    def hooks(self, **kw: Any) -> None:
        self.feed(StopHooksFinished(hooks_id=self.state.round.pending_id, **kw))

    def fail(self, kind: str, **kw: Any) -> None:
        self.feed(ModelCallFailed(call_id=self.call, kind=kind, **kw))

    def tool_round(self, tid: str, inp: int = 1_000) -> None:
        self.use(tid, "Read", file_path="a.py")
        self.allow(tid)
        self.done(tid)
        self.end("tool_use", inp=inp)

    def reply(self, t: str = "Done.", inp: int = 1_000) -> None:
        self.text(t)
        self.end("end_turn", inp=inp)


def compaction(s: Script) -> CompactionFinished:
    cid = s.state.round.pending_id
    return CompactionFinished(
        compact_id=cid,
        messages=(
            SystemMessage(
                id=f"c{cid}-boundary", subtype="compact_boundary", text="Conversation compacted"
            ),
            UserMessage(
                id=f"c{cid}-summary",
                content=(TextBlock(text="Summary: the user asked to read a.py."),),
                is_meta=True,
                origin="compact_summary",
            ),
        ),
    )


def walkthrough() -> Script:
    s = Script(default(), "Fix the null pointer bug in src/auth/validate.ts")
    s.text("Let me look at the file.")
    s.use("toolu_001", "Read", file_path="src/auth/validate.ts")
    s.allow("toolu_001")
    s.done("toolu_001", "42  const user = getUser(userId)")
    s.end("tool_use")
    s.text("I see the bug on line 42 — userId can be null.")
    s.use(
        "toolu_002",
        "Edit",
        UNSAFE,
        file_path="src/auth/validate.ts",
        old_string="const user = getUser(userId)",
        new_string="if (!userId) return { error: 'unauthorized' }\nconst user = getUser(userId)",
    )
    s.end("tool_use")
    s.allow("toolu_002")
    s.done("toolu_002", "Replaced 1 occurrence")
    s.reply("I've fixed the null pointer bug by adding a guard clause.")
    s.hooks()
    return s


def completed() -> Script:
    s = Script(default(), "hello")
    s.reply("Hi.")
    s.hooks()
    return s


def blocking_limit() -> Script:
    s = Script(default().with_overrides({"gates.auto_compact": False}), "go")
    s.tool_round("t1", inp=190_000)
    return s


def image_error() -> Script:
    s = Script(default(), "look at the picture")
    s.fail("image_client", message="Could not resize image")
    return s


def model_error() -> Script:
    s = Script(default(), "go")
    s.fail("unknown", message="TypeError: something unexpected")
    return s


def aborted_streaming() -> Script:
    s = Script(default(), "go")
    s.text("Starting")
    s.feed(Interrupted(kind="hard"))
    return s


def aborted_tools() -> Script:
    s = Script(default(), "go")
    s.use("t1", "Edit", UNSAFE, file_path="a.py", old_string="a", new_string="b")
    s.end("tool_use")
    s.allow("t1")
    s.feed(Interrupted(kind="hard"))
    return s


def prompt_too_long() -> Script:
    s = Script(default().with_overrides({"gates.context_collapse": False}), "go")
    s.fail(
        "prompt_too_long", status=400, message="prompt is too long: 210000 tokens > 200000 maximum"
    )
    s.feed(CompactionFailed(compact_id=s.state.round.pending_id, reason="the summary call failed"))
    return s


def stop_hook_prevented() -> Script:
    s = Script(default(), "go")
    s.reply()
    s.hooks(prevent=True, stop_reason="the hook said stop", hook_count=1)
    return s


def hook_stopped() -> Script:
    s = Script(default(), "go")
    s.use("t1", "Read", file_path="a.py")
    s.allow("t1")
    s.end("tool_use")
    s.done("t1", "ok", hook_stopped=True)
    return s


def max_turns() -> Script:
    s = Script(default().with_overrides({"max_turns": 1}), "go")
    s.tool_round("t1")
    return s


def next_turn() -> Script:
    s = Script(default(), "go")
    s.tool_round("t1")
    s.reply()
    s.hooks()
    return s


def reactive_compact_retry() -> Script:
    s = Script(default().with_overrides({"gates.context_collapse": False}), "go")
    s.fail("prompt_too_long", status=400, message="prompt is too long")
    s.feed(compaction(s))
    s.reply()
    s.hooks()
    return s


def max_output_tokens_recovery() -> Script:
    s = Script(
        default().with_overrides({"gates.max_tokens_escalation": False}), "write a long essay"
    )
    s.text("The first half of the essay")
    s.end("max_tokens")
    s.reply("and the rest of it.")
    s.hooks()
    return s


def max_output_tokens_escalate() -> Script:
    s = Script(default(), "write a long essay")
    s.text("The first part, cut off")
    s.end("max_tokens")
    s.reply("The whole essay, written with room to spare.")
    s.hooks()
    return s


def collapse_drain_retry() -> Script:
    s = Script(default(), "go")
    for i in range(1, 4):
        s.tool_round(f"t{i}")
    s.fail("prompt_too_long", status=400, message="prompt is too long")
    s.reply()
    s.hooks()
    return s


def stop_hook_blocking() -> Script:
    s = Script(default(), "go")
    s.reply("Done, I think.")
    s.hooks(blocking_errors=("lint failed: 3 errors",), hook_count=1)
    s.reply("Fixed the lint errors.")
    s.hooks(hook_count=1)
    return s


def token_budget_continuation() -> Script:
    s = Script(default(), "+10k refactor everything", token_budget=10_000)
    s.text("Part one.")
    s.end("end_turn", out=2_000)
    s.hooks()
    s.text("Part two, the rest.")
    s.end("end_turn", out=8_000)
    s.hooks()
    return s


# --- the rules of issue 15 that a golden trace pins (no transition of their own) -----------------


def refusal() -> Script:
    """R-REFUSAL-1 under the 2.1.88 profile: Claude Code's usage-policy error ends the turn."""
    s = Script(claude_code_2_1_88(), "write something it refuses")
    s.text("I can help with")
    s.feed(
        ModelResponseEnded(
            call_id=s.call,
            model=s.state.model,
            stop_reason="refusal",
            usage=Usage(input_tokens=1_000, output_tokens=5),
            stop_details='{"type":"refusal","category":"cyber","explanation":null}',
        )
    )
    return s


def pause_turn() -> Script:
    """S-PAUSE-1 (default): a paused web search is resumed, then answered."""
    s = Script(default(), "when was Claude Shannon born?")
    s.text("Let me search.")
    s.feed(
        ModelBlockReceived(
            call_id=s.call, block=OpaqueBlock(block_type="server_tool_use", raw=SEARCH)
        )
    )
    s.end("pause_turn")
    s.feed(
        ModelBlockReceived(
            call_id=s.call, block=OpaqueBlock(block_type="web_search_tool_result", raw=FOUND)
        )
    )
    s.reply("He was born on April 30, 1916.")
    s.hooks()
    return s


SEARCH = (
    '{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"shannon"}}'
)
FOUND = (
    '{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":'
    '"web_search_result","url":"https://en.wikipedia.org/wiki/Claude_Shannon","title":"Claude '
    'Shannon","encrypted_content":"Eqgf","page_age":null}]}'
)


def context_overflow() -> Script:
    """R-OVERFLOW-1 (default): the 400 is retried at once with the cap that fits."""
    s = Script(default(), "go")
    s.fail(
        "context_overflow",
        status=400,
        message="input length and `max_tokens` exceed context limit: 195000 + 8000 > 200000",
        input_tokens=195_000,
        context_limit=200_000,
    )
    s.reply("It fits in 4,000 tokens.")
    s.hooks()
    return s


SCENARIOS: dict[str, Callable[[], Script]] = {
    "walkthrough": walkthrough,
    "completed": completed,
    "blocking_limit": blocking_limit,
    "image_error": image_error,
    "model_error": model_error,
    "aborted_streaming": aborted_streaming,
    "aborted_tools": aborted_tools,
    "prompt_too_long": prompt_too_long,
    "stop_hook_prevented": stop_hook_prevented,
    "hook_stopped": hook_stopped,
    "max_turns": max_turns,
    "next_turn": next_turn,
    "reactive_compact_retry": reactive_compact_retry,
    "max_output_tokens_recovery": max_output_tokens_recovery,
    "max_output_tokens_escalate": max_output_tokens_escalate,
    "collapse_drain_retry": collapse_drain_retry,
    "stop_hook_blocking": stop_hook_blocking,
    "token_budget_continuation": token_budget_continuation,
    "refusal": refusal,
    "pause_turn": pause_turn,
    "context_overflow": context_overflow,
}

_ = (claude_code_2_1_88, SMALL)


def main(names: list[str]) -> None:
    from steploop.effects.trace import record_sequence

    for name in names or list(SCENARIOS):
        s = SCENARIOS[name]()
        path = HERE / f"{name}.jsonl"
        record_sequence(path, s.cfg, s.request, s.events)
        print(f"recorded {path.name}: {len(s.events)} events, ends {s.state.transition}")


if __name__ == "__main__":
    main(sys.argv[1:])
