"""Values of the wrong type given to the machine (M-TYPE-1): one TypeError (``WrongType``)
naming the field, never an AttributeError or an AssertionError from deep inside."""

from __future__ import annotations

import types
import typing
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steploop.reducer import LoopConfig, Request, Session, WrongType, default, start, step
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    Interrupted,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.explore import World, moves
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage, UserMessage
from steploop.reducer.testing import configs, requests

_PLAIN = (int, str, bool)


def _wrong_values(t: Any) -> list[Any]:
    """Values that are clearly not of annotation ``t`` (the test's own reading of it)."""
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    optional = (origin is typing.Union or isinstance(t, types.UnionType)) and type(None) in args
    out: list[Any] = [] if optional else [None]
    if t is int or (optional and int in args):
        out += ["1", 1.5, True, []]
    elif t is str or (optional and str in args):
        out += [1, b"x", ["x"], True]
    elif t is bool:
        out += [1, "true", 0.0]
    elif origin is typing.Literal:
        out += ["bogus", 1, args[0].encode()]
    elif origin is tuple:
        out += [["x"], "ab", (1, 2), {"a": 1}]
    else:  # a class or a union of classes: a block, a message, traits, usage
        out += [{"type": "text", "text": "x"}, "x", 7, object()]
    return out


def _fields(cls: type) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name]) for f in attrs.fields(cls) if hints[f.name] is not Any]


def _mutations(e: Event) -> list[tuple[str, Any]]:
    """(the path of the field a mutation breaks, a thunk that builds the broken event)."""
    out: list[tuple[str, Any]] = []
    name = type(e).__name__
    for field, t in _fields(type(e)):
        for bad in _wrong_values(t):
            out.append((f"{name}.{field}", lambda f=field, b=bad: attrs.evolve(e, **{f: b})))
    nested: list[tuple[str, Any]] = []
    if isinstance(e, ModelBlockReceived):
        nested.append(("block", e.block))
    if isinstance(e, ModelResponseEnded):
        nested.append(("usage", e.usage))
    for field, inner in nested:  # a nested value built without a check, then put in the event
        for sub, t in _fields(type(inner)):
            for bad in _wrong_values(t):
                broken = attrs.evolve(inner, **{sub: bad})
                out.append(
                    (
                        f"{name}.{field}.{sub}",
                        lambda f=field, b=broken: attrs.evolve(e, **{f: b}),
                    )
                )
    return out


NOT_EVENTS: list[Any] = [
    None,
    1,
    "model_block_received",
    {"type": "interrupted"},
    [Interrupted()],
    Interrupted,
    UserMessage(id="u", content=(TextBlock(text="hi"),)),
    Request(prompt="hi"),
    Usage(),
    ToolTraits(),
]

# the outcomes of every bad value the sequences tried: {"WrongType": n, ...}
OUTCOMES: dict[str, int] = {}


def _bad(kind: str, where: str, thunk: Any) -> None:
    """Run one bad operation; it must raise WrongType naming ``where``."""
    try:
        thunk()
    except WrongType as e:
        OUTCOMES["WrongType"] = OUTCOMES.get("WrongType", 0) + 1
        assert isinstance(e, TypeError)
        assert str(e).startswith(where), (kind, where, str(e))
        return
    except Exception as e:  # anything else is the defect
        OUTCOMES[type(e).__name__] = OUTCOMES.get(type(e).__name__, 0) + 1
        raise AssertionError(f"{kind} {where}: {type(e).__name__}: {e}") from e
    OUTCOMES["accepted"] = OUTCOMES.get("accepted", 0) + 1
    raise AssertionError(f"{kind} {where}: accepted")


@pytest.mark.spec("M-TYPE-1", "M-5")
@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cfg=configs(), request=requests(), data=st.data())
def test_every_wrong_type_is_one_type_error_naming_the_field(
    cfg: LoopConfig, request: Request, data: st.DataObject
) -> None:
    """500 sequences: legal events, and between them values of the wrong type (a value that is
    not an event, an event with one field or one nested field of the wrong type, a state or a
    config that is not one): each raises one WrongType (a TypeError) naming the field, and
    the sequence goes on from the unchanged state."""
    state, _ = start(request, cfg)
    world = World(max_tools=2)
    for _ in range(data.draw(st.integers(1, 10), label="steps")):
        legal = moves(state, cfg, world)
        if not legal:
            break
        move = data.draw(st.sampled_from(legal), label="move")
        _one_bad(data, state, move.events[0], cfg)
        for e in move.events:  # the legal move, from the unchanged state
            state, _ = step(state, e, cfg)


def _one_bad(data: st.DataObject, s0: Any, event: Event, cfg: LoopConfig) -> None:
    """One bad value where ``event`` would go."""
    how = data.draw(st.sampled_from(["field", "not-event", "state", "config"]), label="how")
    if how == "field":
        where, thunk = data.draw(st.sampled_from(_mutations(event)), label="mutation")
        _bad(how, where, lambda: step(s0, thunk(), cfg))
    elif how == "not-event":
        value = data.draw(st.sampled_from(NOT_EVENTS), label="value")
        _bad(how, "step(): event", lambda: step(s0, value, cfg))
    elif how == "state":
        value = data.draw(st.sampled_from([None, {}, cfg, s0.session()]), label="state")
        _bad(how, "step(): state", lambda: step(value, event, cfg))
    else:
        value = data.draw(st.sampled_from([None, {}, "default", s0]), label="config")
        _bad(how, "step(): config", lambda: step(s0, event, value))


@pytest.mark.spec("M-TYPE-1")
@pytest.mark.parametrize(
    ("build", "where"),
    [
        (
            lambda: ModelBlockReceived(call_id="1", block=TextBlock(text="x")),  # type: ignore[arg-type]
            "ModelBlockReceived.call_id",
        ),
        (lambda: ModelBlockReceived(call_id=1, block={"type": "text"}), "ModelBlockReceived.block"),  # type: ignore[arg-type]
        (
            lambda: ModelBlockReceived(call_id=1, block=TextBlock(text=5)),  # type: ignore[arg-type]
            "ModelBlockReceived.block.text",
        ),
        (
            lambda: ModelBlockReceived(call_id=1, block=ToolUseBlock(id="t", name="R", input=[])),  # type: ignore[arg-type]
            "ModelBlockReceived.block.input",
        ),
        (lambda: ModelCallFailed(call_id=1, kind=5), "ModelCallFailed.kind"),  # type: ignore[arg-type]
        (lambda: ToolFinished(generation=1, tool_use_id="t", content=None), "ToolFinished.content"),  # type: ignore[arg-type]
        (
            lambda: ToolFinished(generation=1, tool_use_id="t", content="x", is_error=1),  # type: ignore[arg-type]
            "ToolFinished.is_error",
        ),
        (
            lambda: PermissionAnswered(generation=1, tool_use_id="t", decision="yes"),  # type: ignore[arg-type]
            "PermissionAnswered.decision",
        ),
        (lambda: Interrupted(kind="soft"), "Interrupted.kind"),  # type: ignore[arg-type]
        (lambda: CompactionFinished(compact_id=1, messages=[]), "CompactionFinished.messages"),  # type: ignore[arg-type]
        (
            lambda: MessagesInserted(messages=(UserMessage(id="u", content=(TextBlock(text=1),)),)),  # type: ignore[arg-type]
            "MessagesInserted.messages[0].content[0].text",
        ),
        (lambda: ToolTraits(max_result_chars="big"), "ToolTraits.max_result_chars"),  # type: ignore[arg-type]
        (lambda: Request(prompt=None), "Request.prompt"),  # type: ignore[arg-type]
        (lambda: Request(prompt=(TextBlock(text="x"), "y")), "Request.prompt[1]"),  # type: ignore[arg-type]
        (lambda: Session(conversation=()), "Session.conversation"),  # type: ignore[arg-type]
        (lambda: start(Request(prompt="x"), {"model": "m"}), "start(): config"),  # type: ignore[arg-type]
        (lambda: start("hello", default()), "start(): request"),  # type: ignore[arg-type]
        (lambda: start(Request(prompt="x"), default(), Session), "start(): session"),  # type: ignore[arg-type]
    ],
)
def test_a_wrong_value_is_named(build: Any, where: str) -> None:
    """Each kind of wrong value: one WrongType, a TypeError, whose message starts with the
    field's path and says what it must be."""
    with pytest.raises(WrongType) as caught:
        build()
    assert isinstance(caught.value, TypeError)
    assert str(caught.value).startswith(f"{where} must be "), str(caught.value)
    assert caught.value.where == where


@pytest.mark.spec("M-TYPE-1")
def test_the_machines_own_values_pass() -> None:
    """Every event a legal walk makes, and the machine's session, pass their checks."""
    cfg = default()
    state, _ = start(Request(prompt="go"), cfg)
    for _ in range(20):
        legal = moves(state, cfg, World(max_tools=2))
        if not legal:
            break
        for e in legal[0].events:
            state, _ = step(state, attrs.evolve(e), cfg)  # rebuilt: checked again
    assert Session(**{f.name: getattr(state.session(), f.name) for f in attrs.fields(Session)})


# --- P-CONFIG-3: bounded integers -----------------------------------------------------------


def _int_keys() -> list[tuple[str, Any]]:
    """Every integer key of the config, dotted, with the group it lives in."""
    from steploop.reducer.config import Compat, Gates, RetryPolicy

    out = []
    for prefix, cls in (
        ("", LoopConfig),
        ("retry.", RetryPolicy),
        ("gates.", Gates),
        ("compat.", Compat),
    ):
        hints = typing.get_type_hints(cls)
        for f in attrs.fields(cls):
            t = hints[f.name]
            if t is int or (
                typing.get_origin(t) in (typing.Union, types.UnionType)
                and int in typing.get_args(t)
            ):
                out.append((prefix + f.name, t))
    return out


@pytest.mark.spec("P-CONFIG-3")
@pytest.mark.parametrize("key", [k for k, _ in _int_keys() if not k.endswith("_pct")])
def test_every_integer_key_refuses_a_value_past_its_limit(key: str) -> None:
    """2**64 and the limit + 1 are refused naming the key, its limit and its unit (the
    percentages have theirs, 1..100, P-CONFIG-2)."""
    from steploop.reducer import ConfigError
    from steploop.reducer.config import INT_LIMIT, LIMITS

    limit, unit = LIMITS.get(key, (INT_LIMIT, "characters"))
    for value in (2**64, limit + 1):
        with pytest.raises(ConfigError, match=rf"{key} must be at most {limit:,} \({unit}\)"):
            default().with_overrides({key: value})


@pytest.mark.spec("P-CONFIG-3")
def test_the_limits_name_only_real_keys() -> None:
    """Every key in LIMITS is an integer key of the config (none stale, none misspelt)."""
    from steploop.reducer.config import LIMITS

    assert set(LIMITS) <= {k for k, _ in _int_keys()}


@pytest.mark.spec("P-CONFIG-3", "P-CONFIG-2")
@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from([k for k, _ in _int_keys()]), value=st.integers(min_value=2**31))
def test_huge_integers_are_refused_or_taken_whole(key: str, value: int) -> None:
    """Any integer from 2**31 up is a ConfigError or a config holding it exactly: never
    another exception."""
    from steploop.reducer import ConfigError

    try:
        cfg = default().with_overrides({key: value})
    except ConfigError:
        return
    group, _, name = key.rpartition(".")
    assert getattr(getattr(cfg, group) if group else cfg, name) == value


@pytest.mark.spec("M-TYPE-1")
def test_a_subclass_of_the_config_and_the_state_passes() -> None:
    """The check is isinstance underneath the fast class comparison: a subclass is taken."""

    class MyConfig(LoopConfig):
        pass

    cfg = MyConfig()
    state, _ = start(Request(prompt="go"), cfg)
    state, fx = step(state, Interrupted(), cfg)
    assert state.phase == "done" and fx
