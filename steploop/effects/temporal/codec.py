"""Large payloads by reference: a payload codec that keeps big payloads out of the history.

Temporal caps one payload (2 MB by default on the server; it warns from 256 KB) and a
workflow's whole history (50 MB, 50,000 events). A model call carries the conversation, a tool
result can be a whole file, and the loop state continued as new carries both; inline, a long
session would hit the caps. :class:`BlobCodec` stores every payload larger than ``threshold``
bytes in a :class:`BlobStore`, content-addressed (the SHA-256 of the bytes), and puts only a
reference in the history; decoding fetches it back and checks the hash. Identical payloads
(the same conversation sent twice) are stored once.

The codec runs in clients and workers, never in workflow code, so the workflow stays
deterministic: the history holds the references, and the references name the contents.
Every client and worker of a namespace must use the same store (a directory on a shared file
system here; an object store in production, by implementing :class:`BlobStore`'s two methods).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = ["DEFAULT_THRESHOLD", "ENCODING", "BlobCodec", "BlobStore", "DirectoryStore"]

ENCODING = b"binary/steploop-blob"
DEFAULT_THRESHOLD = 128 * 1024


class BlobStore(Protocol):
    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...


class DirectoryStore:
    """Blobs as files of one directory (written atomically; never rewritten)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, data: bytes) -> None:
        path = self.directory / name
        if path.exists():
            return
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def get(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()


class BlobCodec(PayloadCodec):
    """Payloads over ``threshold`` bytes go to ``store``; the history keeps a reference."""

    def __init__(self, store: BlobStore, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.store = store
        self.threshold = threshold
        self.stored = 0  # payloads this codec put in the store

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            data = p.SerializeToString()
            if len(data) <= self.threshold:
                out.append(p)
                continue
            name = hashlib.sha256(data).hexdigest()
            self.store.put(name, data)
            self.stored += 1
            out.append(
                Payload(
                    metadata={
                        "encoding": ENCODING,
                        "sha256": name.encode(),
                        "size": b"%d" % len(data),
                    }
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)
                continue
            name = p.metadata["sha256"].decode()
            data = self.store.get(name)
            if hashlib.sha256(data).hexdigest() != name:
                raise ValueError(f"blob {name}: the stored bytes do not match their hash")
            full = Payload()
            full.ParseFromString(data)
            out.append(full)
        return out
