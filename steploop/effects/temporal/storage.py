"""Large payloads outside the history, with Temporal's own external storage.

Temporal caps one payload (2 MB by default; it warns from 256 KB) and a whole history (50 MB,
50,000 events). A model call carries the conversation, a tool result can be a whole file, and
the loop state continued as new carries both. The SDK's external storage
(``temporalio.converter.ExternalStorage``) keeps a payload over a size threshold in a
*storage driver* and puts only a reference in the history; :class:`PayloadStore` is such a
driver over a directory, and :func:`external_storage` the configuration clients, workers and
the Replayer share (through :func:`steploop.effects.temporal.client.data_converter` or the
plugin).

**Bounded by the distinct content.** Each model call sends the whole conversation so far, so
storing each payload whole stores the conversation once per call: the store grows with the
square of the conversation. The store splits a payload into chunks at content-defined
boundaries (:func:`split`: after a ``},`` between two JSON objects of a list, where a hash of
the 64 bytes before it says so; the same bytes give the same boundaries wherever they sit) and
keeps each chunk once, under the SHA-256 of its bytes; a payload is a manifest of its chunks'
digests, itself cut the same way when it is long (a tree of manifests). A conversation one
message longer than the last adds the chunks of that message and the branch of manifests above
them. ``benchmarks/temporal_payloads.py`` measures the bytes stored
per byte of conversation.

**Absolute paths.** The root is resolved once, when the store is made: a client started in
another directory finds the same files (``steploop temporal start`` and ``worker`` default to
one per-user directory, :func:`default_root`).

**Retention.** Every payload is also listed under the workflow it was stored for
(``workflows/<id digest>/``, with the workflow id in a file beside it): :meth:`PayloadStore.collect`
removes the lists of the workflows the server no longer knows (their retention ended, or they
were deleted), then every object no list reaches, once it is older than a grace period (an
object just stored or just reused is never taken by a collection running at the same time).
``steploop temporal gc`` runs it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import os
import re
import shutil
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from steploop.effects.temporal.paths import default_root

__all__ = [
    "DEFAULT_THRESHOLD",
    "Collected",
    "PayloadStore",
    "StoreMissing",
    "default_root",
    "external_storage",
    "for_replay",
    "split",
]

DEFAULT_THRESHOLD = 128 * 1024
"""Payloads of at least this many bytes go to the store."""

_CANDIDATE = re.compile(rb"\},\{")
_WINDOW = 64
_MASK = 3  # one candidate in four, on average, ends a chunk
_DIGEST = 32
_FANOUT = 16  # digests per manifest piece, on average


class StoreMissing(Exception):
    """A payload the history refers to is not in the store."""


def split(data: bytes) -> list[bytes]:
    """``data`` cut at content-defined boundaries: after the ``},`` of a ``},{`` whose 64
    preceding bytes hash to a multiple of four. A boundary depends only on the bytes around
    it, so the same run of JSON objects is cut the same way in every payload that holds it."""
    cuts = [0]
    crc = zlib.crc32
    for m in _CANDIDATE.finditer(data):
        p = m.start() + 2
        if crc(data[max(0, p - _WINDOW) : p]) & _MASK == 0 and p > cuts[-1]:
            cuts.append(p)
    cuts.append(len(data))
    return [data[a:b] for a, b in itertools.pairwise(cuts) if b > a]


@attrs.frozen
class Collected:
    """What :meth:`PayloadStore.collect` removed and kept."""

    workflows_removed: int
    workflows_kept: int
    objects_removed: int
    bytes_removed: int
    objects_kept: int
    bytes_kept: int


class PayloadStore(StorageDriver):
    """A storage driver over a directory (see the module docstring).

    Args:
        root: the directory; made absolute here.
        chunking: split payloads into content-defined chunks (off: each payload is one
            object, content-addressed, as a plain claim-check store keeps it).
        driver_name: the name references carry; every client and worker must use the same.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        chunking: bool = True,
        driver_name: str = "steploop.directory",
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.chunking = chunking
        self.writes = True
        self._name = driver_name
        self.objects = self.root / "objects"
        self.workflows = self.root / "workflows"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.workflows.mkdir(parents=True, exist_ok=True)

    def name(self) -> str:
        return self._name

    def read_only(self) -> PayloadStore:
        """This store, for a replay: it reads what the history refers to, and a payload the
        replayed code makes is named (its claim computed) but not written."""
        other = copy.copy(self)
        other.writes = False
        return other

    def type(self) -> str:
        return "steploop.directory"

    # -- the driver ----------------------------------------------------------------------

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        target = context.target
        owner = target.id or "" if isinstance(target, StorageDriverWorkflowInfo) else ""
        namespace = target.namespace if target is not None else ""
        return [self.put_payload(p.SerializeToString(), owner, namespace) for p in payloads]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        out = []
        for claim in claims:
            p = Payload()
            p.ParseFromString(self.get_payload(claim))
            out.append(p)
        return out

    # -- payloads ------------------------------------------------------------------------

    def put_payload(self, data: bytes, owner: str = "", namespace: str = "") -> StorageDriverClaim:
        """Keep ``data`` (a serialized payload), listed under workflow ``owner``; the claim
        names it."""
        whole = hashlib.sha256(data).hexdigest()
        pieces = split(data) if self.chunking else [data]
        if len(pieces) == 1:
            key = "b" + self._put(data)
        else:
            key = self._manifest([bytes.fromhex(self._put(c)) for c in pieces])
        if self.writes:
            self._list(owner, namespace, key)
        return StorageDriverClaim(claim_data={"key": key, "sha256": whole, "size": str(len(data))})

    def get_payload(self, claim: StorageDriverClaim) -> bytes:
        data = claim.claim_data
        key, whole = data.get("key", ""), data.get("sha256", "")
        if key[:1] == "b":
            out = self._get(key[1:])
        elif key[:1] == "m" and key[1:2].isdigit():
            out = b"".join(self._get(d) for d in self._leaves(int(key[1]), key[2:]))
        else:
            raise StoreMissing(f"a payload reference of another store: {dict(data)!r:.200}")
        if hashlib.sha256(out).hexdigest() != whole:
            raise StoreMissing(f"payload {whole}: the stored bytes do not match its digest")
        return out

    def _manifest(self, digests: list[bytes]) -> str:
        """The key of a manifest of these chunk digests. A manifest of more than
        :data:`_FANOUT` digests is itself cut at content-defined places (after a digest whose
        first byte is a multiple of :data:`_FANOUT`) and kept as pieces, under a manifest of
        their digests, and so on up: a conversation one message longer shares all but the last
        pieces of its manifest with the last one, so what a call adds stays small however long
        the conversation grows."""
        depth = 1
        while True:
            manifest = b"".join(digests)
            if len(digests) <= _FANOUT:
                return f"m{depth}{self._put(manifest)}"
            pieces: list[list[bytes]] = [[]]
            for d in digests:
                pieces[-1].append(d)
                if d[0] % _FANOUT == 0:
                    pieces.append([])
            digests = [bytes.fromhex(self._put(b"".join(p))) for p in pieces if p]
            depth += 1

    def _leaves(self, depth: int, digest: str) -> list[str]:
        """The chunk digests under manifest ``digest`` of ``depth`` levels."""
        level = [digest]
        for _ in range(depth):
            level = [d for m in level for d in _digests(self._get(m))]
        return level

    def _path(self, digest: str) -> Path:
        return self.objects / digest[:2] / digest

    def _put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if not self.writes:
            return digest
        path = self._path(digest)
        try:
            os.utime(path)  # kept, and fresh for a collection running now (see collect)
            return digest
        except FileNotFoundError:
            pass
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return digest

    def _get(self, digest: str) -> bytes:
        path = self._path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise StoreMissing(
                f"{path} is missing: every client and worker of a namespace must use the same "
                "store (--store), and a payload is kept while its workflow is"
            ) from None

    def _list(self, owner: str, namespace: str, key: str) -> None:
        folder = self.workflows / hashlib.sha256(f"{namespace}\0{owner}".encode()).hexdigest()[:40]
        entry = folder / key
        if entry.exists():
            return
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            (folder / "workflow").write_text(f"{namespace}\n{owner}\n", encoding="utf-8")
        entry.touch()

    # -- retention -----------------------------------------------------------------------

    def listed(self) -> Iterator[tuple[Path, str, str]]:
        """Each workflow list: its folder, namespace and workflow id ("" for payloads stored
        for no workflow)."""
        for folder in sorted(self.workflows.iterdir()):
            try:
                namespace, owner = folder.joinpath("workflow").read_text(encoding="utf-8").split(
                    "\n"
                )[:2]
            except (OSError, ValueError):
                continue  # being made
            yield folder, namespace, owner

    async def collect(
        self,
        alive: Callable[[str, str], Awaitable[bool]],
        *,
        grace_s: float = 3600.0,
    ) -> Collected:
        """Remove the lists of the workflows ``alive(namespace, workflow_id)`` says are gone,
        then every object no remaining list reaches and not touched for ``grace_s`` seconds."""
        removed = kept = 0
        live: set[str] = set()
        for folder, namespace, owner in list(self.listed()):
            if owner and not await alive(namespace, owner):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
                continue
            kept += 1
            for entry in folder.iterdir():
                key = entry.name
                if key[:1] == "b":
                    live.add(key[1:])
                elif key[:1] == "m" and key[1:2].isdigit():
                    live.update(self._reached(int(key[1]), key[2:]))
        before = time.time() - grace_s
        gone = gone_bytes = objects = size = 0
        for path in self.objects.glob("*/*"):
            st = path.stat()
            if path.name not in live and st.st_mtime < before:
                path.unlink(missing_ok=True)
                gone += 1
                gone_bytes += st.st_size
            else:
                objects += 1
                size += st.st_size
        return Collected(removed, kept, gone, gone_bytes, objects, size)

    def _reached(self, depth: int, digest: str) -> set[str]:
        """Every object manifest ``digest`` reaches: its pieces, theirs, the chunks."""
        out, level = {digest}, [digest]
        for _ in range(depth):
            nxt = []
            for m in level:
                try:
                    nxt.extend(_digests(self._path(m).read_bytes()))
                except FileNotFoundError:
                    continue
            out.update(nxt)
            level = nxt
        return out

    def stored_bytes(self) -> int:
        """Bytes of every object kept (chunks, whole payloads and manifests)."""
        return sum(p.stat().st_size for p in self.objects.glob("*/*"))


def _digests(manifest: bytes) -> list[str]:
    return [manifest[i : i + _DIGEST].hex() for i in range(0, len(manifest), _DIGEST)]


def external_storage(
    store: PayloadStore | str | os.PathLike[str], threshold: int = DEFAULT_THRESHOLD
) -> ExternalStorage:
    """The SDK's external storage over ``store`` (a :class:`PayloadStore` or its root)."""
    driver = store if isinstance(store, PayloadStore) else PayloadStore(store)
    return ExternalStorage(drivers=[driver], payload_size_threshold=threshold)


def for_replay(storage: ExternalStorage | None) -> ExternalStorage | None:
    """``storage`` with every :class:`PayloadStore` read-only (a replay writes nothing)."""
    if storage is None or not any(isinstance(d, PayloadStore) for d in storage.drivers):
        return storage
    drivers = [d.read_only() if isinstance(d, PayloadStore) else d for d in storage.drivers]
    chosen = storage.driver_selector
    by_name = {d.name(): d for d in drivers}

    def select(ctx: Any, payload: Payload) -> StorageDriver | None:
        got = chosen(ctx, payload) if chosen is not None else drivers[0]
        return by_name[got.name()] if got is not None else None

    return ExternalStorage(
        drivers=drivers,
        driver_selector=select if len(drivers) > 1 else None,
        payload_size_threshold=storage.payload_size_threshold,
    )
