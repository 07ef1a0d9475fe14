"""A launcher for the scripted Messages API server, so item 5 can run it in its own process.

``python -m benchmarks.sse_server --turns N --runs R`` serves R agent runs of N model calls each,
in order: N-1 answers with a short text and one tool call, then a final text. It prints
``PORT <number>`` on stdout once it listens and stops when its standard input closes.
"""

from __future__ import annotations

import argparse
import sys

from tests.support.messages_server import (
    MessagesServer,
    StreamScript,
    response_script,
    text_block,
    text_response,
    tool_use_block,
)

__all__ = ["main", "run_scripts"]

TOOL_INPUT = {"path": "src/app.py"}


def run_scripts(turns: int) -> list[StreamScript]:
    """The streams of one agent run: ``turns - 1`` tool calls, then the final answer."""
    scripts = [
        response_script(
            text_block("Let me look at that file.", chunks=3),
            tool_use_block(f"toolu_{k:04d}", "noop", TOOL_INPUT, chunks=3),
            stop_reason="tool_use",
            usage={"input_tokens": 100, "output_tokens": 20},
            message_id=f"msg_{k:04d}",
        )
        for k in range(1, turns)
    ]
    scripts.append(text_response("All done.", chunks=2, usage={"input_tokens": 100}))
    return scripts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, required=True)
    ap.add_argument("--runs", type=int, required=True)
    args = ap.parse_args()
    with MessagesServer() as server:
        one_run = run_scripts(args.turns)
        for _ in range(args.runs):
            server.enqueue(*one_run)
        print(f"PORT {server.port}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin
        served = len(server.requests)
    print(f"sse_server: served {served} requests", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
