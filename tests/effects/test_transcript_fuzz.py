"""A transcript steploop appends to (``steploop run --transcript FILE`` over a session file
that exists) can hold anything: records with values of other types at any depth are skipped
where they name no chain, and appending and tombstoning go on (TR-1). A ``type`` that was a
list and a ``message`` that was a string raised TypeError and AttributeError before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from steploop.effects.transcript import TranscriptWriter
from steploop.reducer.messages import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from tests.support.json_mutations import mutated

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "cc-transcripts"
BASE: list[Any] = [
    json.loads(line)
    for line in (SHIPPED / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
    .read_text(encoding="utf-8")
    .splitlines()[:40]
]


@pytest.mark.spec("TR-1")
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=mutated(BASE))
def test_appending_to_any_transcript(
    records: list[Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("t") / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    before = path.read_bytes()
    with TranscriptWriter(path, session_id="s", cwd="/", version="v") as w:
        w.append(UserMessage(id="u1", content=(TextBlock(text="go on"),)))
        use = ToolUseBlock(id="toolu_new", name="Read", input={"file_path": "a"})
        w.append(AssistantMessage(id="a1", response_id="r1", model="m", content=(use,)))
        w.append(
            UserMessage(id="u2", content=(ToolResultBlock(tool_use_id="toolu_new", content="x"),))
        )
        w.append(
            AssistantMessage(
                id="a2", response_id="r2", model="m", content=(TextBlock(text="gone"),)
            )
        )
        assert w.tombstone("a2") is True
    assert path.read_bytes().startswith(before)  # what was there is kept as it was
