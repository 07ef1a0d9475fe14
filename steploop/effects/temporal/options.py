"""How each kind of activity runs: timeouts, heartbeats, retries, cancellation, task queue.

The kinds (:data:`KINDS`): ``model`` (a model call), ``tools`` (every tool call), ``tool.NAME``
(the calls of one tool: its fields override ``tools``), ``compaction``, ``hooks`` (stop
hooks), ``summary`` (tool-use summaries), ``persist`` (``PersistToolResult``) and ``trace``
(the activity that receives the turn's trace, see :mod:`steploop.effects.temporal.turn`).

An :class:`ActivityOptions` leaves unset (None) what it does not change; a turn's options
(``TurnInput.activities``) are laid over :data:`DEFAULTS`, and ``tool.NAME`` over ``tools``.
They travel in the workflow's input, so every run of a turn (and every replay) uses the same.

From Python: ``turn_input(..., activities={"tools": ActivityOptions(heartbeat_s=2),
"tool.Bash": ActivityOptions(task_queue="bash-hosts")})``; from the command line:
``steploop temporal start ... --activity tools.heartbeat_s=2 --activity
tool.Bash.task_queue=bash-hosts`` (:func:`parse_setting`).

Why these defaults (specs/temporal.md): a model call is tried once (the machine decides on
retries, with its ``Wait`` a durable timer); a tool is retried when its worker is lost, and the
durable record of :mod:`steploop.effects.temporal.activities` keeps a tool that changes the
world from running twice. Tools and stop hooks are cancelled with ``wait_cancellation_completed``:
the turn ends only once every cancelled process has stopped. A part of the trace is a quick
append, given 3 s an attempt: a part a lost worker held is sent again soon (the turn's end waits
for its trace). The heartbeat timeout (10 s) is how
soon a lost worker is noticed; how soon a cancellation reaches a running activity is the
worker's heartbeat interval (:data:`HEARTBEAT_EVERY_S`, set by the plugin), not this timeout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "CANCELLATIONS",
    "DEFAULTS",
    "FIELDS",
    "HEARTBEAT_EVERY_S",
    "KINDS",
    "ActivityOptions",
    "Cancellation",
    "Resolved",
    "check_kind",
    "parse_setting",
    "resolve",
]

Cancellation: TypeAlias = Literal["try_cancel", "wait_cancellation_completed", "abandon"]
CANCELLATIONS: Final = ("try_cancel", "wait_cancellation_completed", "abandon")

KINDS: Final = ("model", "tools", "compaction", "hooks", "summary", "persist", "trace")
"""The kinds of activity; ``tool.NAME`` names the calls of one tool."""

HEARTBEAT_EVERY_S: Final = 0.5
"""How often a running activity's heartbeat reaches the server (the worker's heartbeat
throttle): a cancellation (an interrupt) reaches the activity on the answer to the next one."""


@dataclasses.dataclass
class ActivityOptions:
    """Options of one kind of activity; None: the default's (see :data:`DEFAULTS`).

    ``attempts``: the most attempts (1: never retried; 0: no limit). ``initial_interval_s``,
    ``backoff`` and ``max_interval_s``: the retry policy's waits. ``cancellation``: one of
    :data:`CANCELLATIONS` (Temporal's ``ActivityCancellationType``). ``task_queue``: None runs
    the activity on the workflow's task queue."""

    start_to_close_s: float | None = None
    heartbeat_s: float | None = None
    attempts: int | None = None
    initial_interval_s: float | None = None
    backoff: float | None = None
    max_interval_s: float | None = None
    cancellation: str | None = None
    task_queue: str | None = None


FIELDS: Final = tuple(f.name for f in dataclasses.fields(ActivityOptions))


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Every option set: what one activity is scheduled with."""

    start_to_close_s: float
    heartbeat_s: float | None
    attempts: int
    initial_interval_s: float
    backoff: float
    max_interval_s: float | None
    cancellation: Cancellation
    task_queue: str | None

    def temporal(self) -> dict[str, Any]:
        """The keyword arguments of ``workflow.execute_activity`` (timeouts, retry policy,
        cancellation type, task queue)."""
        from temporalio.common import RetryPolicy
        from temporalio.workflow import ActivityCancellationType

        return {
            "start_to_close_timeout": timedelta(seconds=self.start_to_close_s),
            "heartbeat_timeout": (
                timedelta(seconds=self.heartbeat_s) if self.heartbeat_s else None
            ),
            "retry_policy": RetryPolicy(
                maximum_attempts=self.attempts,
                initial_interval=timedelta(seconds=self.initial_interval_s),
                backoff_coefficient=self.backoff,
                maximum_interval=(
                    timedelta(seconds=self.max_interval_s) if self.max_interval_s else None
                ),
                non_retryable_error_types=["TypeError", "SerializationError", "StoreMissing"],
            ),
            "cancellation_type": ActivityCancellationType[self.cancellation.upper()],
            "task_queue": self.task_queue,
        }


def _defaults(
    start_to_close_s: float, attempts: int, cancellation: Cancellation, heartbeat_s: float | None
) -> Resolved:
    return Resolved(
        start_to_close_s=start_to_close_s,
        heartbeat_s=heartbeat_s,
        attempts=attempts,
        initial_interval_s=1.0,
        backoff=2.0,
        max_interval_s=None,
        cancellation=cancellation,
        task_queue=None,
    )


DEFAULTS: Final[Mapping[str, Resolved]] = {
    "model": _defaults(600.0, 1, "try_cancel", 10.0),
    "tools": _defaults(600.0, 3, "wait_cancellation_completed", 10.0),
    "compaction": _defaults(600.0, 1, "try_cancel", 10.0),
    "hooks": _defaults(600.0, 1, "wait_cancellation_completed", 10.0),
    "summary": _defaults(120.0, 1, "try_cancel", 10.0),
    "persist": _defaults(10.0, 3, "try_cancel", None),
    "trace": _defaults(3.0, 5, "try_cancel", None),
}


def check_kind(kind: str) -> None:
    """Raise ValueError unless ``kind`` is one of :data:`KINDS` or ``tool.NAME``."""
    if kind in KINDS or (kind.startswith("tool.") and len(kind) > 5):
        return
    raise ValueError(f"unknown activity kind {kind!r}: one of {', '.join(KINDS)} or tool.NAME")


def _over(base: Resolved, options: ActivityOptions | None) -> Resolved:
    if options is None:
        return base
    changes = {k: v for k, v in dataclasses.asdict(options).items() if v is not None}
    out = dataclasses.replace(base, **changes)
    _check(out)
    return out


#: The longest duration an option takes (s): about 31 years. A longer one, an infinity or a
#: NaN passed the checks and raised OverflowError or ValueError when the workflow scheduled the
#: activity (``timedelta``), or in Temporal's encoding.
MAX_DURATION_S: Final = 1e9
#: The most attempts (Temporal's ``maximum_attempts`` is a 32-bit integer).
MAX_ATTEMPTS: Final = 2**31 - 1


def _check(r: Resolved) -> None:
    if r.cancellation not in CANCELLATIONS:
        raise ValueError(
            f"cancellation must be one of {', '.join(CANCELLATIONS)}, got {r.cancellation!r}"
        )
    durations = {
        "start_to_close_s": r.start_to_close_s,
        "heartbeat_s": r.heartbeat_s,
        "initial_interval_s": r.initial_interval_s,
        "max_interval_s": r.max_interval_s,
    }
    for name, value in durations.items():
        if value is not None and not 0 <= value <= MAX_DURATION_S:  # NaN fails it too
            raise ValueError(f"{name} must be from 0 to {MAX_DURATION_S:,.0f} s, got {value}")
    if r.start_to_close_s <= 0:
        raise ValueError("timeouts must be positive")
    if (
        not 0 <= r.attempts <= MAX_ATTEMPTS
        or not 1 <= r.backoff <= 1e6
        or r.initial_interval_s <= 0
    ):
        raise ValueError(
            f"attempts must be from 0 to {MAX_ATTEMPTS:,}, backoff from 1 to 1,000,000 and "
            "initial_interval_s > 0"
        )


def resolve(kind: str, overrides: Mapping[str, ActivityOptions]) -> Resolved:
    """The options of ``kind`` (``tool.NAME``: over ``tools``) with ``overrides`` laid over
    the defaults."""
    check_kind(kind)
    if kind.startswith("tool."):
        return _over(resolve("tools", overrides), overrides.get(kind))
    return _over(DEFAULTS[kind], overrides.get(kind))


def parse_setting(text: str, into: dict[str, ActivityOptions]) -> None:
    """Apply one ``KIND.FIELD=VALUE`` setting (``tool.Bash.heartbeat_s=2``) to ``into``;
    ValueError names what is wrong."""
    key, sep, value = text.partition("=")
    kind, dot, field = key.strip().rpartition(".")
    if not sep or not dot or not kind:
        raise ValueError(f"--activity {text!r}: expected KIND.FIELD=VALUE")
    check_kind(kind)
    if field not in FIELDS:
        raise ValueError(
            f"--activity {text!r}: unknown field {field!r}: one of {', '.join(FIELDS)}"
        )
    value = value.strip()
    parsed: Any
    try:
        if field in ("task_queue", "cancellation"):
            parsed = value or None
        elif field == "attempts":
            parsed = int(value)
        else:
            parsed = float(value)
    except ValueError:
        raise ValueError(f"--activity {text!r}: {field} must be a number") from None
    options = into.setdefault(kind, ActivityOptions())
    setattr(options, field, parsed)
    resolve(kind, into)  # checked now, not when the turn runs
