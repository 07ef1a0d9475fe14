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
CCV = HERE / "ccviewer" / "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
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
    # was the interrupt marker that ended the last turn, so that turn is left cut off, and
    # reproduced up to the cut (IMP-22)
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
        cut=1,
    )

    # an unknown record type, twice
    rs = recs(TOOLS)
    odd = {"type": "hologram", "sessionId": rs[1]["sessionId"], "payload": {"x": 1}}
    write("unknown_record_type.jsonl", dump([rs[0], odd, *rs[1:4], odd, *rs[4:]]))
    expect(
        "unknown_record_type.jsonl",
        ["warning: unknown_record_type.jsonl:2: unknown record type 'hologram' (2 records, the first here); skipped"],
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

    # a branch: before turn 3's prompt the user asked something else and rewound to line 17;
    # both continuations are imported, the branch as its own thread (IMP-23)
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
            "note: branch.jsonl:19: lines 19-20 (2 message records) are a branch that forks "
            "from main after line 17; imported as 'main branch 1'"
        ],
        turns=6,
        reproduced=6,
        threads=[
            {"name": "main", "own": 2, "fork": None, "chains": [2, 61], "turns": [1, 2, 3, 4, 5]},
            {"name": "main branch 1", "own": 19, "fork": {"thread": "main", "line": 17},
             "chains": [2], "turns": [3]},
        ],
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

    # 1.0.x continuation chains: Claude Code 1.0.8x-1.0.90 wrote no compact_boundary; after a
    # compaction the conversation goes on as a new chain whose first record is the compact
    # summary, with no parentUuid and no logicalParentUuid (issue 21, class 8). The real 1.0.98
    # session ccviewer/fe5e1c67 (two turns, five sidechains interleaved with the first) gets that
    # shape twice: a summary record after turn 1, its turn 2 re-parented to it, and a third turn
    # (turn 2's records again, fresh uuids) after a second summary. Every chain is imported: the
    # three turns, each starting from the conversation its chain holds (the summary, IMP-9), and
    # the five sidechains, each linked to the Task call whose prompt is its first record.
    rs = recs(CCV)
    end1 = next(i for i, r in enumerate(rs) if r.get("uuid", "").startswith("fa393e1e"))
    turn2 = rs[end1 + 1 :]

    def compact_summary(n: int, after: dict[str, Any]) -> dict[str, Any]:
        return {
            "parentUuid": None,
            "isSidechain": False,
            "userType": "external",
            "cwd": after["cwd"],
            "sessionId": after["sessionId"],
            "version": after["version"],
            "gitBranch": after.get("gitBranch", ""),
            "type": "user",
            "message": {
                "role": "user",
                "content": "This session is being continued from a previous conversation that "
                "ran out of context. The conversation is summarized below:\n"
                f"Analysis: part {n} of the TODO app work (Next.js, the task components, "
                "CLAUDE.md).",
            },
            "isCompactSummary": True,
            "uuid": f"c0c0c0c0-0000-4000-8000-00000000000{n}",
            "timestamp": after["timestamp"],
        }

    first = compact_summary(1, rs[end1])
    turn2[0] = {**turn2[0], "parentUuid": first["uuid"]}
    second = compact_summary(2, turn2[-1])
    turn3 = copy.deepcopy(rs[end1 + 1 :])
    for k, r in enumerate(turn3):
        r["uuid"] = f"d0d0d0d0-0000-4000-8000-{k:012d}"
        r["parentUuid"] = second["uuid"] if k == 0 else turn3[k - 1]["uuid"]
        if r["type"] == "assistant":
            r["message"]["id"] = r["message"]["id"] + "_again"
    write("continuation_chains.jsonl", dump([*rs[: end1 + 1], first, *turn2, second, *turn3]))
    n1 = end1 + 2  # the first summary's line
    n2 = n1 + len(turn2) + 1
    expect(
        "continuation_chains.jsonl",
        [],
        turns=8,
        reproduced=8,
        threads=[
            {"name": "main", "own": 2, "fork": None, "chains": [2, n1, n2], "turns": [1, 2, 3]},
            *[
                {"name": "sidechain (no agent id)", "own": line, "fork": None, "chains": [line],
                 "turns": [1], "parent": call}
                for line, call in (
                    (16, "toolu_01LS6tcVd796SbQKmZqeVnWY"),
                    (38, "toolu_014i9ThHMNShCHocf9xMKasf"),
                    (125, "toolu_01EbxY94wRUAGyMLj5wh699C"),
                    (229, "toolu_017rjDpjVPeNFmAEXNTkoP55"),
                    (295, "toolu_01EPom7jESzNbU8coiKjzVGS"),
                )
            ],
        ],
    )

    derived_versions.main(expect, write)  # the shapes of other Claude Code versions (VER-*)

    (OUT / "expected.json").write_text(json.dumps(EXPECTED, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(EXPECTED)} derived transcripts and expected.json to {OUT}")


if __name__ == "__main__":
    main()
