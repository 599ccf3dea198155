"""The two storage backends behave the same (etcd semantics)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from keyqueue.apiserver import EtcdBackend, EtcdProcess, MemoryBackend
from keyqueue.apiserver.storage import Backend, CompactedError, FutureRevisionError, WatchBatch, WatchEvent


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd),
                        pytest.param("etcd-shared", marks=pytest.mark.etcd)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend; ``etcd-shared`` serves the watches under ``/test-`` from one stream (``share_watches``)."""
    if request.param == "memory":
        b: Backend = MemoryBackend()
    else:
        etcd: EtcdProcess = request.getfixturevalue("etcd_proc")
        b = EtcdBackend(etcd.endpoint)
        if request.param == "etcd-shared":
            b.share_watches("/test-")
    yield b
    b.close()


@pytest.fixture
def prefix() -> str:
    return f"/test-{uuid.uuid4().hex[:8]}/"


def _events(w: object, count: int) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    while len(out) < count:
        batch = w.next(5.0)  # type: ignore[attr-defined]
        assert batch is not None, "no watch event within 5 s"
        assert isinstance(batch, WatchBatch)
        out.extend(batch.events)
    return out


def test_cas_semantics(backend: Backend, prefix: str) -> None:
    key = prefix + "k"
    created = backend.create(key, b"v1")
    assert created.succeeded and created.kv is not None
    assert created.kv.create_revision == created.kv.mod_revision == created.revision
    assert created.kv.version == 1
    again = backend.create(key, b"v2")
    assert not again.succeeded and again.kv is not None and again.kv.value == b"v1"

    updated = backend.update(key, b"v2", created.kv.mod_revision)
    assert updated.succeeded and updated.kv is not None
    assert updated.kv.create_revision == created.kv.create_revision
    assert updated.kv.mod_revision > created.kv.mod_revision and updated.kv.version == 2
    stale = backend.update(key, b"v3", created.kv.mod_revision)
    assert not stale.succeeded and stale.kv is not None and stale.kv.value == b"v2"

    kv, rev = backend.get(key)
    assert kv == updated.kv and rev >= updated.revision
    deleted = backend.delete(key, updated.kv.mod_revision)
    assert deleted.succeeded and deleted.kv is not None and deleted.kv.value == b"v2"
    assert backend.get(key)[0] is None
    missing = backend.update(key, b"v4", updated.kv.mod_revision)
    assert not missing.succeeded and missing.kv is None
    assert not backend.delete(key, updated.kv.mod_revision).succeeded


def test_range_at_revision_and_compaction(backend: Backend, prefix: str) -> None:
    a = backend.create(prefix + "a", b"1")
    _, rev_after_a = backend.range(prefix)
    assert a.kv is not None
    backend.update(prefix + "a", b"2", a.kv.mod_revision)
    backend.create(prefix + "b", b"1")
    items, _ = backend.range(prefix, rev_after_a)
    assert [(kv.key, kv.value) for kv in items] == [(prefix + "a", b"1")]
    items, now = backend.range(prefix)
    assert [(kv.key, kv.value) for kv in items] == [(prefix + "a", b"2"), (prefix + "b", b"1")]
    with pytest.raises(FutureRevisionError):
        backend.range(prefix, now + 100)
    backend.compact(now)
    with pytest.raises(CompactedError):
        backend.range(prefix, rev_after_a)
    assert len(backend.range(prefix, now)[0]) == 2  # the compaction revision itself stays readable
    backend.compact(now)  # compacting again is harmless


def test_watch_from_revision_with_prev_kv(backend: Backend, prefix: str) -> None:
    start = backend.revision() + 1
    created = backend.create(prefix + "w", b"1")
    assert created.kv is not None
    updated = backend.update(prefix + "w", b"2", created.kv.mod_revision)
    assert updated.kv is not None
    backend.create("/elsewhere-" + prefix.strip("/"), b"ignored")
    w = backend.watch(prefix, start)  # history replay
    try:
        backend.delete(prefix + "w", updated.kv.mod_revision)
        put1, put2, delete = _events(w, 3)
        assert (put1.type, put1.prev) == ("PUT", None)
        assert put2.type == "PUT" and put2.prev is not None and put2.prev.value == b"1"
        assert put2.kv.create_revision == put1.kv.mod_revision
        assert delete.type == "DELETE" and delete.prev is not None and delete.prev.value == b"2"
        assert put1.kv.mod_revision < put2.kv.mod_revision < delete.kv.mod_revision
    finally:
        w.close()


def test_watch_compacted_start(backend: Backend, prefix: str) -> None:
    backend.create(prefix + "x", b"1")
    old = backend.revision()
    for i in range(3):
        backend.create(prefix + f"y{i}", b"1")
    backend.compact(backend.revision())
    w = backend.watch(prefix, old)
    try:
        with pytest.raises(CompactedError):
            w.next(5.0)
    finally:
        w.close()


def test_close_unblocks_watch(backend: Backend, prefix: str) -> None:
    w = backend.watch(prefix, 0)
    assert w.next(0.05) is None
    w.close()
    with pytest.raises(EOFError):
        w.next(5.0)


def test_watch_from_a_future_revision_skips_earlier_changes(backend: Backend, prefix: str) -> None:
    w = backend.watch(prefix, backend.revision() + 3)
    try:
        for i in range(4):
            backend.create(prefix + f"f{i}", b"1")
        events = _events(w, 2)
        assert [e.kv.key[len(prefix):] for e in events] == ["f2", "f3"]  # f0, f1 come before the start
    finally:
        w.close()


def _first_batch(w: object, within: float = 0.5) -> WatchBatch | None:
    """The first batch of events (progress notifications skipped), or None if none came within ``within`` s."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        batch = w.next(left)  # type: ignore[attr-defined]
        if batch is None or batch.events:
            return batch  # type: ignore[no-any-return]
    return None


@pytest.mark.parametrize("change", ["create", "update", "delete"])
def test_watch_starting_exactly_at_the_compaction_revision(backend: Backend, prefix: str, change: str) -> None:
    """etcd keeps the PUT made at the compaction revision (without prev_kv) and drops a DELETE made there.

    Run on both backends: the etcd run is the reference the memory backend must match.
    """
    created = backend.create(prefix + "k", b"1")
    assert created.kv is not None
    if change == "create":
        at = created
    elif change == "update":
        at = backend.update(prefix + "k", b"2", created.kv.mod_revision)
    else:
        at = backend.delete(prefix + "k", created.kv.mod_revision)
    assert at.succeeded
    backend.compact(at.revision)
    with pytest.raises(CompactedError):
        backend.range(prefix, at.revision - 1)
    w = backend.watch(prefix, at.revision)
    try:
        batch = _first_batch(w)
        if change == "delete":
            assert batch is None, "etcd drops a DELETE at the compaction revision"
        else:
            assert batch is not None, "the PUT at the compaction revision must be delivered"
            (event,) = batch.events
            assert event.type == "PUT" and event.kv.mod_revision == at.revision
            assert event.kv.value == (b"1" if change == "create" else b"2")
            assert event.prev is None  # the version before the compaction revision is gone
        later = backend.create(prefix + "later", b"x")  # the watch goes on after the replay
        nxt = _first_batch(w)
        assert nxt is not None and [e.kv.mod_revision for e in nxt.events] == [later.revision]
    finally:
        w.close()
    below = backend.watch(prefix, at.revision - 1)
    try:
        with pytest.raises(CompactedError):
            below.next(5.0)
    finally:
        below.close()


def test_range_page_reads_bounded_pages_at_one_revision(backend: Backend, prefix: str) -> None:
    for i in range(5):
        assert backend.create(f"{prefix}k{i}", f"v{i}".encode()).succeeded
    backend.create(prefix[:-1] + "0/outside", b"x")  # sorts after the prefix's keys: never in its range
    first = backend.range_page(prefix, 0, "", 2)
    assert [kv.key for kv in first.kvs] == [f"{prefix}k0", f"{prefix}k1"]
    assert first.more and first.count == 5
    assert backend.create(f"{prefix}k9", b"late").succeeded  # after the first page: not in a read at its revision
    rest = backend.range_page(prefix, first.revision, first.kvs[-1].key + "\x00", 0)
    assert [kv.key for kv in rest.kvs] == [f"{prefix}k2", f"{prefix}k3", f"{prefix}k4"]
    assert not rest.more and rest.count == 3 and rest.revision == first.revision
    now = backend.range_page(prefix, 0, f"{prefix}k4", 1)
    assert [kv.key for kv in now.kvs] == [f"{prefix}k4"] and now.more and now.count == 2
    assert backend.range(prefix)[0] == [*first.kvs, *rest.kvs[:3], *backend.range_page(prefix, 0, f"{prefix}k9").kvs]
    with pytest.raises(ValueError, match="limit"):
        backend.range_page(prefix, 0, "", -1)
