"""Why a turn did not reproduce: its first divergence, classified (specs/import.md §8).

Each cause has an id, used in the summary table and in the trace's provenance, and one sentence
that explains it; specs/import.md lists them with what would close each.
"""

from __future__ import annotations

import attrs

from steploop.effects.importer.compare import Divergence
from steploop.effects.importer.driver import REJECT_PREFIX, SIBLING_CANCEL_PREFIX, TurnDriver
from steploop.effects.importer.segment import Item

__all__ = ["CAUSES", "explain"]

CAUSES: dict[str, str] = {
    "interrupt-result-text": (
        "the machine gives a tool an interrupt stopped the result 'Interrupted by user'; Claude "
        "Code's streaming executor writes its rejection text (\"The user doesn't want to proceed "
        'with this tool use…")'
    ),
    "rejection-text": "the machine's text for a rejected tool call is not Claude Code's",
    "api-error-text": "the machine names or words an API error differently from Claude Code",
    "sibling-cancel": (
        "the machine cancelled a sibling of a failing call (or did not) where Claude Code did not "
        "(or did)"
    ),
    "auto-compact-timing": (
        "the machine's context count and Claude Code's fall on different sides of the "
        "auto-compact threshold, so one compacts a round before the other"
    ),
    "tool-schedule": (
        "the machine had not started a tool when the transcript shows its result: the inferred "
        "concurrency traits (IMP-12) do not match how Claude Code ran it"
    ),
    "stop-hook-order": (
        "the stop-hook summary and the hooks' feedback are in another order than the machine's "
        "under Q-13 (Claude Code 2.1.88 writes the feedback first)"
    ),
    "cut-off": "the transcript ends inside the turn (the session was closed or killed)",
    "unknown-call": (
        "the transcript has a result for a tool call the machine never received (the record of "
        "the call is missing or in another branch)"
    ),
    "rejected-event": "step() rejects the event the transcript implies here",
    "malformed-conversation": (
        "the transcript's conversation is one the Messages API refuses (a tool_use id used "
        "twice, a tool_result naming no tool_use, an empty prompt or text block): the machine "
        "ends such a response as malformed, or refuses such a session (M-HIST-1, B-MODEL-2), "
        "where Claude Code repaired it before sending"
    ),
    "unexplained": "not classified: read the divergence",
}


def explain(div: Divergence, driver: TurnDriver, items: list[Item]) -> Divergence:
    """Give ``div`` its cause id and explanation."""
    cause = _cause(div, driver, items)
    return attrs.evolve(div, cause=cause, why=CAUSES[cause])


def _cause(div: Divergence, driver: TurnDriver, items: list[Item]) -> str:
    exp, got = div.expected, div.got
    if driver.stuck is not None and div.step is None and div.got == driver.stuck:
        why = driver.stuck
        if "auto-compact" in why or "compacting" in why:
            return "auto-compact-timing"
        if "arrives before the machine started it" in why:
            return "tool-schedule"
        if "step() rejects" in why:
            return "rejected-event"
        if "refuses the conversation" in why:
            return "malformed-conversation"
        if "which the machine has no call" in why:
            return "unknown-call"
        if "turn ends here" in why and driver.last_turn:
            return "cut-off"
        if "does not call the model" in why and "compacting" in why:
            return "auto-compact-timing"
        return "unexplained"
    if "the model sent a malformed response" in got:
        return "malformed-conversation"
    if REJECT_PREFIX[:30] in exp and "Interrupted by user" in got:
        return "interrupt-result-text"
    if "rejected this tool use" in got:
        return "rejection-text"
    if exp.startswith("API error") or got.startswith("wrote API error"):
        return "api-error-text"
    if SIBLING_CANCEL_PREFIX[18:40] in exp or SIBLING_CANCEL_PREFIX[18:40] in got:
        return "sibling-cancel"
    if ("stop_hook_summary" in got and "Stop hook feedback" in exp) or (
        "stop_hook_summary" in exp and "Stop hook feedback" in got
    ):
        return "stop-hook-order"
    return "unexplained"
