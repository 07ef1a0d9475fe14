"""The derived transcripts of Claude Code's version differences (specs/import.md §11, VER-*).

Called by ``make_derived.py`` (its ``main()``), after the other derived files are written: each
case here is a shipped real transcript (or a derived file made from one) changed by one edit into
a shape of an older or newer version, with the verdict the importer must reach under the
profile of that version.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "derived"
MAIN = HERE / "fasthooks" / "sample_main_transcript.jsonl"
INIT = HERE / "ccviewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"

Record = dict[str, Any]


def _recs(path: Path) -> list[Record]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _dump(records: list[Record]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def _without(records: list[Record], drop: Callable[[Record], bool]) -> list[Record]:
    """The records less those ``drop`` picks, each child of a dropped record (by ``parentUuid``
    or, for a compact boundary, ``logicalParentUuid``) linked to its parent: the chain stays
    whole."""
    parent_of = {r["uuid"]: r.get("parentUuid") for r in records if drop(r) and "uuid" in r}
    out = []
    for r in records:
        if drop(r):
            continue
        for key in ("parentUuid", "logicalParentUuid"):
            p = r.get(key)
            while p in parent_of:
                p = parent_of[p]
            if key in r:
                r = {**r, key: p}
        out.append(r)
    return out


def _api_error_1_0(record: Record, text: str) -> Record:
    """An API-error record as 1.0.x wrote it: no ``error`` field, no status."""
    err = copy.deepcopy(record)
    err["message"] = {
        "id": "d0d0d0d0-1000-4000-8000-synthetic",
        "model": "<synthetic>",
        "role": "assistant",
        "type": "message",
        "stop_reason": "stop_sequence",
        "stop_sequence": "",
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        "content": [{"type": "text", "text": text}],
    }
    err["isApiErrorMessage"] = True
    return err


def main(expect: Callable[..., None], write: Callable[[str, str], None]) -> None:
    # VER-2: 2.1.14 writes the stop hook's feedback and no stop_hook_summary records
    rs = _recs(OUT / "stop_hook_feedback.jsonl")
    rs = _without(
        rs, lambda r: r.get("type") == "system" and r.get("subtype") == "stop_hook_summary"
    )
    for r in rs:
        if "version" in r:
            r["version"] = "2.1.14"
    write("stop_hook_feedback_2_1_14.jsonl", _dump(rs))
    expect("stop_hook_feedback_2_1_14.jsonl", [], turns=5, reproduced=5)

    # VER-6: a 1.0.98 turn that ends on an HTTP 502, and one on a subscription's usage limit,
    # written as 1.0.x wrote API errors (no `error` field; the usage limit unprefixed)
    for name, text in (
        (
            "api_error_502_1_0.jsonl",
            'API Error: 502 {"type":"error","error":{"type":"api_error","message":"Bad Gateway"}}',
        ),
        ("usage_limit_1_0.jsonl", "Claude AI usage limit reached|1756890000"),
    ):
        rs = _recs(INIT)
        at = len(rs) - 1  # the turn's last response, its closing text
        assert rs[at]["type"] == "assistant" and rs[at]["message"]["content"][0]["type"] == "text"
        rs[at] = _api_error_1_0(rs[at], text)
        write(name, _dump(rs))
        expect(name, [], turns=1, reproduced=1)

    # VER-8: a response answered by the non-streaming fallback after a connection error: one
    # record holding its two blocks (thinking and a Bash call), the retry notice before it
    rs = _recs(MAIN)
    first = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("74329834"))
    second = rs[first + 1]
    assert second["message"]["id"] == rs[first]["message"]["id"]
    whole = copy.deepcopy(rs[first])
    whole["message"]["content"] = [*rs[first]["message"]["content"], *second["message"]["content"]]
    whole["message"]["usage"] = second["message"]["usage"]
    notice = {
        **{
            k: rs[first][k]
            for k in ("isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch")
        },
        "parentUuid": rs[first]["parentUuid"],
        "type": "system",
        "subtype": "api_error",
        "level": "error",
        "error": {"cause": {"code": "ECONNRESET"}, "message": "Connection error."},
        "retryInMs": 544,
        "retryAttempt": 1,
        "maxRetries": 10,
        "uuid": "0e0e0e0e-0000-4000-8000-000000000001",
        "timestamp": rs[first]["timestamp"],
    }
    whole["parentUuid"] = notice["uuid"]
    for r in rs[first + 2 :]:
        if r.get("parentUuid") == second["uuid"]:
            r["parentUuid"] = whole["uuid"]
    write("nonstreaming_answer.jsonl", _dump([*rs[:first], notice, whole, *rs[first + 2 :]]))
    expect("nonstreaming_answer.jsonl", [], turns=5, reproduced=5)
