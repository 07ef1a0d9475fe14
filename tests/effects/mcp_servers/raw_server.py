"""A raw JSON-RPC MCP server over stdio that misbehaves on purpose (no SDK: it starts fast).

It answers ``initialize`` and ``tools/list``; its tools: ``ok`` (a text result), ``junk`` (a
result that is not a tool result), ``noise`` (a line that is not JSON-RPC, then a result),
``flood`` (one line of 20 MB), ``die`` (the process exits mid-call), ``hang`` (never answers).
At start it runs ``sleep 300`` in a session of its own (``setsid``) and writes its own pid and
the sleeper's, one per line, to the file named by ``$RAW_SERVER_PIDS``: what must not survive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

TOOLS = ["ok", "junk", "noise", "flood", "die", "hang"]


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    pids = os.environ.get("RAW_SERVER_PIDS")
    if pids:
        sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(pids, "w") as fh:
            fh.write(f"{os.getpid()}\n{sleeper.pid}\n")
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue  # a notification
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"}}})
        elif method == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "ok":
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "fine"}]}})
            elif name == "junk":
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": "not a list of blocks"}})
            elif name == "noise":
                sys.stdout.write("debug: this is not JSON-RPC\n")
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "after noise"}]}})
            elif name == "flood":
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "x" * 20_000_000}]}})
            elif name == "die":
                os._exit(7)
            # hang: no answer
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
