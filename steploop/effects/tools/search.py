"""Glob and Grep: tree walks confined to the workspace (specs/ E-CONFINE-1), Grep with a
linear-time regex engine (specs/ E-GREP-1, :mod:`steploop.effects.tools.regex`)."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, ClassVar, Final

import attrs

from steploop.effects.tools.base import ToolContext, ToolOutput
from steploop.effects.tools.confine import Refused, Walker, os_message, show_name
from steploop.effects.tools.fileio import (
    Guard,
    ToolError,
    WorkspaceTool,
    guarded,
    open_regular,
    schema,
)
from steploop.effects.tools.regex import PatternError, Regex, compile_regex
from steploop.reducer.events import InterruptBehavior

__all__ = [
    "FILE_TYPES",
    "Glob",
    "GlobPattern",
    "Grep",
    "GrepOptions",
    "check_glob_pattern",
    "grep_visit",
    "link_target_file",
]

MAX_GREP_LINE_CHARS: Final = 500
#: Directories a Grep walk never enters (version control), as Claude Code excludes them.
SKIPPED_DIRS: Final = frozenset({".git", ".hg", ".svn", ".bzr", ".jj", ".sl"})
#: Grep's ``type`` filter: ripgrep's names for common file types and their globs.
FILE_TYPES: Final[Mapping[str, tuple[str, ...]]] = {
    "c": ("*.[chH]", "*.[chH].in", "*.cats"),
    "cpp": ("*.[ChH]", "*.cc", "*.[ch]pp", "*.[ch]xx", "*.hh", "*.inl", "*.[ChH].in"),
    "cs": ("*.cs",),
    "css": ("*.css", "*.scss"),
    "go": ("*.go",),
    "html": ("*.htm", "*.html", "*.ejs"),
    "java": ("*.java", "*.jsp", "*.jspx", "*.properties"),
    "js": ("*.cjs", "*.js", "*.jsx", "*.mjs", "*.vue"),
    "json": ("*.json", "*.jsonl", "*.geojson", "*.sarif", "composer.lock"),
    "kotlin": ("*.kt", "*.kts"),
    "lua": ("*.lua",),
    "markdown": ("*.markdown", "*.md", "*.mdown", "*.mdwn", "*.mkd", "*.mkdn", "*.mdx"),
    "md": ("*.markdown", "*.md", "*.mdown", "*.mdwn", "*.mkd", "*.mkdn", "*.mdx"),
    "php": ("*.php", "*.php3", "*.php4", "*.php5", "*.phtml"),
    "py": ("*.py", "*.pyi"),
    "ruby": ("*.rb", "*.gemspec", "Gemfile", ".irbrc", "Rakefile"),
    "rust": ("*.rs",),
    "scala": ("*.scala", "*.sbt"),
    "sh": ("*.bash", "*.sh", "*.zsh", ".bashrc", ".bash_profile", ".zshrc", ".profile"),
    "sql": ("*.sql", "*.psql"),
    "swift": ("*.swift",),
    "toml": ("*.toml", "Cargo.lock"),
    "ts": ("*.cts", "*.mts", "*.ts", "*.tsx"),
    "txt": ("*.txt",),
    "xml": ("*.xml", "*.xml.dist", "*.dtd", "*.xsl", "*.xslt", "*.xsd", "*.svg"),
    "yaml": ("*.yaml", "*.yml"),
}
OUTPUT_MODES: Final = ("content", "files_with_matches", "count")


def check_glob_pattern(pattern: str) -> None:
    if not pattern:
        raise ToolError("pattern must not be empty")
    if pattern.startswith(("/", "~")) or "\x00" in pattern:
        raise ToolError(f"pattern must be relative to the search directory: {pattern}")
    if ".." in PurePosixPath(pattern).parts:
        raise ToolError(f"pattern must not contain '..': {pattern}")


def _capped(lines: list[str], cap: int, what: str) -> str:
    if len(lines) <= cap:
        return "\n".join(lines)
    shown = "\n".join(lines[:cap])
    return f"{shown}\n(results truncated: showing {cap} of {len(lines)} {what})"


GlobState = frozenset[int]


class GlobPattern:
    """A glob pattern as a matcher over path components, walked along a tree: a state is
    the set of pattern positions a directory has reached. ``**`` matches any number of
    directories (0 included), ``*``, ``?`` and ``[...]`` match within one name (names
    starting with a dot included, case-sensitively), as pathlib does on POSIX."""

    def __init__(self, pattern: str) -> None:
        parts = PurePosixPath(pattern).parts
        if not parts:
            raise ToolError(f"Invalid glob pattern {pattern!r}: it names no file")
        for part in parts:
            if "**" in part and part != "**":
                raise ToolError(
                    f"Invalid glob pattern {pattern!r}: Invalid pattern: '**' can only be an "
                    "entire path component"
                )
        self.parts = parts
        self._match = [
            None if part == "**" else re.compile(fnmatch.translate(part)).match for part in parts
        ]
        self.start: GlobState = self._closure(frozenset({0}))

    def _closure(self, state: frozenset[int]) -> GlobState:
        out = set(state)
        todo = list(state)
        while todo:
            i = todo.pop()
            if i < len(self.parts) and self._match[i] is None and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return frozenset(out)

    def visit(self, state: GlobState, name: str, is_dir: bool) -> tuple[GlobState | None, bool]:
        name = show_name(name)  # a pattern matches a name as the tools show it
        last = len(self.parts) - 1
        if not is_dir:
            return None, any(
                i == last and (m := self._match[i]) is not None and m(name) is not None
                for i in state
            )
        nxt: set[int] = set()
        for i in state:
            m = self._match[i] if i <= last else None
            if i <= last and m is None:
                nxt.add(i)  # "**" takes this directory and stays
            elif m is not None and i < last and m(name) is not None:
                nxt.add(i + 1)
        return (self._closure(frozenset(nxt)) if nxt else None), False


def link_target_file(walker: Walker, name: str) -> tuple[Walker, str] | None:
    """The regular file inside the workspace that the symlink ``name`` (met in a tree walk)
    leads to, followed by the confined walk: a walker standing in its directory, and its
    name; None if it leads nowhere, outside, or to anything but a regular file."""
    link = Walker(walker.root, walker.display(name), parent=walker)
    try:
        final = link.resolve_link(name)
        if final is not None and stat.S_ISREG(
            os.stat(final, dir_fd=link.top, follow_symlinks=False).st_mode
        ):
            return link, final
    except (Refused, OSError):
        pass
    link.close()
    return None


@attrs.frozen(kw_only=True)
class Glob(WorkspaceTool):
    """List files matching a glob pattern, as sorted workspace-relative paths."""

    name: ClassVar[str] = "Glob"
    description: ClassVar[str] = (
        "Find files by glob pattern (like '**/*.py' or 'src/*.ts') under path (default: the "
        "workspace). Returns matching file paths relative to the workspace, sorted."
    )
    input_schema: ClassVar[Mapping[str, Any]] = schema(
        {
            "pattern": {"type": "string", "description": "The glob pattern"},
            "path": {"type": "string", "description": "Directory to search in"},
        },
        ("pattern",),
    )
    max_result_chars: ClassVar[int | None] = 50_000
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern = str(input["pattern"])
        raw_dir = input.get("path")

        def work(guard: Guard) -> ToolOutput:
            check_glob_pattern(pattern)
            matcher = GlobPattern(pattern)
            found: set[str] = set()
            with Walker(self.workspace, "" if raw_dir is None else str(raw_dir)) as walker:
                if raw_dir is not None:
                    name = walker.walk(walker.split(str(raw_dir)))
                    if name is not None:
                        walker.enter(name)
                for name, is_link in walker.tree(
                    matcher.start, matcher.visit, stop=lambda: guard.cancelled
                ):
                    if is_link:
                        target = link_target_file(walker, name)
                        if target is None:
                            continue
                        target[0].close()
                    found.add(walker.display(name))
            guard.check()
            if not found:
                return ToolOutput(content="No files found")
            return ToolOutput(content=_capped(sorted(found), self.max_results, "files"))

        return await guarded(work)


def grep_visit(state: bool, name: str, is_dir: bool) -> tuple[bool | None, bool]:
    """Grep's tree walk: every file, every directory but version-control ones."""
    if is_dir:
        return (None if name in SKIPPED_DIRS else True), False
    return None, True


def _expand_braces(pattern: str) -> list[str]:
    """``a.{ts,tsx}`` as ``a.ts`` and ``a.tsx`` (nested groups too); unbalanced braces are
    taken literally."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner, parts, level, last = pattern[start + 1 : i], [], 0, 0
                for j, c in enumerate(inner):
                    level += (c == "{") - (c == "}")
                    if c == "," and level == 0:
                        parts.append(inner[last:j])
                        last = j + 1
                parts.append(inner[last:])
                head, tail = pattern[:start], pattern[i + 1 :]
                return [x for p in parts for x in _expand_braces(head + p + tail)]
    return [pattern]


def _file_filter(glob: str | None, file_type: str | None) -> Callable[[str], bool]:
    """Grep's ``glob`` and ``type`` filters over a workspace-relative path. ``glob`` holds
    one or more globs (separated by spaces, or commas outside braces; ``{a,b}`` alternatives;
    ``!`` excludes); a glob with ``/`` is matched against the path, else against the name."""
    include: list[str] = []
    exclude: list[str] = []
    for raw in (glob or "").split():
        for part in [raw] if "{" in raw and "}" in raw else raw.split(","):
            target = exclude if part.startswith("!") else include
            target.extend(_expand_braces(part.removeprefix("!")) if part.strip("!") else [])
    types: tuple[str, ...] = ()
    if file_type is not None:
        if file_type not in FILE_TYPES:
            known = ", ".join(sorted(FILE_TYPES))
            raise ToolError(f"unrecognized file type: {file_type} (known types: {known})")
        types = FILE_TYPES[file_type]

    def match(pattern: str, rel: str) -> bool:
        return fnmatch.fnmatchcase(rel if "/" in pattern else rel.rsplit("/", 1)[-1], pattern)

    def wanted(rel: str) -> bool:
        if include and not any(match(p, rel) for p in include):
            return False
        if any(match(p, rel) for p in exclude):
            return False
        return not types or any(match(p, rel) for p in types)

    return wanted


@attrs.frozen
class GrepOptions:
    """Grep's input, checked."""

    pattern: str
    mode: str = "content"
    ignore_case: bool = False
    line_numbers: bool = True
    before: int = 0
    after: int = 0
    multiline: bool = False

    @classmethod
    def of(cls, input: Mapping[str, Any]) -> GrepOptions:
        mode = str(input.get("output_mode", "content"))
        if mode not in OUTPUT_MODES:
            raise ToolError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, not {mode!r}")
        context = input.get("context", input.get("-C"))
        before = int(input.get("-B", 0) if context is None else context)
        after = int(input.get("-A", 0) if context is None else context)
        return cls(
            pattern=str(input["pattern"]),
            mode=mode,
            ignore_case=bool(input.get("-i", False)),
            line_numbers=bool(input.get("-n", True)),
            before=before,
            after=after,
            multiline=bool(input.get("multiline", False)),
        )


@attrs.frozen
class _Hits:
    """The matching lines of one file (0-based, in order) and, for content mode, its lines
    (UTF-8, split at line breaks: one more than the lines when the file ends with one)."""

    rel: str
    mtime_ns: int
    matched: list[int]
    lines: list[bytes]

    def line(self, n: int) -> str:
        text = self.lines[n].decode("utf-8")
        return text[:-1] if text.endswith("\r") else text

    @property
    def count(self) -> int:
        return len(self.lines) - (self.lines[-1:] == [b""])


def _content(hits: list[_Hits], opts: GrepOptions, cap: int) -> str:
    """ripgrep's lines: ``path:N:text`` for a matching line, ``path-N-text`` for context,
    ``--`` between groups that do not touch; at most ``cap`` matching lines."""
    out: list[str] = []
    left = cap
    context = opts.before or opts.after
    for hit in hits:
        matched = hit.matched[:left]
        left -= len(matched)
        is_match = set(matched)
        groups: list[list[int]] = []
        for m in matched:
            lo, hi = max(0, m - opts.before), min(hit.count - 1, m + opts.after)
            if groups and lo <= groups[-1][1] + 1:
                groups[-1][1] = max(groups[-1][1], hi)
            else:
                groups.append([lo, hi])
        for lo, hi in groups:
            if context and out:
                out.append("--")
            for n in range(lo, hi + 1):
                sep = ":" if n in is_match else "-"
                number = f"{n + 1}{sep}" if opts.line_numbers else ""
                out.append(f"{hit.rel}{sep}{number}{hit.line(n)[:MAX_GREP_LINE_CHARS]}")
        if left <= 0:
            break
    return "\n".join(out)


def _render(hits: list[_Hits], opts: GrepOptions, cap: int) -> str:
    total = sum(len(h.matched) for h in hits)
    if opts.mode == "count":
        files = sum(1 for h in hits if h.matched)
        rows = [f"{h.rel}:{len(h.matched)}" for h in hits if h.matched] or ["No matches found"]
        body = _capped(rows, cap, "files") if files else rows[0]
        noun = "occurrence" if total == 1 else "occurrences"
        return f"{body}\n\nFound {total} total {noun} across {files} file{'s' * (files != 1)}."
    if opts.mode == "files_with_matches":
        found = sorted((h for h in hits if h.matched), key=lambda h: (-h.mtime_ns, h.rel))
        if not found:
            return "No files found"
        head = f"Found {len(found)} file{'s' * (len(found) != 1)}"
        return f"{head}\n{_capped([h.rel for h in found], cap, 'files')}"
    if not total:
        return "No matches found"
    shown = _content(hits, opts, cap)
    if total > cap:
        return f"{shown}\n(results truncated at {cap} matches)"
    return shown


@attrs.frozen(kw_only=True)
class Grep(WorkspaceTool):
    """Search file contents with a regular expression (RE2, linear time), like ripgrep."""

    name: ClassVar[str] = "Grep"
    description: ClassVar[str] = (
        "Search the contents of text files for a regular expression (ripgrep's syntax, run by "
        "the linear-time engine RE2: no backreferences or look-around). path is a file or "
        "directory (default: the workspace); glob filters file names (like '*.py' or "
        "'*.{ts,tsx}'; a pattern with '/' is matched against the workspace-relative path; "
        "'!' excludes), type by file type (py, js, ts, rust, go, ...). output_mode 'content' "
        "(default) gives 'path:line:text' per matching line (-n false leaves out the numbers; "
        "-A, -B, -C/context add lines after, before, around), 'files_with_matches' the files, "
        "'count' the matching lines per file. -i ignores case; multiline lets . and a "
        "pattern match across lines."
    )
    input_schema: ClassVar[Mapping[str, Any]] = schema(
        {
            "pattern": {"type": "string", "description": "The regular expression"},
            "path": {"type": "string", "description": "File or directory to search"},
            "glob": {"type": "string", "description": "Only files whose name matches this"},
            "type": {"type": "string", "description": "Only files of this type (rg --type)"},
            "output_mode": {
                "type": "string",
                "description": "content (default), files_with_matches or count",
            },
            "-i": {"type": "boolean", "description": "Ignore case"},
            "-n": {"type": "boolean", "description": "Line numbers in content mode (default)"},
            "-A": {"type": "integer", "minimum": 0, "description": "Lines after each match"},
            "-B": {"type": "integer", "minimum": 0, "description": "Lines before each match"},
            "-C": {"type": "integer", "minimum": 0, "description": "Lines around each match"},
            "context": {"type": "integer", "minimum": 0, "description": "Same as -C"},
            "multiline": {"type": "boolean", "description": "Let matches span lines"},
        },
        ("pattern",),
    )
    max_result_chars: ClassVar[int | None] = 50_000
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw_path = input.get("path")
        file_glob = input.get("glob")
        file_type = input.get("type")

        def work(guard: Guard) -> ToolOutput:
            opts = GrepOptions.of(input)
            try:
                regex = compile_regex(
                    opts.pattern, ignore_case=opts.ignore_case, multiline=opts.multiline
                )
            except PatternError as exc:
                raise ToolError(str(exc)) from exc
            wanted = _file_filter(
                None if file_glob is None else str(file_glob),
                None if file_type is None else str(file_type),
            )
            hits: list[_Hits] = []
            limit = self.max_results + 1  # one more than shown, to know we truncated
            counted = 0

            def search(walker: Walker, name: str, rel: str, explicit: bool) -> None:
                nonlocal counted
                label = raw if explicit else rel
                try:
                    data, st = open_regular(
                        walker, name, label, self.max_file_bytes, self.allow_hard_links
                    )
                    data.decode("utf-8")
                except Refused as exc:
                    if explicit and "hard links" in str(exc):
                        raise
                    return
                except (ToolError, OSError, UnicodeDecodeError):
                    return
                matched = _matched_lines(regex, data, opts, guard)
                if matched:
                    lines = data.split(b"\n") if opts.mode == "content" else []
                    hits.append(_Hits(rel, st.st_mtime_ns, matched, lines))
                    counted += len(matched)

            def enough() -> bool:
                return guard.cancelled or (opts.mode == "content" and counted >= limit)

            raw = "" if raw_path is None else str(raw_path)
            with Walker(self.workspace, raw) as walker:
                single: str | None = None
                if raw_path is not None:
                    name = walker.walk(walker.split(raw))
                    if name is not None:
                        try:
                            st = os.stat(name, dir_fd=walker.top, follow_symlinks=False)
                        except OSError as exc:
                            raise ToolError(os_message(exc, raw)) from exc
                        if stat.S_ISDIR(st.st_mode):
                            walker.enter(name)
                        else:
                            single = name
                if single is not None:
                    rel = walker.display(single)
                    if wanted(rel):
                        search(walker, single, rel, explicit=True)
                else:
                    for name, is_link in walker.tree(True, grep_visit, stop=enough):
                        rel = walker.display(name)
                        if not wanted(rel):
                            continue
                        if not is_link:
                            search(walker, name, rel, explicit=False)
                            continue
                        target = link_target_file(walker, name)
                        if target is not None:
                            with target[0] as link:
                                search(link, target[1], rel, explicit=False)
            guard.check()
            return ToolOutput(content=_render(hits, opts, self.max_results))

        return await guarded(work)


def _matched_lines(regex: Regex, data: bytes, opts: GrepOptions, guard: Guard) -> list[int]:
    """The 0-based lines of ``data`` that ``regex`` matches (every line a multiline match
    spans); only the first when only the file's name is wanted."""
    seen: set[int] = set()
    ordered: list[int] = []
    spans: Iterable[tuple[int, int]] = regex.lines(data)
    for first, last in spans:
        guard.check()
        for line in range(first, last + 1):
            if line not in seen:
                seen.add(line)
                ordered.append(line)
        if opts.mode == "files_with_matches":
            break
    return ordered
