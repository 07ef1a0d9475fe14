"""Grep's regular expressions: Google RE2, a linear-time engine (specs/ E-GREP-1).

Claude Code's Grep runs ripgrep, whose regex engine takes time linear in the input whatever
the pattern. Python's ``re`` backtracks: ``(a+)+$`` over 24 ``a`` and a ``!`` runs for many
seconds holding the interpreter lock, so no timeout, interrupt or other task can act. RE2
(the ``google-re2`` package) has the same dialect class as ripgrep's (Perl-like syntax,
no backreferences, no look-around), searches in time linear in the text, and releases the
interpreter lock while it searches.

The text is searched as bytes (UTF-8) in one pass per file. Outside multiline mode a match
never includes a line break (RE2's ``never_nl``, as ripgrep strips the line terminator from
patterns) and ``^``/``$`` match at line boundaries; a pattern naming a line break is
refused, as ripgrep refuses it, pointing to ``multiline``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import attrs

# google-re2 ships no type information.
import re2  # type: ignore[import-untyped, unused-ignore]

__all__ = ["PatternError", "Regex", "compile_regex"]

#: A line break written in a pattern: a raw newline, or ``\n`` after an even run of backslashes.
_NAMES_A_NEWLINE: Final = re.compile(r"\n|(?<!\\)(?:\\\\)*\\n")
_LOOK_AROUND: Final = ("(?=", "(?!", "(?<=", "(?<!")
_BACKREFERENCE: Final = re.compile(r"invalid escape sequence: \\[1-9k]")


class PatternError(ValueError):
    """A pattern the engine will not take; the message is for the model."""


def _options(*, ignore_case: bool, multiline: bool) -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern on stderr
    options.case_sensitive = not ignore_case
    options.never_nl = not multiline
    options.dot_nl = multiline
    return options


def _explain(pattern: str, reason: str) -> PatternError:
    """A rejected pattern, in ripgrep's words where ripgrep has them."""
    if reason.startswith("invalid perl operator: (?P") and "(?P=" in pattern:
        reason = "backreferences are not supported"
    elif reason.startswith("invalid perl operator: ") and reason.endswith(_LOOK_AROUND):
        reason = "look-around, including look-ahead and look-behind, is not supported"
    elif _BACKREFERENCE.match(reason):
        reason = "backreferences are not supported"
    return PatternError(
        f"Invalid regular expression {pattern!r}: regex parse error: {reason} (Grep uses a "
        "linear-time engine, RE2, of ripgrep's dialect)"
    )


@attrs.frozen
class Regex:
    """A compiled pattern. :meth:`lines` gives the lines of a text it matches."""

    pattern: str
    multiline: bool
    _compiled: Any = attrs.field(repr=False)

    def lines(self, data: bytes) -> Iterator[tuple[int, int]]:
        """The matches in ``data``, in order, as (first line, last line), counting from 0; one
        per matching line outside multiline mode (the lines a match spans in it)."""
        size = len(data)
        ends_with_newline = data.endswith(b"\n")
        pos = 0
        line, counted_to = 0, 0  # the line at offset counted_to (line breaks counted in C)
        while pos <= size:
            match = self._compiled.search(data, pos)
            if match is None:
                return
            begin, end = match.span()
            if begin == size and (size == 0 or ends_with_newline):
                return  # the empty "line" after the last line break is no line
            line += data.count(b"\n", counted_to, begin)
            counted_to = begin
            if not self.multiline:
                yield line, line
                after = data.find(b"\n", begin)
                if after < 0:
                    return
                pos = after + 1
                continue
            last = line + data.count(b"\n", begin, max(begin, end - 1))
            yield line, last
            pos = end if end > begin else begin + 1


def _reason(pattern: str, options: Any, error: Exception) -> str:
    """RE2's reason for refusing ``pattern``, about the pattern as given (without the
    ``(?m)`` prefix) where RE2 refuses that too."""
    try:
        re2.compile(pattern.encode("utf-8", "surrogatepass"), options)
    except re2.error as bare:
        error = bare
    reason = error.args[0] if error.args else "invalid pattern"
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    return str(reason)


def compile_regex(pattern: str, *, ignore_case: bool = False, multiline: bool = False) -> Regex:
    """``pattern`` compiled by RE2, with ``^``/``$`` at line boundaries; PatternError (a
    message for the model) for a pattern RE2 refuses or, outside multiline mode, one that
    names a line break."""
    if not multiline and _NAMES_A_NEWLINE.search(pattern):
        raise PatternError(
            f"Invalid regular expression {pattern!r}: the literal '\\n' is not allowed in a "
            "regex outside multiline mode; set multiline to true to match across lines"
        )
    options = _options(ignore_case=ignore_case, multiline=multiline)
    try:
        compiled = re2.compile(("(?m)" + pattern).encode("utf-8", "surrogatepass"), options)
    except re2.error as prefixed:
        raise _explain(pattern, _reason(pattern, options, prefixed)) from None
    return Regex(pattern, multiline, compiled)


_UNSEEN: Final = object()
#: Compiled schema patterns (None: RE2 refused it); cleared when it reaches this size.
_SCHEMA_PATTERNS: dict[str, Any] = {}
_MAX_SCHEMA_PATTERNS: Final = 4096


def schema_pattern_search(pattern: str, text: str) -> bool | None:
    """Whether JSON Schema ``pattern`` matches somewhere in ``text`` (``re.search``), in time
    linear in the text (RE2); None when RE2 will not take the pattern (look-around,
    backreferences: the ECMA-262 features RE2 leaves out), which the caller then does not
    check. ``^`` and ``$`` anchor at the ends of the text and ``.`` does not match a line
    break, as in ECMA-262 (Python's ``$`` also matches before a final line break)."""
    compiled = _SCHEMA_PATTERNS.get(pattern, _UNSEEN)
    if compiled is _UNSEEN:
        options = re2.Options()
        options.log_errors = False
        try:
            compiled = re2.compile(pattern.encode("utf-8", "surrogatepass"), options)
        except Exception:  # re2.error, or a pattern past RE2's memory bound
            compiled = None
        if len(_SCHEMA_PATTERNS) >= _MAX_SCHEMA_PATTERNS:
            _SCHEMA_PATTERNS.clear()
        _SCHEMA_PATTERNS[pattern] = compiled
    if compiled is None:
        return None
    return compiled.search(text.encode("utf-8", "surrogatepass")) is not None
