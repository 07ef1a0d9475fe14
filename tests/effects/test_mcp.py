"""MCP tools (steploop/effects/mcp/, specs/ E-MCP-*): configuration as Claude Code reads it,
names and traits, results as tool results, and scripted sessions against real servers started
here: one written with the SDK's MCPServer (FastMCP) over stdio and over streamable HTTP, a raw
one that dies, hangs, sends junk and floods, and the reference filesystem server from npm."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.mcp import (
    McpConfigError,
    McpServerConfig,
    McpServers,
    load_mcp_config,
    mcp_servers_from,
    mcp_tool_name,
    parse_mcp_servers,
    tool_output,
)
from steploop.effects.scripted import ScriptedModel, reply, response, tool_call, tool_use
from steploop.effects.tools import ToolRegistry
from steploop.effects.trace import TraceRecorder, make_provenance, replay_exact
from steploop.reducer import default
from steploop.reducer.messages import ToolResultBlock, UserMessage

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

HERE = Path(__file__).parent / "mcp_servers"
# the default machine with the tool-list refresh of the 2.1.88 profile [R-REFRESH-1]
REFRESHING = default().with_overrides({"gates.tool_refresh": True})
FAST = str(HERE / "fast_server.py")
RAW = str(HERE / "raw_server.py")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def results(state: Any) -> dict[str, tuple[str, bool]]:
    """tool_use_id -> (content, is_error) of every tool result of the conversation."""
    out: dict[str, tuple[str, bool]] = {}
    for m in state.conversation.messages():
        if isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    out[b.tool_use_id] = (b.content, b.is_error)
    return out


async def session(
    tmp_path: Path,
    script: list[Any],
    servers: Any,
    *,
    trace: str = "t.jsonl",
    tool_timeout_s: float = 30.0,
    permissions: PermissionPolicy | None = None,
) -> tuple[Any, Path]:
    """Run a scripted turn with these MCP servers, recording a trace; (result, trace path)."""
    tools = ToolRegistry([])
    model = ScriptedModel(script, traits_for=tools.traits)
    path = tmp_path / trace
    with TraceRecorder(path, provenance=make_provenance(model=model)) as rec:
        r = rec.attach(
            run(
                "use the servers",
                model=model,
                tools=tools,
                workspace=tmp_path,
                observer=rec,
                permissions=permissions or PermissionPolicy(default="allow"),
                mcp_servers=servers,
                tool_timeout_s=tool_timeout_s,
                config=REFRESHING,
            )
        )
        async with r:
            async for _ in r:
                pass
    assert r.result is not None
    if isinstance(servers, dict):  # connected for the turn: closed, their tools gone with them
        assert not any(n.startswith("mcp__") for n in tools.names)
    return r.result, path


# ---------------------------------------------------------------------------------------------
# Configuration (no server)


@pytest.mark.spec("E-MCP-1")
def test_config_reads_claude_code_shapes_and_expands_variables(tmp_path: Path) -> None:
    """`.mcp.json` servers (stdio by command, http by type) get ${VAR} and ${VAR:-default} expanded."""
    (tmp_path / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "${TOOL_BIN}/srv", "args": ["--root", "${ROOT:-.}"], "env": {"K": "${K}"}},
                    "web": {"type": "http", "url": "https://h/${P:-mcp}", "headers": {"A": "Bearer ${TOKEN}"}, "timeout": 1500},
                }
            }
        )
    )
    found, notes = mcp_servers_from(workspace=tmp_path, environ={"TOOL_BIN": "/opt", "TOKEN": "t0k"})
    files, web = found["files"], found["web"]
    assert (files.transport, files.command, files.args) == ("stdio", "/opt/srv", ("--root", "."))
    assert files.env == (("K", "${K}"),) and files.missing == ("K",)
    assert (web.transport, web.url, web.headers, web.timeout_s) == ("http", "https://h/mcp", (("A", "Bearer t0k"),), 1.5)
    assert any(".mcp.json" in n for n in notes) and any("K is not set" in n for n in notes)


@pytest.mark.spec("E-MCP-1")
def test_config_precedence_and_strict(tmp_path: Path) -> None:
    """Settings, then .mcp.json, then --mcp-config files: a later server of a name wins; strict reads only the files."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"hooks": {}, "mcpServers": {"a": {"command": "from-settings"}}}))
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"a": {"command": "from-project"}, "b": {"command": "b"}}}))
    cli = tmp_path / "cli.json"
    cli.write_text(json.dumps({"mcpServers": {"b": {"command": "from-cli"}}}))
    found, _ = mcp_servers_from(workspace=tmp_path, settings_files=[settings], config_files=[cli])
    assert {k: v.command for k, v in found.items()} == {"a": "from-project", "b": "from-cli"}
    strict, _ = mcp_servers_from(workspace=tmp_path, settings_files=[settings], config_files=[cli], strict=True)
    assert list(strict) == ["b"]
    assert load_mcp_config(settings)["a"].command == "from-settings"
    assert load_mcp_config(tmp_path / "settings.json") != {}
    bare = tmp_path / "settings2.json"
    bare.write_text(json.dumps({"hooks": {}}))
    assert load_mcp_config(bare) == {}


@pytest.mark.spec("E-MCP-1")
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object, got a list"),
        ({"mcpServers": {"x": {"args": []}}}, "mcpServers.x.type: expected \"stdio\""),
        ({"mcpServers": {"x": {"command": ""}}}, "mcpServers.x.command: expected a non-empty string"),
        ({"mcpServers": {"x": {"command": "c", "args": "a b"}}}, "mcpServers.x.args: expected a list of strings"),
        ({"mcpServers": {"x": {"type": "http", "url": "ftp://h"}}}, "mcpServers.x.url: expected an http:// or https:// URL"),
        ({"mcpServers": {"x": {"type": "sse", "url": "http://h"}}}, "SSE servers are not supported"),
        ({"mcpServers": {"x": {"command": "c", "timeout": "5"}}}, "timeout: expected a positive number of milliseconds"),
        ({"mcpServers": {"x": {"command": "c", "url": "http://h"}}}, "unknown key 'url' for a stdio server"),
        ({"mcpServers": {"a b": {"command": "c"}}}, "a server name is 1 to 64 letters"),
        ({"mcpServers": {"x": {"command": "c", "env": {"A": 1}}}}, "mcpServers.x.env.A: expected a string, got int"),
    ],
)
def test_bad_configs_are_one_line_errors(data: object, message: str) -> None:
    """Every malformed server is an McpConfigError naming the file and the place."""
    with pytest.raises(McpConfigError) as info:
        parse_mcp_servers(data, "cfg.json", {})
    text = str(info.value)
    assert text.startswith("cfg.json") and message in text and "\n" not in text


@pytest.mark.spec("E-MCP-1")
def test_unreadable_config_files(tmp_path: Path) -> None:
    """A missing, non-UTF-8 or non-JSON file is one line naming it."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    for path, says in [(tmp_path / "none.json", "no such file"), (bad, "not UTF-8"), (tmp_path, "is a directory")]:
        with pytest.raises(McpConfigError, match=says):
            load_mcp_config(path)
    bad.write_text("{nope")
    with pytest.raises(McpConfigError, match="not valid JSON"):
        load_mcp_config(bad)


# ---------------------------------------------------------------------------------------------
# Names, traits, results (no server)


class _Remote:
    def __init__(self, name: str, read_only: bool | None) -> None:
        from mcp.types import ToolAnnotations

        self.name = name
        self.description = "d" * 3000
        self.input_schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        self.annotations = None if read_only is None else ToolAnnotations(read_only_hint=read_only)


@pytest.mark.spec("E-MCP-2")
def test_names_and_traits_follow_claude_code() -> None:
    """mcp__<server>__<tool> with [^A-Za-z0-9_-] replaced; safe only with readOnlyHint true."""
    from steploop.effects.mcp.servers import McpTool, _Connection

    assert mcp_tool_name("my.server", "get file") == "mcp__my_server__get_file"
    servers = McpServers({"s": McpServerConfig.stdio("s", "true")})
    conn = _Connection(McpServerConfig.stdio("s", "true", timeout_s=2.0), servers)
    tools = [McpTool(conn, _Remote(n, ro)) for n, ro in [("read", True), ("write", False), ("plain", None)]]
    reg = ToolRegistry(tools)
    traits = {t.remote_name: reg.traits(t.name, {"q": "x"}) for t in tools}
    assert [traits[n].concurrency_safe for n in ("read", "write", "plain")] == [True, False, False]
    assert traits["read"].max_result_chars == 100_000 and traits["read"].interrupt == "block"
    assert not reg.traits("mcp__s__read", {"q": 1}).concurrency_safe  # fails the schema
    assert len(tools[0].description) == 2048 and tools[0].timeout_s == 2.0
    assert reg.definitions()[0]["input_schema"] == _Remote("x", None).input_schema


@pytest.mark.spec("E-MCP-3")
def test_results_become_text_tool_results() -> None:
    """Text, image, audio, resource link, embedded resources, structured-only, isError, empty, oversized."""
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    blocks: list[TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource] = [
        TextContent(type="text", text="hello"),
        ImageContent(type="image", data="AAAA", mime_type="image/png"),
        AudioContent(type="audio", data="???", mime_type="audio/wav"),
        ResourceLink(type="resource_link", name="spec", uri="file:///s.md", description="the spec"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a", text="inline")),
        EmbeddedResource(type="resource", resource=BlobResourceContents(uri="file:///b", blob="AAAA", mime_type="x/y")),
    ]
    out = tool_output("t", CallToolResult(content=blocks))
    assert out.content.split("\n\n") == [
        "hello",
        "[Image: image/png, 3 bytes]",
        "[Audio: audio/wav, 3 characters of data that is not base64]",
        "[Resource link: spec] file:///s.md (the spec)",
        "inline",
        "[Resource: file:///b, x/y, 3 bytes]",
    ]
    assert not out.is_error
    structured = tool_output("t", CallToolResult(content=[], structured_content={"b": 1, "a": [2]}))
    assert structured.content == '{"a":[2],"b":1}'
    assert tool_output("t", CallToolResult(content=[], is_error=True)) .content == "(no content)"
    assert tool_output("t", CallToolResult(content=[TextContent(type="text", text="x")], is_error=True)).is_error
    big = tool_output("t", CallToolResult(content=[TextContent(type="text", text="y" * 500)]), max_chars=100)
    assert big.content.startswith("y" * 100 + "\n\n[The output of t was cut: 500 characters")


@pytest.mark.spec("E-MCP-6")
def test_policy_rules_name_a_whole_server() -> None:
    """mcp__SERVER and mcp__SERVER__* allow (or deny) every tool of the server, as in Claude Code."""
    policy = PermissionPolicy(allow=frozenset({"mcp__fast"}), deny=frozenset({"mcp__fast__die", "mcp__raw__*"}))
    assert policy.decide("mcp__fast__add", {}) == "allow"
    assert policy.decide("mcp__fast__die", {}) == "deny"
    assert policy.decide("mcp__raw__ok", {}) == "deny"
    assert policy.decide("mcp__fastx__add", {}) == "ask"
    assert policy.decide("Read", {}) == "ask"


# ---------------------------------------------------------------------------------------------
# Real servers


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.spec("E-MCP-2", "E-MCP-3", "E-MCP-6")
@pytest.mark.anyio
async def test_stdio_server_session_records_and_replays(tmp_path: Path) -> None:
    """A scripted turn calls a FastMCP server's tools over stdio (two read-only calls at once), is recorded, and replays exactly."""
    script = [
        response(
            tool_use("mcp__fast__add", {"a": 2, "b": 3}, id="t1"),
            tool_use("mcp__fast__add", {"a": 4, "b": 5}, id="t2"),
            stop_reason="tool_use",
        ),
        response(
            tool_use("mcp__fast__picture", {}, id="t3"),
            tool_use("mcp__fast__weather", {"city": "Oslo"}, id="t4"),
            tool_use("mcp__fast__fail", {}, id="t5"),
            tool_use("mcp__fast__echo", {"text": "no"}, id="t6"),
            stop_reason="tool_use",
        ),
        reply("done"),
    ]
    servers = {"fast": {"command": sys.executable, "args": [FAST]}}
    policy = PermissionPolicy(allow=frozenset({"mcp__fast"}), deny=frozenset({"mcp__fast__echo"}), default="ask")
    res, path = await session(tmp_path, script, servers, permissions=policy)
    assert res.terminal.TAG == "completed"
    got = results(res.state)
    assert got["t1"] == ("5", False) and got["t2"] == ("9", False)
    assert got["t3"] == ("[Image: image/png, 8 bytes]\n\na pixel", False)
    assert got["t4"] == ('{"celsius":21,"city":"Oslo"}', False)
    assert got["t5"] == ("the disk is full", True)
    assert got["t6"][1] and "mcp__fast__echo" in got["t6"][0]  # denied by the rule
    report = replay_exact(path)
    assert report.ok and report.complete, report.describe()
    # the two read-only calls ran together: both started before either finished
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    starts = [i for i, s in enumerate(steps) for e in s.get("effects", []) if e.get("type") == "start_tool"]
    finished = [i for i, s in enumerate(steps) if (s.get("event") or {}).get("type") == "tool_finished"]
    assert starts[1] < finished[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, FAST, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the HTTP MCP server did not start")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.spec("E-MCP-2", "E-MCP-5")
@pytest.mark.anyio
async def test_http_server_session_refreshes_tools_records_and_replays(tmp_path: Path, http_server: str) -> None:
    """Over streamable HTTP: a call adds a tool (list_changed); the next round may call it; the trace replays exactly."""
    script = [
        tool_call("mcp__fast__grow", {}, id="t1"),
        tool_call("mcp__fast__added", {}, id="t2"),
        reply("done"),
    ]
    res, path = await session(tmp_path, script, {"fast": {"type": "http", "url": http_server}})
    got = results(res.state)
    assert got == {"t1": ("grown", False), "t2": ("added says hi", False)}
    report = replay_exact(path)
    assert report.ok and report.complete, report.describe()


@pytest.mark.spec("E-MCP-4")
@pytest.mark.anyio
async def test_faulty_servers_give_tool_errors_and_leave_no_process(tmp_path: Path) -> None:
    """Junk, a flood, a server killed mid-call and one that never answers end in tool errors within the timeout; no process survives."""
    pids = {name: tmp_path / f"{name}.pids" for name in ("raw", "dies", "hangs")}
    servers = {
        name: {"command": sys.executable, "args": [RAW], "env": {"RAW_SERVER_PIDS": str(pids[name])}}
        for name in pids
    }
    script = [
        response(
            tool_use("mcp__raw__ok", {}, id="t1"),
            tool_use("mcp__raw__junk", {}, id="t2"),
            tool_use("mcp__raw__noise", {}, id="t3"),
            tool_use("mcp__dies__die", {}, id="t4"),
            stop_reason="tool_use",
        ),
        response(tool_use("mcp__raw__flood", {}, id="t5"), tool_use("mcp__hangs__hang", {}, id="t6"), stop_reason="tool_use"),
        tool_call("mcp__raw__ok", {}, id="t7"),
        reply("done"),
    ]
    started = time.monotonic()
    cfgs = {k: parse_mcp_servers({k: v})[k] for k, v in servers.items()}
    async with McpServers(cfgs, workspace=tmp_path, max_message_bytes=1_000_000) as mcp:
        res, path = await session(tmp_path, script, mcp, tool_timeout_s=2.0)
        assert mcp.status()["raw"].startswith("ended: the server sent a message of more than 1,000,000 bytes")
    took = time.monotonic() - started
    got = results(res.state)
    assert got["t1"] == ("fine", False) and got["t3"] == ("after noise", False)
    assert got["t2"][1] and "ValidationError" in got["t2"][0]
    assert got["t4"][1] and "the server exited (exit code 7)" in got["t4"][0]
    assert got["t5"][1] and "more than 1,000,000 bytes" in got["t5"][0]
    assert got["t6"] == ("Tool mcp__hangs__hang timed out after 2 s", True)
    # the flooding server's connection ended: its tools left the list at the round's refresh
    assert got["t7"][1] and "No such tool available: mcp__raw__ok" in got["t7"][0]
    assert took < 40
    assert replay_exact(path).ok
    for name, file in pids.items():
        for pid in map(int, file.read_text().split()):
            assert not _alive(pid), f"{name}: process {pid} survived"


def _filesystem_server() -> Path | None:
    found = os.environ.get("STEPLOOP_MCP_FILESYSTEM")
    if found:
        return Path(found)
    local = Path(sys.prefix) / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
    return local if local.exists() else None


@pytest.mark.spec("E-MCP-2", "E-MCP-3")
@pytest.mark.anyio
async def test_reference_filesystem_server_from_npm(tmp_path: Path) -> None:
    """The reference @modelcontextprotocol/server-filesystem: its read-only tools are safe, a read returns the file."""
    server = _filesystem_server()
    if server is None:
        pytest.skip(
            "the npm package is not installed: npm install --prefix .venv/npm "
            "@modelcontextprotocol/server-filesystem (.ci/run does), or set STEPLOOP_MCP_FILESYSTEM"
        )
    root = tmp_path / "root"
    root.mkdir()
    (root / "note.txt").write_text("hello from a file\n")
    async with McpServers({"fs": {"command": str(server), "args": [str(root)]}}, workspace=tmp_path) as mcp:
        tools = {t.remote_name: t for t in mcp.tools()}
        assert mcp.status() == {"fs": "connected"}
        reg = ToolRegistry(mcp.tools())
        path = str(root / "note.txt")
        assert reg.traits("mcp__fs__read_text_file", {"path": path}).concurrency_safe
        assert not reg.traits("mcp__fs__write_file", {"path": path, "content": "x"}).concurrency_safe
        res, trace = await session(
            tmp_path,
            [tool_call("mcp__fs__read_text_file", {"path": path}, id="t1"), reply("read")],
            mcp,
        )
        assert results(res.state)["t1"] == ("hello from a file\n", False)
        assert "read_text_file" in tools
        assert replay_exact(trace).ok
        with anyio.fail_after(10):
            denied = await tools["read_text_file"].call({"path": "/etc/hostname"}, _ctx(tmp_path))
        assert denied.is_error


def _ctx(ws: Path) -> Any:
    from steploop.effects.tools import ToolContext

    return ToolContext(workspace=ws, tool_use_id="t")


# ---------------------------------------------------------------------------------------------
# The command line


@pytest.mark.spec("E-MCP-1", "E-MCP-6")
def test_cli_run_with_mcp_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`steploop run --mcp-config FILE --allow mcp__fast` calls the server's tool; a bad file is one line, status 2."""
    import io

    from steploop.effects.cli import main

    ws = tmp_path / "ws"
    ws.mkdir()
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"fast": {"command": sys.executable, "args": [FAST]}}}))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"type": "tool_call", "name": "mcp__fast__add", "input": {"a": 20, "b": 22}},
                {"type": "reply", "text": "the sum is in"},
            ]
        )
    )
    out = io.StringIO()
    argv = ["run", "add", "--workspace", str(ws), "--scripted", str(script), "--mcp-config", str(servers)]
    code = main([*argv, "--allow", "mcp__fast", "--trace", str(tmp_path / "t.jsonl")], out)
    text = out.getvalue()
    assert code == 0, text
    assert "mcp: servers fast from" in text and "42" in text
    assert replay_exact(tmp_path / "t.jsonl").ok
    servers.write_text(json.dumps({"mcpServers": {"fast": {"command": ""}}}))
    assert main([*argv, "--allow", "mcp__fast"], io.StringIO()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("steploop: error: ") and "mcpServers.fast.command" in err[-1]


@pytest.mark.spec("E-MCP-4")
@pytest.mark.anyio
async def test_a_run_that_fails_to_start_closes_its_servers(tmp_path: Path) -> None:
    """A run whose entry fails after its servers connected (text deltas from a model without
    them) closes the servers it connected: no process is left."""
    pids = tmp_path / "pids"
    servers = {"raw": {"command": sys.executable, "args": [RAW], "env": {"RAW_SERVER_PIDS": str(pids)}}}
    tools = ToolRegistry([])
    model = ScriptedModel([reply("x")], traits_for=tools.traits)
    r = run("x", model=model, tools=tools, workspace=tmp_path, mcp_servers=servers, text_deltas=True)
    with pytest.raises(TypeError, match="does not report text deltas"):
        async with r:
            pass  # pragma: no cover
    assert pids.read_text().split() and not any(_alive(int(p)) for p in pids.read_text().split())
    assert not tools.names
