"""The composed canonical text equals its definition (sorted-key JSON of to_data)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steploop.reducer.canonical import canonical_bytes, canonical_bytes_reference, state_digest
from steploop.reducer.messages import AssistantMessage, TextBlock, ToolUseBlock, Usage
from tests.reducer.driver import UNSAFE, Driver


def _states() -> list[object]:
    from steploop.reducer import claude_code_2_1_88, default

    out: list[object] = []
    for cfg in (default(), claude_code_2_1_88()):
        d = Driver(cfg, prompt='Fix the bug ☃ \u2028 "quoted"')
        out.append(d.state)
        d.text("Looking…")
        out.append(d.state)
        d.tool_use("t1", "Read", file_path="a.py", nested={"z": [1, 2.5, None, True], "a": "é"})
        out.append(d.state)
        d.tool_use("t2", "Edit", UNSAFE, file_path="b.py", old_string="x", new_string="y")
        d.end("tool_use")
        out.append(d.state)
        d.allow("t1")
        d.finish_tool("t1", "content\nwith lines")
        out.append(d.state)
        out.extend(d.effects)
    return out


@pytest.mark.spec("R-COST-2")
def test_composed_text_matches_the_definition_on_real_states() -> None:
    """Every state and effect of two scenarios encodes exactly as the reference JSON."""
    for v in _states():
        assert canonical_bytes(v) == canonical_bytes_reference(v)
        assert canonical_bytes(v) == canonical_bytes_reference(v)  # memoised second time


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@pytest.mark.spec("R-COST-2")
@settings(max_examples=200, deadline=None)
@given(
    text=st.text(),
    inp=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    n=st.integers(0, 10**12),
)
def test_composed_text_matches_on_arbitrary_messages(
    text: str, inp: dict[str, object], n: int
) -> None:
    """Arbitrary text, tool inputs and numbers encode as the reference JSON."""
    m = AssistantMessage(
        id="m1",
        response_id="r1",
        model="x",
        content=(TextBlock(text=text), ToolUseBlock(id="t", name="N", input=inp)),
        usage=Usage(input_tokens=n),
    )
    assert canonical_bytes(m) == canonical_bytes_reference(m)


def test_state_digest_is_stable_across_calls() -> None:
    """Memoisation never changes a digest."""
    states = _states()
    first = [state_digest(s) for s in states]
    assert first == [state_digest(s) for s in states]


@pytest.mark.spec("R-COST-2")
@settings(max_examples=200, deadline=None)
@given(
    inp=st.dictionaries(
        st.text(max_size=4) | st.integers(-20, 20) | st.booleans() | st.none(),
        json_values,
        max_size=5,
    ),
    field=st.none() | st.text() | st.integers() | st.booleans(),
)
def test_composed_text_matches_with_any_keys_and_field_values(
    inp: dict[object, object], field: object
) -> None:
    """Dicts with keys of any JSON scalar type (written as str(key), sorted as text) and
    fields holding a str, None, an int or a bool where another type is declared encode as
    the reference JSON (the compiled encoders write str and None fields themselves)."""
    m = AssistantMessage(
        id="m1",
        response_id="r1",
        model="x",
        content=(ToolUseBlock(id="t", name="N", input=inp),),  # type: ignore[arg-type]
        stop_reason=field,  # type: ignore[arg-type]
    )
    assert canonical_bytes(m) == canonical_bytes_reference(m)
