"""Build tests/data/cc-transcripts/derived/: real transcripts, each changed by one edit.

Every file here is a shipped real transcript (see PROVENANCE.md) with one change that makes it a
case the importer must handle: bad input (a truncated last line, an unknown record type, a newer
version, a branch, a line that is not JSON, a repeated uuid, a record without a type, a file that
is not a transcript) or a shape the shipped files lack (stop-hook feedback, a block steploop does
not model, API errors). ``expected.json`` holds, for each file, the exact problem lines the
importer must report and the verdict it must reach; the expectations below are written by hand:
they are the specification (specs/import.md), and tests/effects/test_import_cases.py checks the
code against them.

Run from the repository root: ``.venv/bin/python tests/data/cc-transcripts/make_derived.py``
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import derived_versions

HERE = Path(__file__).resolve().parent
OUT = HERE / "derived"
MAIN = HERE / "fasthooks" / "sample_main_transcript.jsonl"
TOOLS = HERE / "spotter" / "tool_heavy.jsonl"
TRACE = HERE.parents[2] / "specs" / "scenarios" / "completed.jsonl"


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def recs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in lines(path)]


def dump(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def write(name: str, text: str | bytes) -> None:
    path = OUT / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


EXPECTED: dict[str, dict[str, Any]] = {}


def expect(name: str, problems: list[str], **verdict: Any) -> None:
    EXPECTED[name] = {"problems": problems, **verdict}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    tools = lines(TOOLS)

    # a truncated last line: the file stops mid-record, without a final newline; the record
    # was the interrupt marker that ended the last turn, so that turn is left cut off
    last = tools[-1]
    write("truncated_last_line.jsonl", "\n".join(tools[:-1]) + "\n" + last[: len(last) // 2])
    expect(
        "truncated_last_line.jsonl",
        [
            "error: truncated_last_line.jsonl:39: the last line is truncated (Claude Code was "
            "probably still writing it); skipped"
        ],
        turns=2,
        reproduced=1,
        causes={"cut-off": 1},
    )

    # an unknown record type, twice
    rs = recs(TOOLS)
    odd = {"type": "hologram", "sessionId": rs[1]["sessionId"], "payload": {"x": 1}}
    write("unknown_record_type.jsonl", dump([rs[0], odd, *rs[1:4], odd, *rs[4:]]))
    expect(
        "unknown_record_type.jsonl",
        ["error: unknown_record_type.jsonl:2: unknown record type 'hologram' (2 records, the first here); skipped"],
        turns=2,
        reproduced=2,
    )

    # a newer Claude Code version on every record
    rs = recs(TOOLS)
    for r in rs:
        if "version" in r:
            r["version"] = "2.3.0"
    write("newer_version.jsonl", dump(rs))
    expect(
        "newer_version.jsonl",
        [
            "warning: newer_version.jsonl:2: Claude Code version 2.3.0 is newer than this "
            "importer knows (2.1.88); its records are read as 2.1.88 records"
        ],
        turns=2,
        reproduced=2,
    )

    # a branch: before turn 3's prompt the user asked something else and rewound to line 17
    rs = recs(MAIN)
    at = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("4ff8f9dd"))
    prompt = copy.deepcopy(rs[at])
    prompt["uuid"] = "0b0b0b0b-0000-4000-8000-000000000001"
    prompt["message"]["content"] = "actually, delete it"
    reply = copy.deepcopy(rs[at + 1])
    reply["uuid"] = "0b0b0b0b-0000-4000-8000-000000000002"
    reply["parentUuid"] = prompt["uuid"]
    reply["message"]["id"] = "msg_branch"
    reply["message"]["content"] = [{"type": "text", "text": "Deleted."}]
    write("branch.jsonl", dump([*rs[:at], prompt, reply, *rs[at:]]))
    expect(
        "branch.jsonl",
        [
            "warning: branch.jsonl:17: a branch: this record has another continuation at lines "
            "19-20 (2 message records) that does not lead to the last message; that branch is "
            "not imported"
        ],
        turns=5,
        reproduced=5,
    )

    # a line in the middle that is not JSON, one that is not an object, one without a type
    raw_lines = lines(TOOLS)
    write(
        "bad_lines.jsonl",
        "\n".join([*raw_lines[:5], "{not json", "[1, 2]", '{"uuid": "x"}', *raw_lines[5:]]) + "\n",
    )
    expect(
        "bad_lines.jsonl",
        [
            "error: bad_lines.jsonl:6: not valid JSON: Expecting property name enclosed in "
            "double quotes at column 2; skipped",
            "error: bad_lines.jsonl:7: a record must be a JSON object, got list; skipped",
            'error: bad_lines.jsonl:8: a record without a "type"; skipped',
        ],
        turns=2,
        reproduced=2,
    )

    # a record written twice (the same uuid)
    raw_lines = lines(TOOLS)
    write("duplicate_uuid.jsonl", "\n".join([*raw_lines[:4], raw_lines[3], *raw_lines[4:]]) + "\n")
    expect(
        "duplicate_uuid.jsonl",
        [
            "error: duplicate_uuid.jsonl:5: uuid 5440873c-2d59-4c8c-88ec-c0a8c38a027d was "
            "already used at line 4; this record is skipped"
        ],
        turns=2,
        reproduced=2,
    )

    # not a transcript: a steploop trace
    write("not_a_transcript.jsonl", TRACE.read_text(encoding="utf-8"))
    n = len(lines(TRACE))
    expect(
        "not_a_transcript.jsonl",
        [
            f"error: not_a_transcript.jsonl: not a Claude Code transcript: none of its {n} "
            "line(s) is a user or assistant record; skipped"
        ],
        turns=0,
        reproduced=0,
    )

    # invalid UTF-8 inside a record: the record is lost, the chain is bridged over it (IMP-4)
    raw = TOOLS.read_bytes().split(b"\n")
    raw[23] = raw[23].replace(b"MCP dialog", b"MCP \xff\xfedialog", 1)
    write("invalid_utf8.jsonl", b"\n".join(raw))
    expect(
        "invalid_utf8.jsonl",
        [
            "error: invalid_utf8.jsonl:24: not UTF-8 text (byte 0xff at column "
            f"{raw[23].index(bytes([0xFF])) + 1}); skipped",
            "note: invalid_utf8.jsonl:26: parentUuid 2ef15da6-63ae-4a98-b781-676d95ac2692 names "
            "no record of this file; the chain continues at line 23, the message written before it",
        ],
        turns=2,
        reproduced=2,
    )

    # a block steploop does not model (a server tool call) in a response
    rs = recs(MAIN)
    at = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("7573b6a6"))
    rs[at]["message"]["content"] = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "ls"}}
    ]
    write("unmodelled_block.jsonl", dump(rs))
    expect(
        "unmodelled_block.jsonl",
        [
            "note: unmodelled_block.jsonl:6: a server_tool_use block: kept as an opaque block"
        ],
        turns=5,
        reproduced=5,
    )

    # stop-hook feedback: turn 1's hook blocks once, the model answers again, then passes; Claude
    # Code writes the feedback before the summary, as the machine does under Q-13
    rs = recs(MAIN)
    at = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("5d50bbbc"))
    summary = rs[at]
    feedback = {
        **{k: summary[k] for k in ("isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch")},
        "parentUuid": summary["parentUuid"],
        "type": "user",
        "message": {"role": "user", "content": 'Stop hook feedback:\n["$CLAUDE_PROJECT_DIR"/hooks/run_hook.sh]: tests are failing'},
        "isMeta": True,
        "uuid": "0f0f0f0f-0000-4000-8000-000000000001",
        "timestamp": summary["timestamp"],
    }
    blocked = {**copy.deepcopy(summary), "parentUuid": feedback["uuid"], "hasOutput": True}
    answer = copy.deepcopy(rs[at - 1])
    answer["uuid"] = "0f0f0f0f-0000-4000-8000-000000000002"
    answer["parentUuid"] = blocked["uuid"]
    answer["message"]["id"] = "msg_after_feedback"
    answer["message"]["content"] = [{"type": "text", "text": "Fixed the tests."}]
    passed = copy.deepcopy(summary)
    passed["uuid"] = "0f0f0f0f-0000-4000-8000-000000000003"
    passed["parentUuid"] = answer["uuid"]
    next(r for r in rs[at + 1 :] if "uuid" in r)["parentUuid"] = passed["uuid"]
    write("stop_hook_feedback.jsonl", dump([*rs[:at], feedback, blocked, answer, passed, *rs[at + 1 :]]))
    expect(
        "stop_hook_feedback.jsonl",
        [],
        turns=5,
        reproduced=5,
    )

    # an API error answers the first prompt, with the `error` category Claude Code 2.1.88 writes
    # for it (R-CATEGORY-1): an invalid key, a tool-use pairing error, and another 400 (named
    # `unknown`); the machine names each as Claude Code does, so every turn reproduces
    pairing = (
        "API Error: 400 messages.2: `tool_use` ids were found without `tool_result` blocks "
        "immediately after: toolu_01. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    )
    for name, err, status, text, verdict in (
        ("api_error_auth.jsonl", "authentication_failed", 401, "API Error: 401 invalid x-api-key", {"reproduced": 5}),
        ("api_error_invalid.jsonl", "invalid_request", 400, pairing, {"reproduced": 5}),
        ("api_error_other_400.jsonl", "unknown", 400, "API Error: 400 messages: at least one message is required", {"reproduced": 5}),
    ):
        rs = recs(MAIN)
        at = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("743298"))
        err_rec = copy.deepcopy(rs[at])
        err_rec["message"] = {
            "id": "d0d0d0d0-synthetic",
            "model": "<synthetic>",
            "role": "assistant",
            "type": "message",
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "content": [{"type": "text", "text": text}],
        }
        err_rec["isApiErrorMessage"] = True
        err_rec["error"] = err
        err_rec["apiErrorStatus"] = status
        end = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("5d50bbbc"))
        nxt = rs[end + 1 :]
        next(r for r in nxt if "uuid" in r)["parentUuid"] = err_rec["uuid"]
        write(name, dump([*rs[:at], err_rec, *nxt]))
        expect(name, [], turns=5, **verdict)

    derived_versions.main(expect, write)  # the shapes of other Claude Code versions (VER-*)

    (OUT / "expected.json").write_text(json.dumps(EXPECTED, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(EXPECTED)} derived transcripts and expected.json to {OUT}")


if __name__ == "__main__":
    main()
