"""Mutations of golden traces, and the oracle the trace commands are judged by (issue #17).

A mutation takes the bytes of a valid trace and a ``random.Random`` and returns broken (or, by
chance, still valid) bytes: a flipped byte, a truncation, a duplicated, dropped or swapped line,
a value of the wrong type, deep nesting, a huge number, a lone surrogate, a dropped or added key.

:func:`judge` runs one trace command in-process, as ``steploop`` runs it, and says what
happened: its exit status, its stderr lines, and whether an exception escaped (a traceback).
:func:`schema_valid` says whether every line is valid under ``specs/trace.schema.json``, with
integers strict (``2.0`` is not an integer).

``python -m tests.support.trace_mutations [N] [--seed S]`` sweeps N mutated traces through
``replay``, ``show`` and ``stats`` and prints the counts (tracebacks, accepted schema-invalid
traces, errors of more than one line).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]

from tests.support.json_mutations import get as _get
from tests.support.json_mutations import paths as _paths

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "specs" / "scenarios").glob("*.jsonl"))

Mutation = Callable[[bytes, random.Random], bytes]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def _join(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


def flip(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def duplicate(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    how = rng.choice(("dup", "drop", "swap"))
    if how == "dup":
        lines.insert(i, lines[i])
    elif how == "drop":
        del lines[i]
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return _join(lines)


def _set(v: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    _get(v, path[:-1])[path[-1]] = new
    return v


def _edit_line(data: bytes, rng: random.Random, edit: Callable[[Any, random.Random], Any]) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    obj = json.loads(lines[i])
    lines[i] = edit(obj, rng)
    return _join(lines)


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _swapped(old: Any, rng: random.Random) -> Any:
    choices: list[Any] = [
        "false",
        "true",
        "2",
        2.9,
        2.0,
        1,
        0,
        True,
        False,
        None,
        [],
        {},
        ["x"],
        {"a": 1},
        "",
        -1,
    ]
    if isinstance(old, bool):
        choices += ["false", 1, 0]
    elif isinstance(old, int):
        choices += [old + 0.5, float(old), str(old), -old - 1, True]
    elif isinstance(old, str):
        choices += [[old], {"v": old}, 42, None]
    return rng.choice(choices)


def type_swap(data: bytes, rng: random.Random) -> bytes:
    def edit(obj: Any, rng: random.Random) -> bytes:
        path = rng.choice(_paths(obj))
        return _dump(_set(obj, path, _swapped(_get(obj, path), rng)))

    return _edit_line(data, rng, edit)


def nesting(data: bytes, rng: random.Random) -> bytes:
    def edit(obj: Any, rng: random.Random) -> bytes:
        path = rng.choice(_paths(obj))
        depth = rng.choice((50, 120, 130, 600, 990, 5_000, 100_000))
        open_, close = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
        marker = "\x00NEST\x00"
        text = _dump(_set(obj, path, marker))
        return text.replace(json.dumps(marker).encode(), open_ * depth + b"1" + close * depth, 1)

    return _edit_line(data, rng, edit)


def huge_number(data: bytes, rng: random.Random) -> bytes:
    def edit(obj: Any, rng: random.Random) -> bytes:
        ints = [p for p in _paths(obj) if type(_get(obj, p)) is int]
        path = rng.choice(ints or _paths(obj))
        marker = "\x00NUM\x00"
        text = _dump(_set(obj, path, marker))
        digits = rng.choice((19, 25, 101, 500, 4_301, 5_000, 20_000))
        num = rng.choice(
            (
                b"9" * digits,
                b"-" + b"9" * digits,
                b"1e400",
                b"-1e400",
                b"NaN",
                b"Infinity",
                b"1" + b"0" * digits + b".5",
            )
        )
        return text.replace(json.dumps(marker).encode(), num, 1)

    return _edit_line(data, rng, edit)


def surrogate(data: bytes, rng: random.Random) -> bytes:
    def edit(obj: Any, rng: random.Random) -> bytes:
        strs = [p for p in _paths(obj) if type(_get(obj, p)) is str]
        if not strs:
            return _dump(obj)
        path = rng.choice(strs)
        old = _get(obj, path)
        esc = rng.choice(("\ud800", "\udcff", "\udfff", "\ud83d"))
        k = rng.randrange(len(old) + 1)
        return _dump(_set(obj, path, old[:k] + esc + old[k:]))

    return _edit_line(data, rng, edit)


def keys(data: bytes, rng: random.Random) -> bytes:
    def edit(obj: Any, rng: random.Random) -> bytes:
        dicts = [p for p in _paths(obj) if isinstance(_get(obj, p), dict) and _get(obj, p)]
        path = rng.choice(dicts)
        d = _get(obj, path)
        if rng.random() < 0.5:
            del d[rng.choice(list(d))]
        else:
            d[rng.choice(("extra", "type", "ref", "record", "i"))] = rng.choice(
                (1, "x", None, [], {})
            )
        return _dump(obj)

    return _edit_line(data, rng, edit)


MUTATIONS: dict[str, Mutation] = {
    "flip": flip,
    "truncate": truncate,
    "duplicate": duplicate,
    "type_swap": type_swap,
    "nesting": nesting,
    "huge_number": huge_number,
    "surrogate": surrogate,
    "keys": keys,
}


# --- the oracle --------------------------------------------------------------------------------


@cache
def _validator() -> Any:
    schema = json.loads((ROOT / "specs" / "trace.schema.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    strict = cls.TYPE_CHECKER.redefine("integer", lambda _c, x: type(x) is int)
    return jsonschema.validators.extend(cls, type_checker=strict)(schema)


def _finite(s: str) -> float:
    f = float(s)
    if f - f != 0.0:
        raise ValueError("not finite")
    return f


def _reject(s: str) -> Any:
    raise ValueError(f"{s} is not JSON")


_STRICT_JSON = json.JSONDecoder(parse_constant=_reject, parse_float=_finite)


MAX_LINE_DEPTH = 128  # specs/trace-format.md, "Limits"
MAX_INT_DIGITS = 100


def within_limits(obj: Any) -> bool:
    """At most MAX_LINE_DEPTH levels of arrays and objects; integers of at most 100 digits."""
    bound = 10**MAX_INT_DIGITS
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > MAX_LINE_DEPTH:
                return False
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
        elif type(v) is int and not -bound < v < bound:
            return False
    return True


def first_invalid_line(data: bytes) -> int | None:
    """The 1-based number of the first line that is not strict JSON within the limits and
    valid under specs/trace.schema.json (1 for an empty file); None when every line is. A last
    line without its newline counts as any other: the format accepts one that parses (only the
    newline was lost, trace-format.md §6); one cut inside its record does not parse."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    if not lines or data == b"":
        return 1
    v = _validator()
    for n, line in enumerate(lines, 1):
        try:
            obj = _STRICT_JSON.decode(line.decode("utf-8"))
        except (ValueError, RecursionError):
            return n
        if not isinstance(obj, dict) or not within_limits(obj) or not v.is_valid(obj):
            return n
    return None


def schema_valid(data: bytes) -> bool:
    """Every line parses as strict JSON (no NaN, no infinity), is within the format's limits
    and is valid under specs/trace.schema.json with strict integers."""
    return first_invalid_line(data) is None


def _step_line(data: bytes, step: int) -> int | None:
    """The line of step record ``step`` in ``data`` (as far as lines parse)."""
    for n, line in enumerate(data.split(b"\n"), 1):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and obj.get("record") == "step" and obj.get("i") == step:
            return n
    return None


def _mismatch_line(cmd: str, o: Outcome, data: bytes) -> int | None:
    """Where a replay mismatch or a diff divergence was found (its line in ``data``)."""
    text = o.stdout
    if cmd == "replay":
        m = re.search(r"mismatch at step \d+ \(line (\d+)\)", text)
        return int(m.group(1)) if m else None
    m = re.search(r"first divergence (at|after) step (-?\d+)", text)
    if m is None:
        return None
    k = int(m.group(2)) + (1 if m.group(1) == "after" else 0)
    return _step_line(data, k) or _step_line(data, k - 1)


class Outcome:
    def __init__(
        self, code: int | None, stderr: str, stdout: str, escaped: BaseException | None
    ) -> None:
        self.code = code
        self.stderr_lines = [x for x in stderr.splitlines() if x.strip()]
        self.stdout = stdout
        self.escaped = escaped

    def __repr__(self) -> str:
        what = (
            f"escaped {type(self.escaped).__name__}: {self.escaped}"
            if self.escaped
            else f"exit {self.code}"
        )
        return f"<{what}; stderr {self.stderr_lines[:3]!r}>"


def judge(argv: list[str]) -> Outcome:
    """``steploop ARGV`` in-process: exit status, stderr, and any exception that escaped main
    (what a user sees as a traceback)."""
    from steploop.effects.cli import main

    # strict UTF-8 like a terminal's stdout (a StringIO would take a lone surrogate);
    # stderr with backslashreplace, as Python's own
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(raw_out, encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(raw_err, encoding="utf-8", errors="backslashreplace")
    escaped: BaseException | None = None
    code: int | None = None
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv, out)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # a traceback
            escaped = e
    for stream in (out, err):
        try:
            stream.flush()
        except UnicodeEncodeError as e:  # what was printed could not be written
            escaped = escaped or e
    text_out = raw_out.getvalue().decode("utf-8", "replace")
    return Outcome(code, raw_err.getvalue().decode("utf-8", "replace"), text_out, escaped)


def one_line_error(o: Outcome, name: str) -> bool:
    """Exit 2 and exactly one stderr line, naming the file (and, for a line, FILE:LINE)."""
    return (
        o.escaped is None and o.code == 2 and len(o.stderr_lines) == 1 and name in o.stderr_lines[0]
    )


COMMANDS = ("replay", "show", "stats", "diff", "resume")
SCRIPT = [{"type": "reply", "text": "ok"}] * 3


def violations(data: bytes, golden: Path, tmp: Path) -> dict[str, str]:
    """Run every trace command on the trace ``data`` (mutated from ``golden``) and return, per
    command, what it did wrong: an exception that escaped, exit 0 on a trace that is not
    schema-valid, an error that is not exit 2 with one line naming the file, or a replay
    mismatch (exit 1) reported for a trace that is not even valid."""
    d = tmp / "traces"
    d.mkdir(exist_ok=True)
    path = d / "mutated.jsonl"
    path.write_bytes(data)
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    bad_line = first_invalid_line(data)
    # what resume reads: a last line cut inside its record dropped; one that only lost its
    # newline kept (the newline added), trace-format.md §8
    cut = data if bad_line is None else data[: data.rfind(b"\n") + 1]
    resumable = first_invalid_line(cut) is None if cut else False
    found: dict[str, str] = {}
    for cmd in COMMANDS:
        if cmd == "resume":
            path.write_bytes(data)  # a fresh copy: a resume appends to it
            argv = ["resume", str(path), "--scripted", str(script), "--workspace", str(tmp)]
            argv.append("--yes")  # no permission prompt on a terminal
        elif cmd == "stats":
            argv = ["stats", str(d)]
        elif cmd == "diff":
            argv = ["diff", str(golden), str(path)]
        else:
            argv = [cmd, str(path)]
        valid = resumable if cmd == "resume" else bad_line is None
        o = judge(argv)
        bad: str | None = None
        if o.escaped is not None:
            bad = "traceback"
        elif cmd == "stats":  # the directory's only trace: read (exit 0) or skipped (exit 2)
            skipped = any("skipped" in x and str(path) in x for x in o.stderr_lines)
            if o.code not in (0, 2) or (o.code == 2) != skipped:
                bad = "bad_exit"
            elif not valid and not skipped:
                bad = "accepted_invalid"
        elif o.code == 0 and not valid:
            bad = "accepted_invalid"
        elif o.code == 1 and cmd in ("replay", "diff"):
            # a mismatch is the truth when it was found before the first invalid line
            where = _mismatch_line(cmd, o, data)
            if bad_line is not None and (where is None or where >= bad_line):
                bad = "mismatch_on_invalid"
        elif o.code == 2 and not one_line_error(o, str(path)):
            if not (valid and cmd == "resume"):  # a valid trace resume refuses (it ended, ...)
                bad = "not_one_line"
        elif o.code not in (0, 2) and not (cmd == "resume" and valid):
            bad = "bad_exit"  # (a resumed run ends with its Terminal's status: 3 api error, ...)
        if bad is not None:
            found[cmd] = f"{bad}: {o!r:.300}"
    return found


def sweep(n: int, seed: int = 0) -> dict[str, Any]:
    """Mutate ``n`` traces; run every trace command on each; count what went wrong."""
    rng = random.Random(seed)
    counts: dict[str, int] = {"traces": 0, "schema_invalid": 0}
    samples: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(n):
            name = rng.choice(list(MUTATIONS))
            golden = rng.choice(GOLDEN)
            data = MUTATIONS[name](golden.read_bytes(), rng)
            counts["traces"] += 1
            counts["schema_invalid"] += not schema_valid(data)
            for cmd, what in violations(data, golden, Path(tmp)).items():
                key = f"{cmd}_{what.split(':')[0]}"
                counts[key] = counts.get(key, 0) + 1
                if len(samples.setdefault(key, [])) < 5:
                    samples[key].append(f"{name}: {what}")
    return {"counts": counts, "samples": samples}


if __name__ == "__main__":  # pragma: no cover - a measurement, not a test
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    if "--seed" in sys.argv:
        args.remove(str(seed))
    result = sweep(int(args[0]) if args else 500, seed)
    print(json.dumps(result, indent=1))
