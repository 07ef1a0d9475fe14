"""IMP-1: a transcript with values of other types at any depth imports, its problems as lines,
never a crash. The records of real transcripts are mutated by Hypothesis (the strategy the
stream and transcript property tests share); three shapes that crashed it are pinned by name:
a tool_use whose ``name`` is a list (the sub-agent links), an attachment whose ``type`` is a
list (cutting into turns), a first record whose ``type`` is a list (``show`` asking whether a
file is a transcript)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from steploop.effects.cli import main
from steploop.effects.importer import import_file
from steploop.effects.trace_cli import claude_code_transcript
from tests.support.json_mutations import mutated

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "cc-transcripts"


def _records(path: Path, n: int = 60) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:n]]


SPOTTER = _records(SHIPPED / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
CHAINS = _records(SHIPPED / "derived" / "continuation_chains.jsonl")


def _write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.spec("IMP-1")
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=mutated(SPOTTER, most=6))
def test_a_mutated_transcript_imports(
    records: list[Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("imp")
    import_file(_write(out / "s.jsonl", records), out / "traces", name="s.jsonl")


@pytest.mark.spec("IMP-1", "IMP-23")
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=mutated(CHAINS, most=6))
def test_a_mutated_transcript_of_chains_imports(
    records: list[Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("imp")
    import_file(_write(out / "s.jsonl", records), None, name="s.jsonl")


def _first(kind: str, content: list[Any]) -> dict[str, Any]:
    return {
        "type": kind, "uuid": "u1", "parentUuid": None, "sessionId": "s", "version": "2.1.88",
        "isSidechain": False, "timestamp": "2026-02-01T10:00:00.000Z",
        "message": {"role": kind, "content": content, "id": "m1", "model": "claude-x"},
    }  # fmt: skip


@pytest.mark.spec("IMP-1")
@pytest.mark.parametrize(
    "record",
    [
        {
            **_first(
                "assistant", [{"type": "tool_use", "id": "t1", "name": ["Task"], "input": {}}]
            ),
            "uuid": "u2",
            "parentUuid": "u1",
        },
        {
            **_first("user", []),
            "type": "attachment",
            "uuid": "u2",
            "parentUuid": "u1",
            "attachment": {"type": ["queued_command"]},
        },
    ],
    ids=["tool_use name", "attachment type"],
)
def test_lists_where_names_stood_are_read_as_unknown(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    path = _write(tmp_path / "s.jsonl", [_first("user", [{"type": "text", "text": "hi"}]), record])
    report = import_file(path, None, name="s.jsonl")
    assert len(report.turns) == 1


@pytest.mark.spec("IMP-1")
def test_show_asks_a_file_whose_first_type_is_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "t.jsonl", [{"type": ["user"], "uuid": "u"}])
    assert claude_code_transcript(path) is False
    assert main(["show", str(path)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("steploop: error: ") and err.count("\n") == 1


@pytest.mark.spec("IMP-1")
def test_a_session_from_a_pipe_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``steploop import <(zcat s.jsonl.gz)``: a pipe named as an input is read once into a
    temporary file (the import reads a session twice, by offsets the second time); before, it
    failed with "File or stream is not seekable". Its traces name the pipe as their source."""
    import os
    import tempfile
    import threading

    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))

    source = SHIPPED / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    stop = threading.Event()

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(source.read_bytes())
        # a reader that opens the pipe again (an import that reads it twice) finds it empty
        # at once instead of waiting for ever for a writer
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader now
                stop.wait(0.01)
                continue
            os.close(fd)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = io.StringIO()
    try:
        code = main(["import", str(fifo), "-o", str(tmp_path / "out")], out=out)
    finally:
        stop.set()
        writer.join()
    assert code == 0, out.getvalue()
    assert "3 user turn(s): 3 ended, 3 reproduced exactly" in out.getvalue()
    header = json.loads((tmp_path / "out" / "pipe.t001.jsonl").read_text().splitlines()[0])
    assert header["provenance"]["source"] == str(fifo)
    assert list(spool.iterdir()) == []  # the spooled copy went with the import
