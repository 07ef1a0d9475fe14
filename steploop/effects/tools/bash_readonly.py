"""Which Bash commands only read, and so run concurrently with other safe calls (specs/
E-BASH-RO-1).

Claude Code's Bash tool is concurrency-safe exactly when its command is read-only
(``isConcurrencySafe`` is ``isReadOnly``), decided by ``checkReadOnlyConstraints``
(2.1.88: ``tools/BashTool/readOnlyValidation.ts`` with ``bashSecurity.ts``). This module
follows its structure:

1. The whole command is refused when bash would expand or redirect something the check
   cannot see through: command or process substitution (``$(``, ``${``, backticks, ``<(``,
   ``>(``), a variable (``$HOME``, ``$1``) outside single quotes, an unquoted glob (``*``,
   ``?``, ``[``, ``]``), grouping (``(``, ``)``, ``{``, ``}``), a background ``&``, a line
   break or a comment outside quotes, and any redirection but the three Claude Code strips as
   harmless: `` 2>&1``, ``[012]>/dev/null`` and ``</dev/null`` (each followed by a space or
   the end). So ``find . -name '*.py' 2>/dev/null`` and ``ls 2>&1 | head`` are read-only,
   ``cat a > b`` and ``echo $HOME`` are not.
2. What remains is split at ``&&``, ``||``, ``;`` and ``|``; every part must be a read-only
   program invocation: its first word (no path, no ``VAR=value`` prefix) on the table below,
   without the options that write, run other programs or change the system (``find
   -exec``/``-delete``, ``sort -o``, ``tree -o``, ``date -s``, ``git diff --output``, ...).

The table holds the programs of Claude Code's allowlist that a coding session meets (its full
list also validates every flag of each program); anything not on it is not read-only, which
only ever costs concurrency, never safety.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["is_read_only_command"]

#: Programs read-only whatever their arguments (Claude Code's READONLY_COMMANDS and the
#: allowlisted programs with no writing option).
_ANY_ARGS: Final = frozenset(
    {
        "basename", "cal", "cat", "cmp", "column", "comm", "cut", "df", "diff", "dirname",
        "du", "echo", "expand", "expr", "false", "fmt", "fold", "free", "getconf", "grep",
        "groups", "head", "hexdump", "id", "locale", "ls", "md5sum", "nl", "nproc", "numfmt",
        "od", "paste", "pgrep", "pr", "readlink", "realpath", "rev", "seq", "sha1sum",
        "sha256sum", "sleep", "stat", "strings", "tac", "tail", "test", "tr", "true", "tsort",
        "type", "uname", "unexpand", "uptime", "wc", "which",
    }
)  # fmt: skip
#: Programs read-only unless given one of these options (a prefix ``--opt=`` counts too).
_BAD_OPTIONS: Final[dict[str, frozenset[str]]] = {
    "find": frozenset(
        {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fls",
         "-fprintf"}
    ),
    "sort": frozenset(
        {"-o", "--output", "-T", "--temporary-directory", "--compress-program", "--files0-from"}
    ),
    "tree": frozenset({"-o", "--output", "-R"}),
    "file": frozenset({"-C", "--compile"}),
    "rg": frozenset({"--pre", "--pre-glob"}),
    "fd": frozenset({"-x", "--exec", "-X", "--exec-batch", "-l", "--list-details"}),
    "fdfind": frozenset({"-x", "--exec", "-X", "--exec-batch", "-l", "--list-details"}),
    "info": frozenset({"-o", "--output", "--dribble", "--init-file", "--restore"}),
    "ss": frozenset({"-K", "--kill", "-D", "--diag", "-F", "--filter", "-N", "--net"}),
    "base64": frozenset(),
    "netstat": frozenset(),
    "lsof": frozenset({"-D"}),
}  # fmt: skip
#: ``git`` subcommands that only read, and the options that would make them write or run.
_GIT_READ_ONLY: Final = frozenset(
    {"status", "log", "diff", "show", "ls-files", "blame", "rev-parse", "describe", "shortlog",
     "ls-tree", "cat-file", "grep", "help"}
)  # fmt: skip
_GIT_BAD_OPTIONS: Final = frozenset(
    {"--output", "--ext-diff", "-O", "--open-files-in-pager", "--exec-path", "--config-env",
     "-c", "--upload-pack", "--receive-pack", "--exec"}
)  # fmt: skip
#: What ``xargs`` may run (Claude Code's SAFE_TARGET_COMMANDS_FOR_XARGS) and its options
#: that take a value.
_XARGS_TARGETS: Final = frozenset({"echo", "printf", "wc", "grep", "head", "tail"})
_XARGS_VALUED: Final = frozenset({"-I", "-n", "-P", "-L", "-s", "-E", "-d"})
_XARGS_FLAGS: Final = frozenset({"-0", "-t", "-r", "-x"})
#: Whole commands read-only as written (Claude Code's anchored regexes).
_EXACT: Final = frozenset(
    {"pwd", "whoami", "alias", "arch", "ip addr", "node -v", "node --version",
     "python --version", "python3 --version", "claude -h", "claude --help", "docker ps",
     "docker images", "history"}
)  # fmt: skip

_VAR_START: Final = re.compile(r"[A-Za-z_@*#?!$0-9-]")
#: The redirections Claude Code strips as harmless (bashSecurity's stripSafeRedirections).
_SAFE_REDIRECTIONS: Final = (
    re.compile(r"\s+2\s*>&\s*1(?=\s|$)"),
    re.compile(r"[012]?\s*>\s*/dev/null(?=\s|$)"),
    re.compile(r"\s*<\s*/dev/null(?=\s|$)"),
)
_JQ_BAD_OPTIONS: Final = frozenset(
    {"-f", "--from-file", "--rawfile", "--slurpfile", "--run-tests", "-L", "--library-path"}
)
_ENV: Final = re.compile(r"\benv\b")
_INTERFACE: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_-]*")
_SED_PRINT: Final = re.compile(r"(?:\d+|\$)?(?:,(?:\d+|\$))?p")
_SED_SUBSTITUTE: Final = re.compile(
    r"s([^\w\s\\])(?:(?!\1)[^\\]|\\.)*\1(?:(?!\1)[^\\]|\\.)*\1[gpiI0-9]*"
)


def _unquoted(command: str) -> list[bool] | None:
    """Per character: True where bash sees it unquoted and unescaped; None when a quote is
    left open or a ``$``/backtick expansion is live (outside single quotes)."""
    mask: list[bool] = []
    single = double = escaped = False
    for i, ch in enumerate(command):
        if escaped:
            escaped = False
            mask.append(False)
            continue
        if single:
            single = ch != "'"
            mask.append(False)
            continue
        if ch == "\\":
            escaped = True
            mask.append(False)
            continue
        if ch == "'" and not double:
            single = True
            mask.append(False)
            continue
        if ch == '"':
            double = not double
            mask.append(False)
            continue
        if ch == "`" or (ch == "$" and _VAR_START.match(command, i + 1)):
            return None
        if ch == "$" and command[i + 1 : i + 2] in ("(", "{"):
            return None
        mask.append(not double)
    return None if single or double or escaped else mask


def _segments(command: str) -> list[str] | None:
    """The command's simple commands, split at ``&&``, ``||``, ``;`` and ``|`` after the
    harmless redirections are taken out; None when anything else would need bash to run."""
    mask = _unquoted(command)
    if mask is None:
        return None
    drop = [False] * len(command)
    for pattern in _SAFE_REDIRECTIONS:
        for match in pattern.finditer(command):
            span = range(match.start(), match.end())
            if all(mask[i] or command[i].isspace() for i in span):
                for i in span:
                    drop[i] = True
    segments: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(command):
        ch = command[i]
        if drop[i]:
            current.append(" ")
            i += 1
            continue
        if not mask[i]:
            current.append(ch)
            i += 1
            continue
        pair = command[i : i + 2]
        if pair in ("&&", "||"):
            segments.append("".join(current))
            current = []
            i += 2
            continue
        if ch in ";|":
            segments.append("".join(current))
            current = []
            i += 1
            continue
        at_word_start = not current or current[-1].isspace()
        if ch in "<>&(){}*?[]\n\r" or (ch == "#" and at_word_start):
            return None
        current.append(ch)
        i += 1
    segments.append("".join(current))
    return segments


def _has_option(args: Sequence[str], options: frozenset[str]) -> bool:
    for arg in args:
        if arg == "--":
            return False
        name = arg.split("=", 1)[0]
        if name in options or (
            len(arg) > 2 and arg[0] == "-" and arg[1] != "-" and arg[:2] in options
        ):
            return True
    return False


def _git(args: Sequence[str]) -> bool:
    if not args:
        return False
    sub, rest = args[0], args[1:]
    if _has_option(rest, _GIT_BAD_OPTIONS):
        return False
    if sub in _GIT_READ_ONLY:
        return True
    positional = [a for a in rest if not a.startswith("-")]
    flags = set(rest) - set(positional)
    match sub:
        case "branch":
            return not positional or bool(flags & {"-l", "--list"})
        case "tag":
            return not positional or bool(flags & {"-l", "--list"})
        case "remote":
            return not positional and flags <= {"-v", "--verbose"}
        case "config":
            return bool(flags & {"--get", "--get-all", "--get-regexp", "--list", "-l"})
        case "stash":
            return bool(rest) and rest[0] in ("list", "show")
        case "reflog":
            return not rest or rest[0] == "show"
        case _:
            return False


def _xargs(args: Sequence[str]) -> bool:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _XARGS_VALUED:
            i += 2
        elif arg in _XARGS_FLAGS:
            i += 1
        elif arg.startswith("-"):
            return False
        else:
            return arg in _XARGS_TARGETS
    return False  # xargs with no program runs echo, but say no as Claude Code does


def _sed(args: Sequence[str]) -> bool:
    scripts: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-e", "--expression"):
            if i + 1 >= len(args):
                return False
            scripts.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("--expression="):
            scripts.append(arg.split("=", 1)[1])
        elif arg.startswith("-"):
            if arg not in ("-n", "--quiet", "--silent", "-E", "-r", "--regexp-extended", "-z",
                           "-s", "-u", "--posix"):  # fmt: skip
                return False
        elif not scripts:
            scripts.append(arg)
        i += 1
    return bool(scripts) and all(
        all(_SED_PRINT.fullmatch(p.strip()) or _SED_SUBSTITUTE.fullmatch(p.strip())
            for p in script.split(";"))
        for script in scripts
    )  # fmt: skip


def _date(args: Sequence[str]) -> bool:
    if _has_option(args, frozenset({"-s", "--set", "-f", "--file"})):
        return False
    valued = {"-d", "--date", "-r", "--reference"}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in valued:
            skip = True
        elif not arg.startswith(("-", "+")):
            return False  # MMDDhhmm sets the clock
    return True


def _only_flags(args: Sequence[str]) -> bool:
    return all(arg.startswith("-") for arg in args)


_CHECKS: Final[dict[str, Callable[[Sequence[str]], bool]]] = {
    "git": _git,
    "xargs": _xargs,
    "sed": _sed,
    "date": _date,
    "uniq": lambda a: all(x.startswith("-") or x.isdigit() for x in a),  # no output file
    "hostname": _only_flags,
    "ps": lambda a: not any(not x.startswith("-") and "e" in x and x.isalpha() for x in a),
    "ifconfig": lambda a: len(a) <= 1 and all(_INTERFACE.fullmatch(x) for x in a),
    "cd": lambda a: len(a) <= 1,
    "jq": lambda a: not _has_option(a, _JQ_BAD_OPTIONS) and not any(_ENV.search(x) for x in a),
}


def _read_only_part(part: str) -> bool:
    try:
        words = shlex.split(part)
    except ValueError:
        return False
    if not words:
        return False
    program, args = words[0], words[1:]
    if " ".join(words) in _EXACT or (program == "history" and len(args) == 1 and args[0].isdigit()):
        return True
    if "=" in program or "/" in program:
        return False
    if program in _ANY_ARGS:
        return True
    if program in _BAD_OPTIONS:
        return not _has_option(args, _BAD_OPTIONS[program])
    check = _CHECKS.get(program)
    return check is not None and check(args)


def is_read_only_command(command: str) -> bool:
    """True when Claude Code would take ``command`` as read-only (and so run it concurrently
    with other safe calls); see the module docstring for the rule."""
    if not command.strip():
        return False
    segments = _segments(command)
    if segments is None:
        return False
    parts = [s for s in segments if s.strip()]
    if not parts or not all(map(_read_only_part, parts)):
        return False
    # Claude Code: a compound command with both cd and git needs a permission check.
    programs = {p.split()[0] for p in parts}
    return not {"cd", "git"} <= programs
