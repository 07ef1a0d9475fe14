"""Context management: the persistent conversation and its canonical digests (specs/rules.md
R-COST-1, R-COST-2)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import pytest

from steploop.reducer import Conversation, default
from steploop.reducer.effects import CallModel
from steploop.reducer.messages import AssistantMessage, TextBlock, ToolUseBlock, Usage, UserMessage
from tests.reducer.context_kit import MODEL, calls, tool_round
from tests.reducer.driver import Driver

# --- R-COST-1 / R-COST-2 ----------------------------------------------------------------------

FIXED = (
    UserMessage(id="m1", content=(TextBlock(text="hello"),)),
    AssistantMessage(
        id="m2",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="hi"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=10, output_tokens=2),
    ),
)
FIXED_DIGEST = "1d537aa1e16d5151f46e0a12fc39f65c"


@pytest.mark.spec("R-COST-1")
def test_append_shares_structure() -> None:
    """append returns a new node pointing at the old value, which is unchanged."""
    c1 = Conversation.of(FIXED[:1])
    c2 = c1.append(FIXED[1])
    assert c2.prev is c1
    assert len(c1) == 1 and len(c2) == 2
    assert c1.messages() == FIXED[:1]
    assert c2.messages() == FIXED
    c3 = c1.append(FIXED[1])  # a branch shares the same prefix
    assert c3.prev is c1
    assert c3 == c2 and c3 is not c2


@pytest.mark.spec("R-COST-1")
def test_equality_by_length_and_digest() -> None:
    """Equal messages give equal conversations; any difference gives a different digest."""
    a = Conversation.of(FIXED)
    b = Conversation.empty().extend(FIXED)
    assert a == b and hash(a) == hash(b)
    other = Conversation.of([FIXED[0], UserMessage(id="m2", content=(TextBlock(text="hi"),))])
    assert a != other
    assert Conversation.of(FIXED[:1]) != a
    swapped = Conversation.of([FIXED[1], FIXED[0]])
    assert swapped != a
    # O(1): comparing two long conversations does not walk them
    long_a = Conversation.of(FIXED * 2_000)
    long_b = Conversation.of(FIXED * 2_000)
    calls_made: list[int] = []
    orig = Conversation.messages

    def spy(self: Conversation) -> Any:
        calls_made.append(1)
        return orig(self)

    Conversation.messages = spy  # type: ignore[method-assign]
    try:
        assert long_a == long_b
    finally:
        Conversation.messages = orig  # type: ignore[method-assign]
    assert not calls_made


@pytest.mark.spec("R-COST-1")
def test_digests_are_lazy_and_equal_to_eager_ones() -> None:
    """Digests are computed on first use, back to the last known one, and equal the digests
    read after every append; a branch reuses the shared prefix's digests."""
    msgs = [UserMessage(id=f"u{i}", content=(TextBlock(text=f"text {i}"),)) for i in range(300)]
    eager = Conversation.empty()
    eager_digests = []
    for m in msgs:
        eager = eager.append(m)
        eager_digests.append(eager.digest)
    lazy = Conversation.of(msgs)
    assert lazy._digest is None and lazy.prev is not None and lazy.prev._digest is None
    assert lazy.digest == eager_digests[-1]
    node: Conversation | None = lazy
    for d in reversed(eager_digests):  # every node on the way got its digest
        assert node is not None and node._digest == d
        node = node.prev
    branch = lazy.prev.append(msgs[0]) if lazy.prev is not None else lazy
    assert branch.digest != lazy.digest and branch._digest is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        lazy.length = 3
    with pytest.raises(ValueError, match="needs prev and last"):
        Conversation(
            prev=None,
            last=None,
            length=1,
            digest=None,
            est_total=0,
            anchor_usage=None,
            est_at_anchor=0,
            run_response_id=None,
            est_after_run_first=0,
        )


@pytest.mark.spec("R-COST-1")
def test_step_never_computes_a_digest() -> None:
    """A live run pays nothing for digests: step() never asks for one, so after many rounds
    no message appended during the turn has its digest computed."""
    d = Driver(default())
    for i in range(20):
        tool_round(d, f"t{i}", content="ok")
    node: Conversation | None = d.state.conversation
    fresh = 0
    while node is not None and node.prev is not None:
        assert node._digest is None
        fresh += 1
        node = node.prev
    assert fresh >= 40  # tool_use and tool_result records of every round


@pytest.mark.spec("R-COST-1")
def test_call_model_carries_same_conversation_object() -> None:
    """CallModel carries the state's Conversation object itself, not a copy."""
    d = Driver(default())
    assert d.of(CallModel)[0].conversation is d.state.conversation
    fx = tool_round(d, "t1", content="ok")
    assert calls(fx)[0].conversation is d.state.conversation


@pytest.mark.spec("R-COST-2")
def test_digest_pinned() -> None:
    """The chained digest of a fixed conversation is a fixed BLAKE2b value."""
    assert Conversation.of(FIXED).digest.hex() == FIXED_DIGEST
    assert Conversation.of(list(FIXED)).digest.hex() == FIXED_DIGEST


@pytest.mark.spec("R-COST-2")
def test_digest_is_blake2b_over_canonical_json() -> None:
    """The digest chains BLAKE2b over sorted-key JSON with the tags included."""
    d = b"\x00" * 16
    for m in FIXED:
        data = _plain(m)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert '"type":"' in text
        h = hashlib.blake2b(d, digest_size=16)
        h.update(text.encode())
        d = h.digest()
    assert d.hex() == FIXED_DIGEST


def _plain(v: Any) -> Any:
    if attrs.has(type(v)):
        out = {f.name: _plain(getattr(v, f.name)) for f in attrs.fields(type(v))}
        tag = getattr(type(v), "TAG", None)
        if tag is not None:
            out["type"] = tag
        return out
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


@pytest.mark.spec("R-COST-2")
def test_digest_independent_of_dict_order() -> None:
    """Tool inputs with the same keys in another order give the same digest."""
    a = AssistantMessage(
        id="m1",
        response_id="r1",
        model=MODEL,
        content=(ToolUseBlock(id="t1", name="Bash", input={"a": 1, "b": [1, 2]}),),
    )
    b = AssistantMessage(
        id="m1",
        response_id="r1",
        model=MODEL,
        content=(ToolUseBlock(id="t1", name="Bash", input={"b": [1, 2], "a": 1}),),
    )
    assert Conversation.of([a]) == Conversation.of([b])
    assert Conversation.of([a]).digest == Conversation.of([b]).digest
