"""What a transcript does not hold, inferred by written rules (specs/import.md §5, IMP-11..).

Each function here implements one numbered rule of specs/import.md; the rule ids are in the
docstrings and in the ``inferred`` provenance key of every imported trace.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import attrs

from steploop.effects.tools.bash_readonly import is_read_only_command
from steploop.reducer import LoopConfig, claude_code, claude_code_2_1_88, profile, version_basis
from steploop.reducer.events import ToolTraits
from steploop.reducer.versions import LATEST, parse_version

__all__ = [
    "SAFE_TOOLS",
    "bash_is_read_only",
    "config_for",
    "max_output_tokens_for",
    "profile_basis",
    "stop_reason_for",
    "traits_for",
    "turn_version",
]

#: Tools Claude Code declares concurrency-safe whatever their input (IMP-12).
SAFE_TOOLS = frozenset(
    {
        "Read",
        "Grep",
        "Glob",
        "LS",
        "WebFetch",
        "WebSearch",
        "LSP",
        "Task",
        "Agent",
        "AskUserQuestion",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "BashOutput",
        "NotebookRead",
        "TodoRead",
        "ToolSearch",
        "ListMcpResourcesTool",
        "ReadMcpResourceTool",
    }
)


# The importer asks these once per call or per turn, and a session repeats its commands and
# its version; both answers are pure functions of their arguments (LoopConfig is frozen), so
# they are kept: 12% of an import of the shipped transcripts went to building the same
# profile again and parsing the same command again.
@functools.lru_cache(maxsize=4096)
def bash_is_read_only(command: str) -> bool:
    """IMP-12: Claude Code's read-only rule for Bash commands (specs/rules.md E-BASH-RO-1,
    :func:`steploop.effects.tools.bash_readonly.is_read_only_command`): every part of a list
    or pipeline runs a read-only program, nothing is redirected into a file (``2>/dev/null``
    and ``2>&1`` are harmless), nothing is substituted or expanded."""
    return is_read_only_command(command)


def traits_for(
    name: str, tool_input: dict[str, Any], *, known: bool = True, cancels_siblings: bool = False
) -> ToolTraits:
    """IMP-12: a tool call's traits from its name (and, for Bash, its command).

    Results are never budgeted again (``max_result_chars=None``): the transcript holds what
    Claude Code kept after its own tool-result budget. A Bash call cancels its siblings on an
    error only where the transcript shows that it did (``cancels_siblings``: a result of its
    response reads "Cancelled: parallel tool call"); older versions did not.
    """
    if not known:
        return ToolTraits(known=False, max_result_chars=None)
    if name == "Bash":
        cmd = tool_input.get("command")
        safe = isinstance(cmd, str) and bash_is_read_only(cmd)
        return ToolTraits(
            concurrency_safe=safe, cancels_siblings_on_error=cancels_siblings, max_result_chars=None
        )
    interrupt: Literal["cancel", "block"] = "cancel" if name == "Sleep" else "block"
    return ToolTraits(
        concurrency_safe=name in SAFE_TOOLS, interrupt=interrupt, max_result_chars=None
    )


def max_output_tokens_for(model: str) -> int:
    """IMP-13: the model's default output cap (the reference's per-model table)."""
    m = model.lower()
    if "opus-4-6" in m or "opus-4.6" in m:
        return 64_000
    return 32_000


def turn_version(versions: list[str]) -> str | None:
    """VER-0: the Claude Code version a turn ran under: the newest of its records' versions (a
    session updated mid-turn wrote its later records under the newer one); None when no record
    names a readable version."""
    best: tuple[tuple[int, int, int], str] | None = None
    for v in versions:
        parsed = parse_version(v)
        if parsed is not None and (best is None or parsed > best[0]):
            best = (parsed, v)
    return None if best is None else best[1]


def profile_basis(version: str | None, profile_name: str | None = None) -> str:
    """VER-0: how the turn's profile was chosen, for the report and the trace's provenance."""
    if profile_name is not None:
        return f"--profile {profile_name} (the records' version {version or 'unknown'} not used)"
    if version is None:
        return f"no record names a version -> the {LATEST} profile"
    return version_basis(version)


@functools.lru_cache(maxsize=256)
def config_for(
    model: str | None,
    *,
    query_source: str = "repl_main_thread",
    agent_id: str | None = None,
    largest_context: int = 0,
    version: str | None = None,
    profile_name: str | None = None,
) -> LoopConfig:
    """IMP-13, VER-0: the turn's configuration: the profile of the Claude Code ``version`` its
    records name (:func:`steploop.reducer.claude_code`; the 2.1.88 profile when none does), or
    the named profile when ``profile_name`` is given (``--profile``), on the model its first
    response names; a 1,000,000-token window when the model says ``[1m]`` or a response's
    context exceeded 200,000 tokens, else 200,000."""
    name = model or "claude-sonnet-4-5"
    window = 1_000_000 if "[1m]" in name or largest_context > 200_000 else 200_000
    if profile_name is not None:
        base = profile(profile_name)
    elif version is not None and parse_version(version) is not None:
        base = claude_code(version)
    else:
        base = claude_code_2_1_88()
    return attrs.evolve(
        base,
        model=name,
        context_window=window,
        max_output_tokens=max_output_tokens_for(name),
        query_source=query_source,
        agent_id=agent_id,
    )


def stop_reason_for(recorded: str | None, has_tool_use: bool, followed_by_mot_error: bool) -> str:
    """IMP-14: the recorded stop reason when the last record of the response has one; else
    ``max_tokens`` when an output-limit API error follows, ``tool_use`` when the response holds
    a tool call, ``end_turn`` otherwise."""
    if recorded:
        return recorded
    if followed_by_mot_error:
        return "max_tokens"
    return "tool_use" if has_tool_use else "end_turn"
