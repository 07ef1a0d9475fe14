"""The validator of tool inputs: JSON Schema 2020-12, its regular expressions on RE2 (specs/
E-SCHEMA-1).

A tool's schema can come from outside (an MCP server's tool list) and the input it checks
from the model. ``jsonschema`` runs ``pattern`` and ``patternProperties`` on Python's ``re``,
which backtracks: ``^(a+)+$`` against 30 ``a`` and a ``!`` runs for minutes holding the
interpreter lock, and the input is checked on the event loop (a tool_use block's traits), so
the whole agent froze. Here the keywords that search patterns (``pattern``,
``patternProperties``, and ``additionalProperties``, which asks which keys the patterns
cover) search with RE2, in time linear in the text. A pattern RE2 will not take (look-around,
backreferences) is not checked: the tool, or the server behind it, checks its input itself.

Left on ``re``: ``unevaluatedProperties`` over ``patternProperties`` (jsonschema's own walk),
and the ``regex`` format, which only compiles the text (format checks are off here).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# jsonschema ships no type information; types-jsonschema may or may not be installed.
from jsonschema import Draft202012Validator, validators  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped, unused-ignore]

from steploop.effects.tools.regex import schema_pattern_search

__all__ = ["InputValidator"]


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if validator.is_type(instance, "string") and schema_pattern_search(pattern, instance) is False:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if schema_pattern_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The keys neither ``properties`` nor ``patternProperties`` cover (a key an unchecked
    pattern might cover counts as covered)."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties
        and not any(schema_pattern_search(p, key) is not False for p in patterns)
    ]


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, its keys found with RE2, its messages the same."""
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            listed = ", ".join(repr(each) for each in sorted(extras, key=str))
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


InputValidator: Any = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
"""Draft202012Validator, with the pattern keywords on RE2."""
