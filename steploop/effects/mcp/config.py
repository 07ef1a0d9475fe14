"""MCP server configuration as Claude Code users write it (specs/ E-MCP-1).

The shapes Claude Code reads, from a project's ``.mcp.json``, from ``mcpServers`` in a settings
file, from a ``--mcp-config FILE``::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                  "env": {"DEBUG": "${DEBUG:-0}"}},
        "search": {"type": "http", "url": "https://example.com/mcp",
                   "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}}
    }}

A server is ``stdio`` (``type`` omitted or ``"stdio"``: ``command``, ``args``, ``env``, ``cwd``)
or streamable HTTP (``"http"``, also spelled ``"streamable-http"``: ``url``, ``headers``).
``${VAR}`` and ``${VAR:-default}`` are expanded in ``command``, ``args``, ``env``, ``url`` and
``headers``, as Claude Code does; a variable that is unset and has no default stays as written
and is reported in :attr:`McpServerConfig.missing`. Every problem with a file is an
:class:`McpConfigError`: one line naming the file and the place in it.

Nothing here imports the ``mcp`` SDK: configurations are read without the ``[mcp]`` extra.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from steploop.effects.settings import read_json_file
from steploop.reducer.errors import SteploopError

__all__ = [
    "McpConfigError",
    "McpServerConfig",
    "load_mcp_config",
    "mcp_servers_from",
    "parse_mcp_servers",
]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KEYS = {
    "stdio": {"type", "command", "args", "env", "cwd", "timeout"},
    "http": {"type", "url", "headers", "timeout"},
}


class McpConfigError(SteploopError):
    """An MCP configuration that cannot be used: one line naming the file and the place."""


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One MCP server: how to reach it, with its variables expanded.

    ``timeout_s`` is the deadline of one tool call of this server (None: the run's
    ``tool_timeout_s``); ``source`` says where the configuration was read.
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float | None = None
    source: str = ""
    missing: tuple[str, ...] = ()  # variables named but unset, with no default

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        args: Iterable[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
    ) -> McpServerConfig:
        """A server run as a process, spoken to over its stdin and stdout."""
        return cls(
            name=_check_name(name, name),
            transport="stdio",
            command=command,
            args=tuple(args),
            env=tuple((env or {}).items()),
            cwd=cwd,
            timeout_s=timeout_s,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> McpServerConfig:
        """A server reached over streamable HTTP at ``url``."""
        return cls(
            name=_check_name(name, name),
            transport="http",
            url=url,
            headers=tuple((headers or {}).items()),
            timeout_s=timeout_s,
        )


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise McpConfigError(
            f"{where}: a server name is 1 to 64 letters, digits, '_', '-' or '.', got {name!r:.80}"
        )
    return name


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


class _Expander:
    """``${VAR}`` and ``${VAR:-default}`` from ``environ``; names left unset are collected."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.missing: list[str] = []

    def __call__(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            value = self._environ.get(m.group(1))
            if value is not None:
                return value
            if m.group(2) is not None:
                return m.group(2)
            if m.group(1) not in self.missing:
                self.missing.append(m.group(1))
            return m.group(0)

        return _VAR.sub(one, text)


def _strings(value: object, where: str, expand: _Expander) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{where}: expected a list of strings, got {_kind(value)}")
    return tuple(expand(v) for v in value)


def _pairs(value: object, where: str, expand: _Expander) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise McpConfigError(f"{where}: expected an object of strings, got {_kind(value)}")
    out: list[tuple[str, str]] = []
    for key, item in value.items():
        if not isinstance(item, str):
            raise McpConfigError(f"{where}.{key}: expected a string, got {_kind(item)}")
        out.append((key, expand(item)))
    return tuple(out)


def _one(name: str, raw: object, where: str, environ: Mapping[str, str]) -> McpServerConfig:
    at = f"{where}: mcpServers.{name}"
    _check_name(name, at)
    if not isinstance(raw, dict):
        raise McpConfigError(f"{at}: expected an object, got {_kind(raw)}")
    kind = raw.get("type", "stdio" if "command" in raw else None)
    transport: Literal["stdio", "http"]
    if kind == "stdio":
        transport = "stdio"
    elif kind in ("http", "streamable-http"):
        transport = "http"
    elif kind == "sse":
        raise McpConfigError(
            f"{at}.type: SSE servers are not supported (the transport is deprecated); "
            'use a streamable HTTP server (type "http")'
        )
    else:
        raise McpConfigError(
            f'{at}.type: expected "stdio" (with a command) or "http" (with a url), got {kind!r:.40}'
        )
    extra = sorted(set(raw) - _KEYS[transport])
    if extra:
        raise McpConfigError(f"{at}: unknown key {extra[0]!r} for a {transport} server")
    timeout = raw.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
    ):
        raise McpConfigError(
            f"{at}.timeout: expected a positive number of milliseconds, got {timeout!r:.40}"
        )
    timeout_s = None if timeout is None else float(timeout) / 1000
    expand = _Expander(environ)
    if transport == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{at}.command: expected a non-empty string, got {_kind(command)}")
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise McpConfigError(f"{at}.cwd: expected a string, got {_kind(cwd)}")
        cfg = McpServerConfig(
            name=name,
            transport="stdio",
            command=expand(command),
            args=_strings(raw.get("args", []), f"{at}.args", expand),
            env=_pairs(raw.get("env", {}), f"{at}.env", expand),
            cwd=cwd,
            timeout_s=timeout_s,
            source=where,
        )
    else:
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{at}.url: expected an http:// or https:// URL, got {_kind(url)}")
        cfg = McpServerConfig(
            name=name,
            transport="http",
            url=expand(url),
            headers=_pairs(raw.get("headers", {}), f"{at}.headers", expand),
            timeout_s=timeout_s,
            source=where,
        )
    return attrs.evolve(cfg, missing=tuple(expand.missing))


def parse_mcp_servers(
    data: object, where: str = "mcp config", environ: Mapping[str, str] | None = None
) -> dict[str, McpServerConfig]:
    """The servers of one configuration: ``{"mcpServers": {...}}`` (``.mcp.json``, a settings
    file, ``--mcp-config``) or the bare mapping of names to servers (a plugin's
    ``.mcp.json``). ``environ`` expands the variables (default: this process's)."""
    env = os.environ if environ is None else environ
    if not isinstance(data, dict):
        raise McpConfigError(f"{where}: expected a JSON object, got {_kind(data)}")
    servers = data["mcpServers"] if "mcpServers" in data else data
    if not isinstance(servers, dict):
        raise McpConfigError(f"{where}: mcpServers: expected an object, got {_kind(servers)}")
    return {name: _one(name, raw, where, env) for name, raw in servers.items()}


def _read(path: Path) -> Any:
    return read_json_file(path, McpConfigError, "an MCP configuration")


def load_mcp_config(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> dict[str, McpServerConfig]:
    """The servers of one file (``.mcp.json``, a settings file, a ``--mcp-config`` file). A
    settings file without ``mcpServers`` has none."""
    p = Path(path)
    data = _read(p)
    if isinstance(data, dict) and "mcpServers" not in data and _looks_like_settings(data):
        return {}
    return parse_mcp_servers(data, str(p), environ)


def _looks_like_settings(data: dict[str, Any]) -> bool:
    """A settings file (hooks, permissions, ...) rather than a bare mapping of servers."""
    return any(k in data for k in ("hooks", "permissions", "env", "disableAllHooks", "model"))


def mcp_servers_from(
    *,
    workspace: str | os.PathLike[str] | None = None,
    settings_files: Iterable[str | os.PathLike[str]] = (),
    config_files: Iterable[str | os.PathLike[str]] = (),
    strict: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, McpServerConfig], list[str]]:
    """The servers a session gets, and one line per source read (to show the user).

    In order, a later definition of a name replacing an earlier one: ``mcpServers`` of each
    settings file, the workspace's ``.mcp.json``, then each of ``config_files``
    (``--mcp-config``). ``strict`` reads ``config_files`` only (Claude Code's
    ``--strict-mcp-config``)."""
    servers: dict[str, McpServerConfig] = {}
    notes: list[str] = []
    sources: list[Path] = []
    if not strict:
        sources.extend(Path(p) for p in settings_files)
        if workspace is not None and (Path(workspace) / ".mcp.json").is_file():
            sources.append(Path(workspace) / ".mcp.json")
    sources.extend(Path(p) for p in config_files)
    for src in sources:
        found = load_mcp_config(src, environ)
        if found:
            notes.append(f"mcp: servers {', '.join(found)} from {src}")
        for cfg in found.values():
            if cfg.missing:
                notes.append(
                    f"mcp: {cfg.name}: variable {', '.join(cfg.missing)} is not set and has no "
                    "default; left as written"
                )
        servers.update(found)
    return servers, notes
