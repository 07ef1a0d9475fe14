"""The registry's quick check of plain tool schemas (``steploop.effects.tools.base._quick_check``): it
may only say "valid" where the full Draft 2020-12 validator agrees, and it must say so for the
inputs the built-in tools get, or it saves nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]

from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.tools.base import _plain, _quick_check
from steploop.reducer.events import InterruptBehavior

BUILTIN = {t.name: _plain(t.input_schema) for t in builtin_tools(Path("."), enable_bash=True)}
EXTRA: dict[str, dict[str, Any]] = {
    "empty": {"type": "object", "properties": {}},
    "open": {"type": "object", "properties": {"n": {"type": "number"}, "flag": {"type": "boolean"}}},
    "bounded": {
        "type": "object",
        "properties": {"k": {"type": "integer", "minimum": -3, "maximum": 7}, "z": {"type": "null"}},
        "required": ["k"],
        "additionalProperties": False,
    },
    "containers": {"type": "object", "properties": {"xs": {"type": "array"}, "o": {"type": "object"}}},
}
SCHEMAS = {**BUILTIN, **EXTRA}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def inputs_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Objects built from the schema's own property names (so many are valid or nearly so),
    plus anything at all."""
    names = [*schema.get("properties", {}), *schema.get("required", []), "other"]
    near = st.dictionaries(st.sampled_from(names), json_values, max_size=len(names))
    return near | json_values


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_quick_check_never_accepts_what_the_validator_rejects(name: str) -> None:
    schema = SCHEMAS[name]
    accepts = _quick_check(schema)
    assert accepts is not None, f"{name}: a plain schema the quick check should cover"
    validator = Draft202012Validator(schema)

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(inputs_for(schema))
    def agree(value: Any) -> None:
        if accepts(value):
            assert validator.is_valid(value), value

    agree()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Read", {"file_path": "a.txt"}),
        ("Read", {"file_path": "a.txt", "offset": 3, "limit": 10}),
        ("Edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": True}),
        ("Bash", {"command": "ls"}),
        ("empty", {}),
        ("bounded", {"k": 7, "z": None}),
    ],
)
def test_the_quick_check_accepts_plain_valid_inputs(name: str, value: dict[str, Any]) -> None:
    accepts = _quick_check(SCHEMAS[name])
    assert accepts is not None and accepts(value)
    assert Draft202012Validator(SCHEMAS[name]).is_valid(value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Read", {}),  # required missing
        ("Read", {"file_path": "a", "offset": 0}),  # below the minimum
        ("Read", {"file_path": "a", "offset": True}),  # a bool is no integer
        ("Read", {"file_path": "a", "extra": 1}),  # additionalProperties false
        ("bounded", {"k": 8}),
        ("open", {"n": "1"}),
        ("empty", []),
    ],
)
def test_invalid_inputs_still_get_the_validator_message(name: str, value: Any) -> None:
    accepts = _quick_check(SCHEMAS[name])
    assert accepts is not None and not accepts(value)
    assert not Draft202012Validator(SCHEMAS[name]).is_valid(value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"p": {"type": "string", "pattern": "^a"}}},
        {"type": "object", "properties": {"p": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"p": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"p": {"type": "object", "properties": {}}}},
        {"type": "object", "properties": {"p": {"type": "number", "minimum": 1}}},
        {"type": "object", "minProperties": 1},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
        {"type": "array"},
    ],
)
def test_other_schemas_go_to_the_validator(schema: dict[str, Any]) -> None:
    assert _quick_check(schema) is None


def test_registry_messages_are_unchanged() -> None:
    """Through the registry, a failing input still gets the validator's one-line message."""

    class Tool:
        name = "T"
        description = "t"
        input_schema: Mapping[str, Any] = EXTRA["bounded"]
        max_result_chars = None
        interrupt: InterruptBehavior = "block"
        cancels_siblings_on_error = False

        def is_concurrency_safe(self, input: Any) -> bool:
            return True

        async def call(self, input: Any, ctx: Any) -> Any:
            raise AssertionError

    reg = ToolRegistry([Tool()])
    assert reg.validate("T", {"k": 1}) is None
    assert reg.validate("T", {"k": 9}) == "input.k: 9 is greater than the maximum of 7"
    assert reg.validate("T", {}) == "input: 'k' is a required property"
