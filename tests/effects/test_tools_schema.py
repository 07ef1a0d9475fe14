"""E-SCHEMA-1: tool inputs are checked against their schema with the pattern keywords on RE2,
so a schema from outside (an MCP server's) cannot freeze the agent with a backtracking
pattern; everything else is checked as jsonschema's Draft 2020-12 validator checks it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped, unused-ignore]

from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.effects.tools.schema import InputValidator

EVIL = "^(a+)+$"


def tool_with(schema: Mapping[str, Any]) -> Any:
    @attrs.frozen
    class Schemed:
        name: ClassVar[str] = "Schemed"
        description: ClassVar[str] = "a tool whose schema came from outside"
        input_schema: ClassVar[Mapping[str, Any]] = schema
        max_result_chars: ClassVar[int | None] = None
        interrupt: ClassVar[str] = "block"
        cancels_siblings_on_error: ClassVar[bool] = False

        def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
            return True

        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            return ToolOutput(content="ran")

    return Schemed()


@pytest.mark.spec("E-SCHEMA-1")
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": EVIL}}},
        {"type": "object", "patternProperties": {EVIL: {"type": "string"}}},
        {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
    ],
    ids=["pattern", "patternProperties", "additionalProperties"],
)
def test_a_backtracking_pattern_answers_at_once(schema: dict[str, Any]) -> None:
    """Under Python's re each check below would take minutes (2**n steps, n = 40); the CPU
    bound is a hundred times what RE2 takes here."""
    registry = ToolRegistry([tool_with(schema)])
    evil = "a" * int(os.environ.get("STEPLOOP_TEST_EVIL_N", "40")) + "!"
    start = time.process_time()
    for _ in range(10):
        registry.validate("Schemed", {"x": evil})
        registry.validate("Schemed", {evil: "v"})
        registry.traits("Schemed", {"x": evil, evil: 1})
    assert time.process_time() - start < 1.0
    if "properties" in schema:
        assert registry.validate("Schemed", {"x": evil}) == f"input.x: {evil!r} does not match {EVIL!r}"
    if schema.get("additionalProperties") is False:
        assert registry.validate("Schemed", {"x": evil}) == f"input: 'x' does not match any of the regexes: {EVIL!r}"


@pytest.mark.spec("E-SCHEMA-1")
def test_a_pattern_re2_refuses_is_not_checked() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(?!no)"}}}
    registry = ToolRegistry([tool_with(schema)])
    assert registry.validate("Schemed", {"x": "no way"}) is None  # look-ahead: left to the tool
    assert not Draft202012Validator(schema).is_valid({"x": "no way"})


@pytest.mark.spec("E-SCHEMA-1")
def test_dollar_anchors_at_the_end_as_in_ecma_262() -> None:
    """JSON Schema patterns are ECMA-262's: ``$`` is the end of the text; Python's ``$`` also
    matches before a final line break."""
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a$"}}}
    assert not InputValidator(schema).is_valid({"x": "a\n"})
    assert Draft202012Validator(schema).is_valid({"x": "a\n"})


PATTERNS = ["^a", "b$", "^[a-z]+$", "x|y", "\\d{2,}", "^é.", "^_"]
SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"s": {"type": "string", "pattern": p}}} for p in PATTERNS
] + [
    {"type": "object", "patternProperties": {p: {"type": "integer"}}, "additionalProperties": a}
    for p in PATTERNS
    for a in (False, True, {"type": "string"})
] + [
    {"type": "object", "properties": {"id": {}}, "additionalProperties": False},
    {"type": "object", "properties": {"id": {}}, "additionalProperties": {"type": "integer"}},
]

keys = st.sampled_from(["s", "id", "a", "ab", "b", "x", "12", "é!", "_k", "Zb", "a\n"])
values = st.one_of(st.integers(-3, 3), st.text("abxy19é_\n", max_size=6), st.none())


@pytest.mark.spec("E-SCHEMA-1")
@settings(max_examples=300, deadline=None)
@given(schema=st.sampled_from(SCHEMAS), instance=st.dictionaries(keys, values, max_size=4))
def test_it_agrees_with_jsonschema_on_patterns_both_engines_read_alike(
    schema: dict[str, Any], instance: dict[str, Any]
) -> None:
    """Where the two engines agree on the pattern (no ``$`` before a final line break), the
    verdict and the best error's message and path are jsonschema's."""
    ours, theirs = InputValidator(schema), Draft202012Validator(schema)
    if any(isinstance(v, str) and v.endswith("\n") for v in instance.values()) or "a\n" in instance:
        return  # the one place the dialects differ (test above)
    assert ours.is_valid(instance) == theirs.is_valid(instance)
    a, b = best_match(ours.iter_errors(instance)), best_match(theirs.iter_errors(instance))
    assert (a is None) == (b is None)
    if a is not None:
        assert (a.message, list(a.absolute_path)) == (b.message, list(b.absolute_path))
