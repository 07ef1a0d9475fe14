"""Stop hooks from Claude Code settings files (``settings.json``, a plugin's ``hooks/hooks.json``).

The format, as Claude Code reads it::

    {"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}],
        "SubagentStop": [{"matcher": "Explore", "hooks": [{"type": "command", "command": "..."}]}]
     },
     "disableAllHooks": false}

Each event holds matcher groups; each group a list of handlers. Only ``type: "command"``
handlers run here (``prompt`` and ``agent`` handlers need a model of their own; they are
reported as skipped). ``Stop`` has no matcher (one given is ignored, as Claude Code ignores it);
a ``SubagentStop`` matcher is a regular expression on the agent type. ``timeout`` is in seconds
(Claude Code's default for command hooks: 600). Identical handlers are run once. Other events
(``PreToolUse``, ...) are read, checked for shape, and not run: steploop has no such events.

A plugin's hooks (``--plugin DIR`` reads ``DIR/hooks/hooks.json``) run with
``CLAUDE_PLUGIN_ROOT`` set to the plugin's directory, as Claude Code runs them.

Every problem with a file is a :class:`SettingsError`: one line naming the file and the place
in it (``.claude/settings.json: hooks.Stop[0].hooks[1].command: expected a string``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from steploop.effects.hooks import CommandStopHook, StopEventName
from steploop.reducer.errors import SteploopError

__all__ = [
    "COMMAND_HOOK_TIMEOUT_S",
    "HookSettings",
    "SettingsError",
    "SettingsHook",
    "load_settings",
    "project_settings_files",
]

#: Claude Code's default timeout for a command hook, in seconds.
COMMAND_HOOK_TIMEOUT_S = 600.0

_STOP_EVENTS: tuple[StopEventName, ...] = ("Stop", "SubagentStop")
_HANDLER_TYPES = ("command", "prompt", "agent")


class SettingsError(SteploopError):
    """A settings file that cannot be used: one line naming the file and the place in it."""


@attrs.frozen(kw_only=True)
class SettingsHook:
    """One command handler from a settings file."""

    event: StopEventName
    command: str
    timeout_s: float = COMMAND_HOOK_TIMEOUT_S
    matcher: str | None = None
    source: str = ""
    plugin_root: str | None = None

    def matches(self, agent_type: str | None) -> bool:
        """Whether the handler fires for this agent type (``Stop`` fires always)."""
        if self.event == "Stop" or self.matcher in (None, "", "*"):
            return True
        return re.fullmatch(self.matcher, agent_type or "") is not None

    def to_hook(self, *, project_dir: str | None = None) -> CommandStopHook:
        env: dict[str, str] = {}
        if project_dir is not None:
            env["CLAUDE_PROJECT_DIR"] = project_dir
        if self.plugin_root is not None:
            env["CLAUDE_PLUGIN_ROOT"] = self.plugin_root
        return CommandStopHook(self.command, timeout_s=self.timeout_s, env=env or None)


@attrs.frozen(kw_only=True)
class HookSettings:
    """The stop hooks of one or more settings files, in file order, duplicates removed."""

    hooks: tuple[SettingsHook, ...] = ()
    files: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # one line per handler that is not run, saying why
    disabled: bool = False  # some file set "disableAllHooks": true

    def for_event(
        self, event: StopEventName = "Stop", agent_type: str | None = None
    ) -> tuple[SettingsHook, ...]:
        if self.disabled:
            return ()
        return tuple(h for h in self.hooks if h.event == event and h.matches(agent_type))

    def merged(self, other: HookSettings) -> HookSettings:
        seen = {_key(h) for h in self.hooks}
        extra = tuple(h for h in other.hooks if _key(h) not in seen)
        return HookSettings(
            hooks=self.hooks + extra,
            files=self.files + other.files,
            skipped=self.skipped + other.skipped,
            disabled=self.disabled or other.disabled,
        )


def _key(h: SettingsHook) -> tuple[str, str, str | None, str | None]:
    return (h.event, h.command, h.matcher, h.plugin_root)


def project_settings_files(workspace: str | os.PathLike[str]) -> list[Path]:
    """The workspace's ``.claude/settings.json`` and ``.claude/settings.local.json`` that exist."""
    base = Path(workspace) / ".claude"
    return [p for p in (base / "settings.json", base / "settings.local.json") if p.is_file()]


def load_settings(
    paths: Iterable[str | os.PathLike[str]], *, plugin_roots: Sequence[str | None] | None = None
) -> HookSettings:
    """Read the stop hooks of ``paths`` (in order). ``plugin_roots[i]``, when given, is the
    plugin directory of ``paths[i]`` (its hooks get ``CLAUDE_PLUGIN_ROOT``)."""
    out = HookSettings()
    for i, path in enumerate(paths):
        root = plugin_roots[i] if plugin_roots is not None and i < len(plugin_roots) else None
        out = out.merged(_load_one(Path(path), root))
    return out


def read_json_file(path: Path, error: type[Exception], what: str) -> Any:
    """The JSON value of a configuration file, or ``error`` with one line naming the file and
    what is wrong (a directory, missing, unreadable, not UTF-8, not JSON); ``what`` names the
    kind of file ("a settings file")."""
    where = str(path)
    if path.is_dir():
        raise error(f"{where}: is a directory, not {what}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except OSError as e:
        raise error(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}:{e.lineno}: not valid JSON: {e.msg}") from None
    except (RecursionError, ValueError) as e:
        raise error(f"{where}: not valid JSON: {type(e).__name__}") from None


def _read(path: Path) -> Any:
    return read_json_file(path, SettingsError, "a settings file")


def _load_one(path: Path, plugin_root: str | None) -> HookSettings:
    data = _read(path)
    where = str(path)
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected a JSON object, got {_kind(data)}")
    disabled = data.get("disableAllHooks", False)
    if not isinstance(disabled, bool):
        raise SettingsError(
            f"{where}: disableAllHooks: expected true or false, got {_kind(disabled)}"
        )
    events = data.get("hooks", {})
    if not isinstance(events, dict):
        raise SettingsError(f"{where}: hooks: expected an object of events, got {_kind(events)}")
    hooks: list[SettingsHook] = []
    skipped: list[str] = []
    for event, groups in events.items():
        at = f"hooks.{event}"
        if not isinstance(groups, list):
            raise SettingsError(
                f"{where}: {at}: expected a list of matcher groups, got {_kind(groups)}"
            )
        for gi, group in enumerate(groups):
            gat = f"{at}[{gi}]"
            if not isinstance(group, dict):
                raise SettingsError(f"{where}: {gat}: expected an object, got {_kind(group)}")
            matcher = group.get("matcher")
            if matcher is not None and not isinstance(matcher, str):
                raise SettingsError(
                    f"{where}: {gat}.matcher: expected a string, got {_kind(matcher)}"
                )
            if event == "SubagentStop" and matcher not in (None, "", "*"):
                try:
                    re.compile(str(matcher))
                except re.error as e:
                    raise SettingsError(
                        f"{where}: {gat}.matcher: not a regular expression: {e}"
                    ) from None
            handlers = group.get("hooks")
            if not isinstance(handlers, list):
                raise SettingsError(
                    f"{where}: {gat}.hooks: expected a list of handlers, got {_kind(handlers)}"
                )
            for hi, handler in enumerate(handlers):
                hook = _handler(where, f"{gat}.hooks[{hi}]", event, matcher, handler, plugin_root)
                if isinstance(hook, str):
                    skipped.append(hook)
                elif hook is not None:
                    hooks.append(hook)
    deduped: list[SettingsHook] = []
    seen: set[tuple[str, str, str | None, str | None]] = set()
    for h in hooks:
        if _key(h) not in seen:
            seen.add(_key(h))
            deduped.append(h)
    return HookSettings(
        hooks=tuple(deduped), files=(where,), skipped=tuple(skipped), disabled=disabled
    )


def _handler(
    where: str, at: str, event: str, matcher: str | None, handler: Any, plugin_root: str | None
) -> SettingsHook | str | None:
    if not isinstance(handler, dict):
        raise SettingsError(f"{where}: {at}: expected an object, got {_kind(handler)}")
    kind = handler.get("type")
    if kind not in _HANDLER_TYPES:
        raise SettingsError(
            f"{where}: {at}.type: expected one of {', '.join(map(repr, _HANDLER_TYPES))}, got {kind!r}"[
                :300
            ]
        )
    timeout = handler.get("timeout", COMMAND_HOOK_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise SettingsError(
            f"{where}: {at}.timeout: expected a positive number of seconds, got {timeout!r}"[:300]
        )
    if kind == "command":
        command = handler.get("command")
        if not isinstance(command, str) or not command.strip():
            raise SettingsError(
                f"{where}: {at}.command: expected a non-empty string, got {_kind(command)}"
            )
    if event not in _STOP_EVENTS:
        return None  # a valid handler for an event steploop does not have
    if kind != "command":
        return f"{where}: {at}: a {kind!r} hook needs a model of its own; steploop runs command hooks only (skipped)"
    if handler.get("async") is True:
        return f"{where}: {at}: an async hook cannot block a stop; skipped"
    assert event in _STOP_EVENTS
    ev: StopEventName = "Stop" if event == "Stop" else "SubagentStop"
    return SettingsHook(
        event=ev,
        command=str(handler["command"]),
        timeout_s=float(timeout),
        matcher=None if ev == "Stop" else matcher,
        source=f"{where}: {at}",
        plugin_root=plugin_root,
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
