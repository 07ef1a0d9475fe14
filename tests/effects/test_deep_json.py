"""JSON from outside nested past the parser's depth (a RecursionError, not a ValueError) or
holding an integer of thousands of digits: every reader of outside JSON turns it into its
usual problem, never a crash (a hook's output, the model's stream and body, a transcript
being imported or appended to, a trace's first line, a refusal's details)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from steploop.effects.cli import main
from steploop.effects.hooks import PASS, CommandStopHook, StopHookInput
from steploop.effects.model.stream import decode_event
from steploop.effects.transcript import TranscriptWriter
from steploop.reducer import default
from steploop.reducer.messages import TextBlock, UserMessage
from steploop.reducer.texts import refusal_text

DEPTH = 100_000
DEEP = '{"a":' * DEPTH + "1" + "}" * DEPTH
DEEP_LIST = "[" * DEPTH + "]" * DEPTH
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "cc-transcripts"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_inputs_are_what_they_claim() -> None:
    """Without this, the rest proves nothing: json.loads raises RecursionError on them."""
    import json

    for text in (DEEP, DEEP_LIST):
        with pytest.raises(RecursionError):
            json.loads(text)


@pytest.mark.spec("E-JSON-1")
@pytest.mark.anyio
async def test_a_hook_printing_deep_json_passes(tmp_path: Path) -> None:
    """Exit code 0 with stdout that is no JSON object Claude Code can read: the hook passes."""
    out = tmp_path / "deep.json"
    out.write_text(DEEP)
    hook = CommandStopHook(f"cat '{out}'", 10)
    result = await hook(StopHookInput(session_id="s", transcript_path=str(tmp_path / "t.jsonl")))
    assert result == PASS


@pytest.mark.spec("E-JSON-1", "R-BLOCK-1")
def test_deep_event_data_is_malformed_data() -> None:
    for data in (DEEP, DEEP_LIST):
        name, payload, problem = decode_event("message_start", data)
        assert (name, payload) == ("message_start", {})
        assert problem is not None and problem.startswith("malformed message_start data: ")


@pytest.mark.spec("E-JSON-1", "R-REFUSAL-1")
def test_deep_refusal_details_are_no_details() -> None:
    text = refusal_text(default(texts="steploop"), "m", DEEP)
    assert text == "API Error: The model refused to respond to this request."


@pytest.mark.spec("E-JSON-1", "IMP-1")
def test_an_imported_transcript_skips_deep_and_huge_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    src = SHIPPED / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    lines = src.read_bytes().splitlines(keepends=True)
    huge = b'{"type":"user","n":' + b"1" * (sys.get_int_max_str_digits() + 10) + b"}\n"
    lines[3:3] = [DEEP.encode() + b"\n", huge, DEEP_LIST.encode() + b"\n"]
    (folder / "s.jsonl").write_bytes(b"".join(lines))
    out = io.StringIO()
    code = main(["import", str(folder), "--no-traces"], out=out)
    err = capsys.readouterr().err
    assert "s.jsonl:4: not valid JSON (nested too deep); skipped" in err
    limit = sys.get_int_max_str_digits()
    assert f"s.jsonl:5: not valid JSON (an integer of more than {limit} digits); skipped" in err
    assert "s.jsonl:6: not valid JSON (nested too deep); skipped" in err
    assert "3 user turn(s): 3 ended, 3 reproduced exactly" in out.getvalue()
    assert code == 1  # some input could not be imported: the skipped lines


@pytest.mark.spec("E-JSON-1")
def test_a_transcript_appended_to_skips_deep_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(DEEP + "\n")
    with TranscriptWriter(path, session_id="s", cwd="/", version="v") as w:
        record = w.append(UserMessage(id="u1", content=(TextBlock(text="hi"),)))
    assert record["parentUuid"] is None
    assert path.read_text().startswith(DEEP + "\n")


@pytest.mark.spec("E-JSON-1")
def test_show_of_a_file_whose_first_line_is_deep_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(DEEP + "\n")
    code = main(["show", str(path)], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("steploop: error: ")
    assert "Traceback" not in err
