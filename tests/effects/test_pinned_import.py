"""The importer's comparison (steploop/effects/importer/compare.py), pinned where the mutation
sample found it unpinned: a stop hook's prevention is compared with what the machine writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.importer.session import import_file


def _rec(kind: str, uuid: str, parent: str | None, **kw: Any) -> dict[str, Any]:
    return {
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "version": "2.1.88",
        "isSidechain": False, "timestamp": "2026-02-01T10:00:00.000Z", **kw,
    }  # fmt: skip


def _turn(reason: str) -> list[dict[str, Any]]:
    """A prompt, an answer, then a Stop hook that prevents continuation with ``reason``."""
    return [
        _rec("user", "u1", None, message={"role": "user", "content": "wrap up"}),
        _rec(
            "assistant", "a1", "u1",
            message={"id": "m1", "model": "claude-opus-4-6", "role": "assistant",
                     "content": [{"type": "text", "text": "Done."}], "stop_reason": None,
                     "usage": {"input_tokens": 10, "output_tokens": 5}},
        ),
        _rec(
            "attachment", "p1", "a1",
            attachment={"type": "hook_stopped_continuation", "hookName": "Stop",
                        "stopReason": reason},
        ),
        _rec(
            "system", "s1", "p1", subtype="stop_hook_summary", hookCount=1,
            hookInfos=[{"command": "hook"}], hookErrors=[], preventedContinuation=True,
            stopReason=reason, hasOutput=False, level="suggestion",
        ),
    ]  # fmt: skip


@pytest.mark.spec("IMP-19")
def test_a_stop_hooks_prevention_is_compared_not_left_out(tmp_path: Path) -> None:
    """A Stop hook that prevents continuation: its record is one of the kinds compared (none
    is counted as left out), and the turn reproduces."""
    path = tmp_path / "s1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _turn("policy says stop")))
    (turn,) = import_file(path, None, name="s1.jsonl").turns
    assert turn.reproduced, turn.divergence
    assert "stop_prevent" not in turn.left_out, turn.left_out
