"""EtcdBackend's shared watch stream (``share_watches``): many watches, one etcd stream, the same semantics."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from keyqueue.apiserver import EtcdBackend, EtcdProcess
from keyqueue.apiserver.storage import BackendUnavailableError, BackendWatch, WatchEvent, WatchOverflowError
from keyqueue.apiserver.storage.watch_hub import _HubWatch, _WatchHub

pytestmark = pytest.mark.etcd


@pytest.fixture
def root() -> str:
    return f"/hub-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def backend(etcd_proc: EtcdProcess, root: str) -> Iterator[EtcdBackend]:
    b = EtcdBackend(etcd_proc.endpoint)
    b.share_watches(root)
    yield b
    b.close()


def _events(w: BackendWatch, count: int) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    while len(out) < count:
        batch = w.next(5.0)
        assert batch is not None, f"no watch event within 5 s (have {len(out)} of {count})"
        out.extend(batch.events)
    return out


def _hub(backend: EtcdBackend) -> _WatchHub:
    hub = backend._hub
    assert hub is not None
    return hub


def test_watches_share_one_stream_and_get_only_their_prefix(backend: EtcdBackend, root: str) -> None:
    start = backend.revision() + 1
    everything = backend.watch(root, start)
    only_a = backend.watch(root + "a/", start)
    outside = backend.watch("/elsewhere-" + root.strip("/") + "/", start)  # not under the root: its own stream
    try:
        assert isinstance(everything, _HubWatch) and isinstance(only_a, _HubWatch)
        assert not isinstance(outside, _HubWatch)
        assert everything._hub is only_a._hub is _hub(backend)
        a = backend.create(root + "a/1", b"1")
        backend.create(root + "b/1", b"1")
        assert a.kv is not None
        backend.update(root + "a/1", b"2", a.kv.mod_revision)
        assert [(e.type, e.kv.key[len(root):], e.kv.value) for e in _events(everything, 3)] == [
            ("PUT", "a/1", b"1"), ("PUT", "b/1", b"1"), ("PUT", "a/1", b"2")]
        got = _events(only_a, 2)
        assert [(e.kv.key[len(root):], e.kv.value) for e in got] == [("a/1", b"1"), ("a/1", b"2")]
        assert got[1].prev is not None and got[1].prev.value == b"1"
        assert outside.next(0.05) is None
    finally:
        for w in (everything, only_a, outside):
            w.close()


def test_a_later_watch_from_an_earlier_revision_replays_the_buffer_without_gaps(backend: EtcdBackend,
                                                                               root: str) -> None:
    first = backend.watch(root, backend.revision() + 1)
    try:
        revs = [r.revision for r in (backend.create(root + f"k{i}", b"v") for i in range(5))]
        _events(first, 5)  # the hub has fanned them out: they are in its buffer
        late = backend.watch(root, revs[2])  # starts inside what the hub already delivered
        try:
            assert isinstance(late, _HubWatch)
            backend.create(root + "k5", b"v")
            got = _events(late, 4)
            assert [e.kv.key[len(root):] for e in got] == ["k2", "k3", "k4", "k5"]  # no gap, no duplicate
            extra = late.next(0.05)
            assert extra is None or not extra.events  # at most a progress notification
        finally:
            late.close()
    finally:
        first.close()


def test_a_start_older_than_the_buffer_gets_its_own_stream(backend: EtcdBackend, root: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_WatchHub, "MAX_EVENTS", 2)
    first = backend.watch(root, backend.revision() + 1)
    try:
        revs = [r.revision for r in (backend.create(root + f"k{i}", b"v") for i in range(4))]
        _events(first, 4)
        assert _hub(backend).buffer_start == revs[2]  # k0 and k1 fell out of the buffer
        old = backend.watch(root, revs[0])
        try:
            assert not isinstance(old, _HubWatch)
            assert [e.kv.key[len(root):] for e in _events(old, 4)] == ["k0", "k1", "k2", "k3"]  # etcd's history
        finally:
            old.close()
        inside = backend.watch(root, revs[2])
        try:
            assert isinstance(inside, _HubWatch)
            assert [e.kv.key[len(root):] for e in _events(inside, 2)] == ["k2", "k3"]
        finally:
            inside.close()
    finally:
        first.close()


def test_an_overflowing_watch_ends_alone(backend: EtcdBackend, root: str) -> None:
    start = backend.revision() + 1
    slow = backend.watch(root, start, max_pending=3)
    fast = backend.watch(root, start)
    try:
        for i in range(8):
            backend.create(root + f"o{i}", b"v")
        assert len(_events(fast, 8)) == 8  # fast has everything: the hub fanned every event out
        got: list[WatchEvent] = []
        with pytest.raises(WatchOverflowError):
            while True:
                batch = slow.next(5.0)
                assert batch is not None
                got.extend(batch.events)
        assert slow.overflowed and not fast.overflowed
        assert [e.kv.key[len(root):] for e in got] == [f"o{i}" for i in range(len(got))]  # a prefix, in order
        assert slow not in _hub(backend)._subs
        backend.create(root + "after", b"v")
        assert [e.kv.key[len(root):] for e in _events(fast, 1)] == ["after"]
    finally:
        slow.close()
        fast.close()


def test_a_failed_stream_fails_every_watch_and_the_next_watch_opens_a_new_one(backend: EtcdBackend,
                                                                              root: str) -> None:
    a = backend.watch(root, backend.revision() + 1)
    b = backend.watch(root + "x/", backend.revision() + 1)
    hub = _hub(backend)
    hub._loop.loop.call_soon_threadsafe(hub._call.cancel)  # what a lost connection to etcd does to the stream
    for w in (a, b):
        with pytest.raises(BackendUnavailableError):
            w.next(5.0)
        w.close()
    assert hub.dead
    c = backend.watch(root, backend.revision() + 1)
    try:
        assert isinstance(c, _HubWatch) and c._hub is not hub
        backend.create(root + "again", b"v")
        assert [e.kv.key[len(root):] for e in _events(c, 1)] == ["again"]
    finally:
        c.close()


def test_progress_notifications_reach_every_watch(backend: EtcdBackend, root: str) -> None:
    # the session etcd sends progress notifications every 0.2 s (conftest)
    watches = [backend.watch(root, backend.revision() + 1) for _ in range(2)]
    try:
        for w in watches:
            batch = w.next(5.0)
            assert batch is not None and batch.progress is not None and not batch.events
    finally:
        for w in watches:
            w.close()


def test_closing_the_backend_ends_the_shared_watches(etcd_proc: EtcdProcess, root: str) -> None:
    b = EtcdBackend(etcd_proc.endpoint)
    b.share_watches(root)
    w = b.watch(root, b.revision() + 1)
    b.close()
    with pytest.raises(EOFError):
        w.next(5.0)


def test_share_watches_checks_its_argument(backend: EtcdBackend) -> None:
    with pytest.raises(ValueError, match="prefix must be a non-empty str"):
        backend.share_watches("")


def test_a_requested_progress_notification_covers_changes_outside_the_prefix(root: str) -> None:
    # an etcd whose own periodic notifications would come only after 10 minutes: the answer is the hub's
    with EtcdProcess(progress_notify_interval=600, unsafe_no_fsync=True) as etcd:
        backend = EtcdBackend(etcd.endpoint)
        backend.share_watches(root)
        quiet = backend.watch(root + "quiet/", backend.revision() + 1)
        busy = backend.watch(root, backend.revision() + 1)
        try:
            elsewhere = backend.create(root + "busy/1", b"v")
            _events(busy, 1)  # the hub has fanned it out
            assert quiet.next(0) is None
            quiet.request_progress()
            batch = quiet.next(5.0)
            assert batch is not None and not batch.events and batch.progress is not None
            assert batch.progress >= elsewhere.revision
        finally:
            quiet.close()
            busy.close()
            backend.close()


def test_every_watch_stream_is_read_on_the_backends_one_loop_thread(etcd_proc: EtcdProcess, root: str) -> None:
    # No thread per watch: the streams (dedicated ones and the hub's) share one asyncio loop, which ends with the
    # backend. The old reader started a thread per stream; this fails on it.
    def loop_threads() -> set[threading.Thread]:  # other backends of this process (other tests') have their own
        return {t for t in threading.enumerate() if t.name == "etcd-watch-loop"}

    others = loop_threads()
    backend = EtcdBackend(etcd_proc.endpoint)
    backend.share_watches(root)
    first = backend.watch("/elsewhere-0/", backend.revision() + 1)
    before = set(threading.enumerate())
    watches = [backend.watch(f"/elsewhere-{i}/", backend.revision() + 1) for i in range(1, 5)]
    watches.append(backend.watch(root, backend.revision() + 1))
    try:
        assert [t.name for t in threading.enumerate() if t not in before] == []
        loops = list(loop_threads() - others)
        assert len(loops) == 1
        backend.create("/elsewhere-3/x", b"v")
        backend.create(root + "y", b"v")
        assert [e.kv.key for e in _events(watches[2], 1)] == ["/elsewhere-3/x"]
        assert [e.kv.key for e in _events(watches[-1], 1)] == [root + "y"]
    finally:
        for w in [first, *watches]:
            w.close()
        backend.close()
    loops[0].join(5)
    assert not loops[0].is_alive()
