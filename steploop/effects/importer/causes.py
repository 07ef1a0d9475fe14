"""Why a turn did not reproduce: its first divergence, classified (specs/import.md §8, IMP-19).

Each cause has an id, used in the summary table and in the trace's provenance, and one sentence
that explains it; specs/import.md lists them. The list is meant to be complete: a divergence of
a real transcript that none of them names is ``unexplained``, which is a defect of the importer
or the machine to be fixed (tests assert that no shipped transcript has one), not a verdict.

A divergence is classified from what each side is (``Divergence.want_kind`` / ``got_kind``:
``assistant``, ``result``, ``API error``, ``system stop_hook_summary``, ...), the compared fields
that differ (``Divergence.fields``), the texts of the two messages and, where the driver had to
stop, why it stopped.
"""

from __future__ import annotations

import attrs

from steploop.effects.importer.compare import Divergence
from steploop.effects.importer.convert import INTERRUPT_TEXTS
from steploop.effects.importer.driver import SIBLING_CANCEL_PREFIX, STOPPED_PREFIX, TurnDriver
from steploop.effects.importer.segment import Item

__all__ = ["CAUSES", "explain"]

CAUSES: dict[str, str] = {
    # the driver had to stop: the transcript cannot answer what the machine waits for
    "auto-compact-timing": (
        "the machine's context count and Claude Code's fall on different sides of the "
        "auto-compact threshold, so one compacts a round before the other"
    ),
    "tool-schedule": (
        "the machine had not started a tool when the transcript shows its result: the inferred "
        "concurrency traits (IMP-12) do not match how Claude Code ran it"
    ),
    "unknown-call": (
        "the transcript has a result for a tool call the machine never received (the record of "
        "the call is missing or in another branch)"
    ),
    "rejected-event": "step() rejects the event the transcript implies here",
    "cut-off": "the transcript ends inside the turn (the session was closed or killed)",
    "turn-ended-early": (
        "the machine ended the turn where Claude Code went on (a response, a result or stop "
        "hooks follow in the transcript)"
    ),
    "turn-goes-on": (
        "the machine goes on where the transcript's turn ends: it waits for a model answer, a "
        "tool result or stop hooks that the transcript, which continues with a later turn, "
        "never wrote"
    ),
    "response-while-tools-run": (
        "the transcript has a model response while the machine still waits for tool results it "
        "never wrote (a result lost, or written on another branch)"
    ),
    "stop-hook-timing": (
        "the transcript shows stop hooks where the machine does not run them (VER-1: stop "
        "hooks after an API error)"
    ),
    # both wrote something, and it differs
    "interrupt-result-text": (
        "a call the user's interrupt stopped: the machine writes its profile's text (Claude "
        "Code's rejection text with the streaming executor, 'Interrupted by user' without it); "
        "the transcript holds another (the tool's own answer to the interrupt, or another "
        "version's wording)"
    ),
    "interrupt-marker": (
        "the interruption message differs: '[Request interrupted by user]' on one side, "
        "'[Request interrupted by user for tool use]' or none on the other (I-2, I-3)"
    ),
    "rejection-text": "the machine's text for a rejected tool call is not Claude Code's",
    "api-error-text": (
        "the machine names or words an API error differently from Claude Code (its `error` "
        "field, R-CATEGORY-1 and VER-6, or its text)"
    ),
    "sibling-cancel": (
        "the machine cancelled a sibling of a failing call (or did not) where Claude Code did not "
        "(or did)"
    ),
    "stop-hook-order": (
        "the stop-hook summary and the hooks' feedback are in another order than the machine's "
        "under Q-13 (Claude Code 2.1.88 writes the feedback first)"
    ),
    "stop-hook-summary": (
        "Claude Code wrote a stop-hook summary where the machine did not, or the reverse (the "
        "version wrote none, VER-2, or ran hooks the machine skipped, VER-1)"
    ),
    "served-model": (
        "the response names another model than the machine's: a switch of the main loop's "
        "model that the transcript does not show (R-MODEL-1, R-MODEL-2)"
    ),
    "response-shape": (
        "the response's blocks are grouped into records otherwise than the machine writes them "
        "(a non-streaming answer is one record, VER-8 and Q-14)"
    ),
    "tool-result-text": (
        "a tool result the machine wrote itself (an unknown tool, a denial, a synthetic "
        "result) is worded otherwise than Claude Code's"
    ),
    "machine-notice": (
        "a system notice (a failed stop hook, a model fallback, a cap, a boundary) is written "
        "on one side only"
    ),
    "attachment": (
        "an attachment (a queued command, max turns, a hook's stop) differs or is written on "
        "one side only"
    ),
    "missing-message": (
        "the transcript holds a message of the turn that the machine, which reached an end, "
        "did not write"
    ),
    "extra-message": "the machine wrote a message after the last one the transcript holds",
    "message-order": (
        "the two sides wrote different kinds of message at this place (the machine's order of "
        "results, feedback and notices is not Claude Code's here)"
    ),
    "malformed-conversation": (
        "the transcript's conversation is one the Messages API refuses (a tool_use id used "
        "twice, a tool_result naming no tool_use, an empty prompt or text block): the machine "
        "ends such a response as malformed, or refuses such a session (M-HIST-1, B-MODEL-2), "
        "where Claude Code repaired it before sending"
    ),
    "unexplained": (
        "not classified: a defect of the importer or the machine (read the divergence and "
        "report it)"
    ),
}


def explain(div: Divergence, driver: TurnDriver, items: list[Item]) -> Divergence:
    """Give ``div`` its cause id and explanation."""
    cause = _cause(div, driver)
    return attrs.evolve(div, cause=cause, why=CAUSES[cause])


def _stuck_cause(why: str, driver: TurnDriver) -> str:
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
    if "turn ends here" in why:
        return "cut-off" if driver.last_turn else "turn-goes-on"
    if "shows stop hooks here" in why:
        return "stop-hook-timing"
    if "is done" in why:
        return "turn-ended-early"
    if "does not call the model" in why:
        if "running_tools" in why or "draining" in why:
            return "response-while-tools-run"
        if "stop_hooks" in why:
            return "stop-hook-timing"
    return "unexplained"


_INTERRUPTED_RESULT = "Interrupted by user"


def _mentions_interrupted_result(text: str) -> bool:
    return STOPPED_PREFIX in text or f": {_INTERRUPTED_RESULT}" in text


def _cause(div: Divergence, driver: TurnDriver) -> str:
    exp, got = div.expected, div.got
    if driver.stuck is not None and div.step is None and got == driver.stuck:
        return _stuck_cause(driver.stuck, driver)
    if "the model sent a malformed response" in got:
        return "malformed-conversation"
    want, have = div.want_kind, div.got_kind
    if "rejected this tool use" in got:
        return "rejection-text"
    if want == "API error" or have == "API error":
        return "api-error-text"
    if SIBLING_CANCEL_PREFIX[18:40] in exp or SIBLING_CANCEL_PREFIX[18:40] in got:
        return "sibling-cancel"
    if want == "result" and have == "result":
        if _mentions_interrupted_result(exp) or _mentions_interrupted_result(got):
            return "interrupt-result-text"
        return "tool-result-text"
    if any(t in exp for t in INTERRUPT_TEXTS) or any(t in got for t in INTERRUPT_TEXTS):
        return "interrupt-marker"
    stop_summary = "system stop_hook_summary"
    if {want, have} >= {stop_summary} and ("Stop hook feedback" in exp + got):
        return "stop-hook-order"
    if stop_summary in (want, have):
        return "stop-hook-summary"
    if want == have == "assistant":
        if div.fields and all(f == "model" for f in div.fields):
            return "served-model"
        if any(f == "blocks" for f in div.fields):
            return "response-shape"
    if want.startswith("attachment") or have.startswith("attachment"):
        return "attachment"
    if want.startswith("system") or have.startswith("system"):
        return "machine-notice"
    if have == "nothing":
        return "missing-message"
    if want == "nothing":
        return "extra-message"
    if want and have and want != have:
        return "message-order"
    return "unexplained"
