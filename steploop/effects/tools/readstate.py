"""What the model has seen of each file, for Claude Code's read-before-write rule (specs/
E-STALE-1).

Claude Code's Edit and Write refuse to change an existing file the model has not read in the
session ("File has not been read yet. Read it first before writing to it.", seen in real
transcripts: tests/data/cc_transcripts/records.jsonl, the Edit and Write errors of version
1.0.98) and one that changed since the model last read or wrote it ("File has been modified
since read, either by the user or by a linter. Read it again before attempting to write it.").
Its check is the file's modification time, with a comparison of the content as a fallback
after a full read; a change noticed only at the moment of writing is "File has been
unexpectedly modified. Read it again before attempting to write it."

Here a file is "as seen" when its bytes are the bytes last read or written (a SHA-256
digest is kept, never the content) and, after a partial read (``offset``/``limit``), its
modification time is unchanged too. Comparing the content also catches the changes a
modification time cannot show (two writes within one tick of the file system's clock).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Final

import attrs

__all__ = [
    "MODIFIED_SINCE_READ",
    "NOT_READ",
    "UNEXPECTEDLY_MODIFIED",
    "FileReadState",
    "Seen",
]

NOT_READ: Final = "File has not been read yet. Read it first before writing to it."
MODIFIED_SINCE_READ: Final = (
    "File has been modified since read, either by the user or by a linter. Read it again "
    "before attempting to write it."
)
UNEXPECTEDLY_MODIFIED: Final = (
    "File has been unexpectedly modified. Read it again before attempting to write it."
)
#: Files remembered at most; the least recently used is forgotten first.
MAX_FILES: Final = 100_000


@attrs.frozen
class Seen:
    """A file as the model last saw it: its modification time (ns), size, the SHA-256 of its
    bytes, and whether the model was shown only part of it."""

    mtime_ns: int
    size: int
    digest: bytes
    partial: bool = False


class FileReadState:
    """Per file (by its workspace-relative path, links followed), what the model last read
    or the tools last wrote. Safe to share between threads and between the tools of one
    session; tools built apart from each other each get their own unless given one."""

    def __init__(self, max_files: int = MAX_FILES) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._max_files = max_files

    def __len__(self) -> int:
        return len(self._seen)

    def record(self, key: str, st: os.stat_result, data: bytes, *, partial: bool = False) -> None:
        """The model has now seen ``data`` (all of it unless ``partial``) as file ``key``."""
        seen = Seen(st.st_mtime_ns, len(data), hashlib.sha256(data).digest(), partial)
        with self._lock:
            self._seen[key] = seen
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_files:
                self._seen.popitem(last=False)

    def get(self, key: str) -> Seen | None:
        with self._lock:
            return self._seen.get(key)

    def problem(
        self, key: str, st: os.stat_result, data: bytes | None, *, require_read: bool
    ) -> str | None:
        """Why the existing file ``key`` (status ``st``, bytes ``data``; None when too large to
        read) may not be changed now, in Claude Code's words; None when it may."""
        seen = self.get(key)
        if seen is None:
            return NOT_READ if require_read else None
        if data is None:  # too large to read: its size and time stand for it
            unchanged = (st.st_size, st.st_mtime_ns) == (seen.size, seen.mtime_ns)
        else:
            unchanged = hashlib.sha256(data).digest() == seen.digest and (
                not seen.partial or st.st_mtime_ns == seen.mtime_ns
            )
        return None if unchanged else MODIFIED_SINCE_READ
