"""The two storage backends behave the same (etcd semantics)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from keyqueue.apiserver import EtcdBackend, EtcdProcess, MemoryBackend
from keyqueue.apiserver.storage import Backend, CompactedError, FutureRevisionError, WatchBatch, WatchEvent


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        b: Backend = MemoryBackend()
    else:
        etcd: EtcdProcess = request.getfixturevalue("etcd_proc")
        b = EtcdBackend(etcd.endpoint)
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
