"""Importing one session file: threads, turns, traces and their reports (specs/import.md).

:func:`import_file` reads a Claude Code session file, follows each of its threads, cuts them into
user turns, drives the machine through each turn (:class:`~steploop.effects.importer.driver.TurnDriver`),
compares what it wrote with the transcript and records the turn as a steploop trace: one trace
per user turn (specs/import.md §3 says why), named ``<file stem>[.side<k>].t<NNN>.jsonl``.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

from steploop.effects.importer.chain import Thread, threads
from steploop.effects.importer.compare import COMPARED_KINDS, Divergence, first_difference
from steploop.effects.importer.driver import SIBLING_CANCEL_PREFIX, UNKNOWN_TOOL_PREFIX, TurnDriver
from steploop.effects.importer.infer import config_for, profile_basis, turn_version
from steploop.effects.importer.places import (
    Children,
    ThreadReport,
    children_of,
    link_sidechains,
    place_provenance,
    thread_report,
)
from steploop.effects.importer.segment import Item, Segment, segments
from steploop.effects.importer.source import Problem, SourceFile, read_source
from steploop.effects.importer.tracing import Steps, write_trace
from steploop.effects.trace import make_provenance
from steploop.reducer import LoopConfig, Request, Session
from steploop.reducer.conversation import Conversation
from steploop.reducer.messages import AssistantMessage, TextBlock, ToolResultBlock, UserMessage

__all__ = [
    "IMPORTER",
    "VERDICTS",
    "FileReport",
    "TurnReport",
    "Verdict",
    "import_file",
    "turn_driver",
]

#: The importer's name and rule-set version, written into every trace's provenance.
IMPORTER = "steploop-import/1"

Verdict: TypeAlias = Literal["reproduced", "reproduced-to-cut", "diverged"]
"""A turn's verdict (IMP-19, IMP-22): it ended and the machine wrote what the transcript holds;
the transcript cuts it off and up to the cut the machine wrote what it holds; or neither."""

#: The verdicts, as the report and the table name them.
VERDICTS: dict[str, str] = {
    "reproduced": "reproduced",
    "reproduced-to-cut": "reproduced up to the cut",
    "diverged": "diverged",
}

#: Kinds of item whose message joins the conversation the next turn starts from (IMP-9).
_CONVERSATION_KINDS = frozenset(
    {
        "candidate",
        "inserted",
        "block",
        "api_error",
        "result",
        "interrupt",
        "stop_feedback",
        "compact_summary",
        "machine_attachment",
        "stop_prevent",
        "hook_stop",
    }
)


@attrs.define
class TurnReport:
    """One user turn: where it came from, what trace it became, whether it reproduced."""

    file: str
    thread: str
    session_id: str | None
    turn: int
    lines: tuple[int, int]
    version: str
    prompt: str
    trace: str | None
    steps: int
    terminal: str | None
    compared: int
    reproduced: bool
    divergence: Divergence | None
    inferred: dict[str, int]
    left_out: dict[str, int]
    verdict: Verdict = "diverged"
    cut: str | None = None  # where the transcript cuts the turn off (IMP-22)
    chain: int = 1  # the chain of the thread's path its prompt is on (IMP-23)
    profile: str = "claude_code_2_1_88"  # the profile the turn ran under (VER-0)
    basis: str = ""  # how that profile was chosen (VER-0)

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=True)
        d["lines"] = list(self.lines)
        return d


@attrs.define
class FileReport:
    file: str
    transcript: bool
    records: int
    threads: int
    turns: list[TurnReport] = attrs.field(factory=list)
    problems: list[Problem] = attrs.field(factory=list)
    counts: dict[str, int] = attrs.field(factory=dict)
    thread_list: list[ThreadReport] = attrs.field(factory=list)
    #: the sub-agent calls of this file's conversations and the sidechains they started
    children: list[dict[str, Any]] = attrs.field(factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "transcript": self.transcript,
            "records": self.records,
            "threads": self.threads,
            "thread_list": [t.to_json() for t in self.thread_list],
            "children": self.children,
            "counts": self.counts,
            "problems": [
                {"line": p.line, "severity": p.severity, "message": p.message}
                for p in self.problems
            ],
            "turns": [t.to_json() for t in self.turns],
        }


def _short(text: str, n: int = 70) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _ranges(steps: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``."""
    out: list[str] = []
    start = prev = None
    for s in sorted(set(steps)):
        if start is None:
            start = prev = s
        elif prev is not None and s == prev + 1:
            prev = s
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = s
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


def _prompt(item: Item) -> str | tuple[Any, ...]:
    m = item.message
    assert isinstance(m, UserMessage)
    if len(m.content) == 1 and isinstance(m.content[0], TextBlock):
        return m.content[0].text
    return m.content


def _largest_context(items: list[Item]) -> int:
    best = 0
    for it in items:
        m = it.message
        if isinstance(m, AssistantMessage) and m.usage is not None:
            best = max(best, m.usage.total)
    return best


def _query_source(src: SourceFile, thread: Thread) -> str:
    if thread.kind == "main":
        return "repl_main_thread"
    if (thread.agent_id or "").startswith("acompact") or Path(src.name).name.startswith(
        "agent-acompact"
    ):
        return "compact"  # IMP-13: a compaction fork
    return f"agent:{thread.agent_id or 'sidechain'}"


class TraceNames:
    """The trace names of one import: a file's traces share its stem (``<stem>.t001``,
    ``<stem>.side1.t001``, unique within the file), so only stems are remembered: a stem an
    earlier file of the import took becomes ``<stem>-2``, ``<stem>-3``, ... One entry per file,
    not per trace."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.used: set[str] = set()

    def stem(self, stem: str) -> str:
        name, n = stem, 2
        while name in self.used:
            name = f"{stem}-{n}"
            n += 1
        self.used.add(name)
        return name


def _in_line_order(problems: list[Problem]) -> list[Problem]:
    """A file's problems as a reader meets them: the file's own first, then by line (the
    passes that find them, reading, the chain, the turns, go through the file separately)."""
    return sorted(problems, key=lambda p: -1 if p.line is None else p.line)


def import_file(
    path: str | Path,
    out_dir: Path | None,
    *,
    name: str | None = None,
    names: TraceNames | None = None,
    on_turn: Callable[[float], None] | None = None,
    children: Children | None = None,
    profile: str | None = None,
) -> FileReport:
    """Import one session file; traces go to ``out_dir`` (None: compare only, write nothing).
    ``on_turn(fraction)``: after each turn, the fraction of the file's lines read so far.
    ``children``: the sidechains of other files imported before this one, by session (the
    report of a session's own file lists them beside the calls that started them).
    ``profile``: run every turn under this named profile, not its version's (VER-0)."""
    src = read_source(path, name)
    report = FileReport(
        file=src.name,
        transcript=src.is_transcript,
        records=src.lines,
        threads=0,
        counts=dict(src.counts),
    )
    if not src.is_transcript:
        report.problems = _in_line_order(src.problems)
        return report
    try:
        ths = threads(src)
    except Exception as e:  # a bug of the importer must not end the import with a traceback
        src.problem(None, f"the importer failed following the chain ({type(e).__name__}: {e})")
        report.problems = _in_line_order(src.problems)
        return report
    report.threads = len(ths)
    parents = link_sidechains(src, ths)
    report.thread_list = [thread_report(src, th, parents.get(k)) for k, th in enumerate(ths)]
    src.index.release_chain()  # the turns need only where each record is
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    if names is None and out_dir is not None:
        names = TraceNames(out_dir)
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(src.name).stem)
    if names is not None:
        stem = names.stem(stem)
    for th, info in zip(ths, report.thread_list, strict=True):
        try:
            _import_turns(src, th, info, stem, out_dir, report, on_turn, profile)
        except OSError as e:  # the output folder: full, read-only, ...
            src.problem(None, f"cannot write the traces: {e.strerror or e}")
        except Exception as e:  # a bug of the importer must not end the import with a traceback
            src.problem(
                src.index.line[th.rows[0]] if th.rows else None,
                f"the importer failed on this thread ({type(e).__name__}: {e}); its remaining "
                "turns are not imported (please report this)",
            )
    report.children = children_of(src, report.thread_list, children)
    if children is not None and not any(t.kind == "main" for t in ths):
        for info in report.thread_list:  # a sub-agent's file: its session's file lists it
            if info.kind == "sidechain":
                children.add(src.name, info)
    report.problems = _in_line_order(src.problems)
    return report


def _import_turns(
    src: SourceFile,
    th: Thread,
    info: ThreadReport,
    stem: str,
    out_dir: Path | None,
    report: FileReport,
    on_turn: Callable[[float], None] | None = None,
    profile: str | None = None,
) -> None:
    place = place_provenance(info)
    base = make_provenance(source=src.name, importer=IMPORTER) if out_dir is not None else {}
    for turn in _import_thread(src, th, profile, keep_steps=out_dir is not None):
        rep, driver, cfg, request, session, _seg, steps = turn
        path_out: Path | None = None
        if out_dir is not None and driver.started:  # a refused start has no trace (M-HIST-1)
            path_out = out_dir / f"{stem}{th.tag}.t{rep.turn:03d}.jsonl"
            prov = dict(
                base,
                source=src.name,
                source_lines=f"{rep.lines[0]}-{rep.lines[1]}",
                session_id=rep.session_id,
                thread=rep.thread,
                chain=rep.chain,
                **place,
                claude_code_version=rep.version,
                profile_basis=rep.basis,
                importer=IMPORTER,
                turn=rep.turn,
                reproduced=rep.reproduced,
                verdict=rep.verdict,
                cut=rep.cut,
                divergence=rep.divergence.describe() if rep.divergence else None,
                cause=rep.divergence.cause if rep.divergence else None,
                inferred=_inferred_text(driver.inferred),
            )
            assert steps is not None
            write_trace(path_out, cfg, request, session, prov, steps)
            rep.trace = path_out.name
            info.traces.append(path_out.name)
        info.turns.append(rep.turn)
        report.turns.append(rep)
        if on_turn is not None and src.lines:
            on_turn(min(1.0, rep.lines[1] / src.lines))
        del turn, driver, cfg, request, session, _seg, steps  # release the turn before the next


def _inferred_text(inferred: dict[str, list[int]]) -> str:
    """IMP-20: ``"IMP-12 steps 1,4-6; IMP-15 steps 2,7"`` (the steps whose event a rule made)."""
    parts = [f"{rule} steps {_ranges(steps)}" for rule, steps in sorted(inferred.items()) if steps]
    return "; ".join(parts) if parts else "none"


def _import_thread(
    src: SourceFile, th: Thread, profile: str | None = None, *, keep_steps: bool = False
) -> Iterator[
    tuple[TurnReport, TurnDriver, LoopConfig, Request, Session | None, Segment, Steps | None]
]:
    """The thread's turns, each driven and compared; ``keep_steps``: with the steps the
    machine took (for the trace writer), else None. ``profile``: every turn's named profile
    instead of its records' version's."""
    conv = Conversation.empty()
    queue: deque[str] = deque()
    model: str | None = None
    largest = 0
    turn_no = 0
    attachments = src.counts.get("attachment", 0) > 0
    thread_name = th.name
    # a branch's turns before its first record of its own are another thread's (IMP-23)
    own_line = src.index.line[th.rows[th.own_from]] if th.own_from < len(th.rows) else 0
    roots = [c.root for c in th.chains]
    cut_into = segments(src, th)
    following = next(cut_into, None)
    while following is not None:
        seg, following = following, next(cut_into, None)
        # IMP-22: the transcript goes on after this segment when another one follows; records
        # that make none (a tool's hook progress written after its result) are no sign of it
        more = following is not None
        _mark_queue(seg, queue)
        if seg.kind == "history":
            conv = _extend(conv, seg.items)
            continue
        turn_no += 1
        items = seg.items
        first_model = next(
            (
                it.message.model
                for it in items
                if it.kind == "block" and isinstance(it.message, AssistantMessage)
            ),
            None,
        )
        model = first_model or model
        largest = max(largest, _largest_context(items))
        if items[-1].line < own_line:  # shared with an earlier thread, imported there
            conv = _extend(conv, items)
            continue
        version = turn_version([str(it.record.get("version") or "") for it in items])
        cfg = config_for(
            model,
            query_source=_query_source(src, th),
            agent_id=th.agent_id if th.kind != "main" else None,
            largest_context=largest,
            version=version,
            profile_name=profile,
        )
        request = Request(prompt=_prompt(items[0]), at_ms=items[0].at_ms)
        session = Session(conversation=conv) if conv.length else None
        driver = turn_driver(items, cfg, request, session)
        steps = Steps() if keep_steps else None
        driver.run(items[1:], may_answer_empty=more, observer=steps)
        expected = [it for it in items if it.kind in COMPARED_KINDS]
        compared, div = first_difference(expected, driver.emitted, compare_attachments=attachments)
        cut: str | None = None
        verdict: Verdict = "diverged"
        if div is None and driver.cut:
            # IMP-22: everything the transcript holds of the turn, written alike; the machine
            # waits for what the transcript never wrote
            cut = f"after line {seg.lines[1]}: {driver.stuck}"
            verdict = "reproduced-to-cut"
        elif div is None and driver.terminal is not None:
            verdict = "reproduced"
        elif driver.stuck is not None and (div is None or div.step is None):
            # the machine wrote nothing more because the driver could not go on: say why
            div = Divergence(
                line=driver.stuck_line,
                step=None,
                expected=div.expected if div is not None else "the turn to go on",
                got=driver.stuck,
            )
        if div is not None:
            from steploop.effects.importer.causes import explain

            div = explain(div, driver, items)
        left_out = Counter(it.kind for it in items if it.kind not in COMPARED_KINDS)
        versions = sorted(
            {str(it.record.get("version")) for it in items if it.record.get("version")}
        )
        rep = TurnReport(
            file=src.name,
            thread=thread_name,
            session_id=th.session_id,
            turn=turn_no,
            lines=seg.lines,
            version="..".join([versions[0], versions[-1]])
            if len(versions) > 1
            else (versions[0] if versions else "?"),
            prompt=_short(items[0].text or "(blocks)"),
            trace=None,
            steps=driver.steps,
            terminal=driver.terminal.TAG if driver.terminal is not None else None,
            compared=compared,
            reproduced=verdict == "reproduced",
            divergence=div,
            inferred={k: len(v) for k, v in sorted(driver.inferred.items())},
            left_out=dict(left_out),
            verdict=verdict,
            cut=cut,
            chain=max(1, bisect.bisect_right(roots, seg.lines[0])),
            profile=cfg.profile_name,
            basis=profile_basis(version, profile),
        )
        yield rep, driver, cfg, request, session, seg, steps
        del driver, rep, request, session, steps  # one turn at a time: release it first
        conv = _extend(conv, items)


def turn_driver(
    items: list[Item], config: LoopConfig, request: Request, session: Session | None
) -> TurnDriver:
    """The driver (the transcript as a world) for a turn's records, with what it must know
    of them ahead (IMP-12: unknown tools, responses whose failing call cancelled siblings)."""
    unknown = frozenset(
        b.tool_use_id
        for it in items
        if it.kind == "result" and isinstance(it.message, UserMessage)
        for b in it.message.content
        if isinstance(b, ToolResultBlock) and b.content.startswith(UNKNOWN_TOOL_PREFIX)
    )
    return TurnDriver(
        config, request, session, unknown_tools=unknown, sibling_cancelling=_sibling_rounds(items)
    )


def _sibling_rounds(items: list[Item]) -> frozenset[str]:
    """IMP-12: the responses in which a failing call cancelled its siblings."""
    owner: dict[str, str] = {}
    for it in items:
        if it.kind == "block" and isinstance(it.message, AssistantMessage):
            for b in it.message.content:
                if hasattr(b, "name") and hasattr(b, "id"):
                    owner[b.id] = it.message.response_id
    out: set[str] = set()
    for it in items:
        if it.kind == "result" and isinstance(it.message, UserMessage):
            for b in it.message.content:
                if isinstance(b, ToolResultBlock) and b.content.startswith(SIBLING_CANCEL_PREFIX):
                    if b.tool_use_id in owner:
                        out.add(owner[b.tool_use_id])
    return frozenset(out)


def _mark_queue(seg: Segment, queue: deque[str]) -> None:
    """IMP-18: pair queue operations; a removal inside a turn becomes a ``command`` item."""
    if seg.kind == "turn":
        head = seg.items[0].text
        if head is not None and head in queue:
            queue.remove(head)  # the queued prompt became this turn's prompt
    for it in seg.items:
        if it.kind != "queue":
            continue
        op = it.record.get("operation")
        content = it.record.get("content")
        if op == "enqueue" and isinstance(content, str):
            queue.append(content)
        elif op in ("remove", "dequeue") and queue:
            text = queue.popleft()
            if seg.kind == "turn" and not text.lstrip().startswith("/"):
                it.kind = "command"
                it.command = text


def _extend(conv: Conversation, items: list[Item]) -> Conversation:
    """IMP-9: the conversation the next turn starts from, as the transcript has it."""
    for it in items:
        if (it.kind in ("compact", "manual_compact") or it.restart) and it.message is not None:
            conv = Conversation.of([it.message])
        elif it.kind in _CONVERSATION_KINDS and it.message is not None:
            conv = conv.append(it.message)
    return conv
