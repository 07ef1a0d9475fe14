"""The importer reports a transcript whose conversation the API refuses as not reproducible,
with its cause (M-HIST-1, B-MODEL-2): the machine refuses it, where Claude Code repaired it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steploop.effects.importer.session import import_file

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tests" / "data" / "cc-transcripts" / "spotter" / "tool_heavy.jsonl"


def _tool_use_ids(text: str) -> list[str]:
    ids: list[str] = []
    for line in text.splitlines():
        content = (json.loads(line).get("message") or {}).get("content")
        if isinstance(content, list):
            ids += [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    return ids


@pytest.mark.spec("M-HIST-1", "B-MODEL-2", "IMP-19")
def test_a_transcript_reusing_one_tool_use_id_is_not_reproduced(tmp_path: Path) -> None:
    """Every tool_use of a real transcript given the first one's id: no turn is reproduced,
    each first divergence is ``malformed-conversation``, the later turn's session is refused
    without a trace (and without an importer failure)."""
    text = TOOLS.read_text(encoding="utf-8")
    ids = _tool_use_ids(text)
    assert len(ids) > 2
    for other in ids[1:]:
        text = text.replace(other, ids[0])
    path = tmp_path / "reused.jsonl"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rep = import_file(path, out, name="reused.jsonl")
    assert [str(p) for p in rep.problems] == []
    assert rep.turns and not any(t.reproduced for t in rep.turns)
    causes = [t.divergence.cause for t in rep.turns if t.divergence is not None]
    assert causes == ["malformed-conversation"] * len(rep.turns)
    first, *rest = rep.turns
    assert first.divergence is not None and "malformed response" in first.divergence.got
    assert first.trace is not None and (out / first.trace).is_file()
    for turn in rest:
        assert turn.divergence is not None and "refuses the conversation" in turn.divergence.got
        assert turn.trace is None


@pytest.mark.spec("M-HIST-1", "CLI-1")
def test_steploop_run_with_a_blank_prompt_is_one_line_and_status_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`steploop run "   "`: the machine's refusal is one error line and exit status 2, not an
    exception group's traceback."""
    from steploop.effects.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["run", "   ", "--scripted", str(ROOT / "examples" / "replies.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        "steploop: error: the prompt is empty or only whitespace: the API refuses a message "
        "without text"
    ]
