"""What changed a model request: the two requests compared, the difference named by its layer
(steploop/effects/trace/layers.py), and counterfactual replay's report naming it (TR-CF-1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.counterfactual import build
from steploop.effects.trace import replay_counterfactual
from steploop.effects.trace.layers import compare_requests
from steploop.reducer.context import CLEARED_RESULT, persisted_preview
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)


def _round(n: int, result: str = "x = 1\n") -> list[Message]:
    use = ToolUseBlock(id=f"t{n}", name="Read", input={"file_path": f"f{n}.py"})
    return [
        AssistantMessage(id=f"a{n}", response_id=f"r{n}", model="m", content=(use,)),
        UserMessage(id=f"u{n}", content=(ToolResultBlock(tool_use_id=f"t{n}", content=result),), origin="tool_result"),
    ]


def _history(rounds: int) -> list[Message]:
    out: list[Message] = [UserMessage(id="p", content=(TextBlock(text="read them all"),))]
    for n in range(1, rounds + 1):
        out += _round(n)
    return out


def _call(messages: list[Message], **kw: object) -> CallModel:
    args: dict[str, object] = {"call_id": 1, "model": "m", "max_tokens": 8000, **kw}
    return CallModel(conversation=Conversation.of(messages), **args)  # type: ignore[arg-type]


def _renumbered(ms: list[Message]) -> list[Message]:
    """The same messages under other ids (a new run numbers its own)."""
    import attrs

    return [attrs.evolve(m, id=f"n-{m.id}") for m in ms]


@pytest.mark.spec("TR-CF-1")
def test_the_same_request_under_other_ids_is_the_same() -> None:
    """Ids are left out, as in the fingerprints: a new run's own numbering differs in nothing."""
    h = _history(4)
    change = compare_requests(_call(h), _call(_renumbered(h)))
    assert change.same and change.describe() == "the requests send the same messages"


@pytest.mark.spec("TR-CF-1")
def test_a_snip_is_named_with_what_it_dropped() -> None:
    """Older rounds dropped behind a snip boundary: snip, the dropped messages counted."""
    h = _history(6)
    boundary = SystemMessage(id="b", subtype="snip_boundary", text="Snipped 4 earlier messages")
    snipped = [h[0], boundary, *h[5:]]
    change = compare_requests(_call(h), _call(snipped))
    assert change.layers == ("snip",) and change.marks_b == ("snip",) and not change.marks_a
    assert (change.only_a, change.only_b, change.length_a, change.length_b) == (4, 1, 13, 10)
    assert change.tokens_a > 0 and change.other == ()
    assert "changed by snip (its mark in the new run's)" in change.describe()


@pytest.mark.spec("TR-CF-1")
@pytest.mark.parametrize(
    ("layer", "make"),
    [
        ("microcompact", lambda m: _round(m, CLEARED_RESULT)),
        ("budget", lambda m: _round(m, persisted_preview(f"t{m}", "y" * 9000, 100))),
    ],
)
def test_a_changed_tool_result_is_named_by_its_mark(layer: str, make: object) -> None:
    """A result cleared by microcompact, or replaced by the result budget's preview."""
    h = _history(5)
    changed = [*h[:3], *make(2), *h[5:]]  # type: ignore[operator]
    change = compare_requests(_call(h), _call(changed))
    assert change.layers == (layer,) and change.only_a == change.only_b == 1


@pytest.mark.spec("TR-CF-1")
def test_collapse_and_compaction_marks() -> None:
    """A collapse stub, and a compaction's boundary and summary, are named; both at once in
    the pipeline's order."""
    h = _history(6)
    stub = UserMessage(id="s", content=(TextBlock(text="[Context collapsed: 6 earlier messages folded; tools used: Read]"),), is_meta=True, origin="collapse")
    change = compare_requests(_call(h), _call([h[0], stub, *h[7:]]))
    assert change.layers == ("collapse",)
    compacted: list[Message] = [
        SystemMessage(id="cb", subtype="compact_boundary", text="compacted"),
        UserMessage(id="cs", content=(TextBlock(text="summary"),), origin="compact_summary"),
        *h[-2:],
    ]
    both = [h[0], SystemMessage(id="b", subtype="snip_boundary", text="Snipped"), stub, *h[-2:]]
    assert compare_requests(_call(h), _call(compacted)).layers == ("compaction",)
    assert compare_requests(_call(compacted), _call(both)).layers == ("snip", "collapse", "compaction")


@pytest.mark.spec("TR-CF-1")
def test_a_difference_no_layer_marks_is_the_messages_and_the_call_fields() -> None:
    """Another tool result with no layer's mark is "messages"; model and max_tokens are named."""
    h = _history(3)
    other = [*h[:-1], _round(3, "x = 2\n")[1]]
    change = compare_requests(_call(h), _call(other, model="m2", max_tokens=64000))
    assert change.layers == () and change.other == ("model", "max_tokens", "messages")
    assert "also differ: model, max_tokens, messages" in change.describe()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layers") / "session.jsonl"
    build(path, 12)  # 12 tool rounds, history never compacted
    return path


@pytest.mark.spec("TR-CF-1")
def test_counterfactual_divergence_names_the_layer(session: Path, tmp_path: Path) -> None:
    """A lower snip threshold makes the new run snip where the recording did not: the report
    names the call, the recorded one, and snip as what changed the request; the new run is
    written as a trace of its own up to there."""
    out = tmp_path / "new.jsonl"
    report = replay_counterfactual(session, {"snip_buffer": 191_500}, record=out)
    assert report.status == "diverged" and report.divergence is not None
    d = report.divergence
    assert d.kind == "call_model" and d.layers == ("snip",) and d.recorded_step is not None
    text = report.describe()
    assert "\n  the request: the recording's request has " in text
    assert "changed by snip (its mark in the new run's)" in text
    from steploop.effects.trace import StepRecord, TraceReader

    reader = TraceReader(out)
    steps = [r for r in reader if isinstance(r, StepRecord)]
    assert reader.header is not None and reader.header.provenance["counterfactual_of"] == str(session)
    assert reader.header.config.snip_buffer == 191_500 and reader.end is None
    assert len(steps) == report.steps
