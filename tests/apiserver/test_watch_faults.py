"""EtcdBackend's watch streams (read with grpc.aio on the backend's one loop thread) when etcd fails or the watches
are closed in awkward places: etcd killed or frozen, close racing the first event, close from the loop's own thread,
hundreds of watches opened and closed. Every wait is bounded (a hang fails the test instead of stalling the suite)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from keyqueue.apiserver import EtcdBackend, EtcdProcess
from keyqueue.apiserver.storage import (
    BackendUnavailableError,
    BackendWatch,
    KeyValue,
    WatchBatch,
    WatchEvent,
    etcd_watch,
)
from keyqueue.apiserver.storage.etcd import _TrackedEtcdWatch
from keyqueue.apiserver.storage.watch_hub import _HubWatch

pytestmark = pytest.mark.etcd

BOUND = 15.0  # how long a step may take before the test calls it a hang (never reached when the code is right)


@pytest.fixture
def own_etcd() -> Iterator[EtcdProcess]:
    """An etcd of this test's own, to kill or freeze without harming the session's."""
    with EtcdProcess(progress_notify_interval=600, unsafe_no_fsync=True) as proc:
        yield proc
        if proc.running and proc.pid is not None:
            os.kill(proc.pid, signal.SIGCONT)  # a test that failed while it was frozen: let stop() end it


@pytest.fixture
def root() -> str:
    return f"/faults-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def asyncio_errors(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """What the asyncio logger reported at ERROR or above ("Task was destroyed but it is pending!", an exception
    in a callback), after a garbage collection (pending tasks are reported when they are collected)."""
    caplog.set_level(logging.ERROR, logger="asyncio")

    def errors() -> list[str]:
        gc.collect()
        return [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]

    yield errors


class Bystander:
    """Another backend with a watch open, so another watch loop alive: grpc.aio hands a call's late completions
    to whichever loop polls its queue, and one that finds the call's own loop closed logs an error there."""

    def __init__(self, endpoint: str) -> None:
        self.backend = EtcdBackend(endpoint)
        self.prefix = f"/bystander-{uuid.uuid4().hex[:8]}/"
        self.watch = self.backend.watch(self.prefix, self.backend.revision() + 1)

    def poll(self) -> None:
        """Have its loop take what grpc has queued (a change of its own, waited for)."""
        key = self.prefix + uuid.uuid4().hex
        self.backend.create(key, b"v")
        while True:
            batch = self.watch.next(BOUND)
            assert batch is not None
            if any(e.kv.key == key for e in batch.events):
                return


@pytest.fixture
def bystander(etcd_proc: EtcdProcess) -> Iterator[Bystander]:
    b = Bystander(etcd_proc.endpoint)
    yield b
    b.watch.close()
    b.backend.close()


def _run(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``target`` in a daemon thread; its result (or exception) lands in the returned list."""
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # the test looks at it
            out.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


def _ends_with(w: BackendWatch, error: type[BaseException]) -> BaseException:
    """Take batches from ``w`` until it raises; the error must be ``error`` and come within the bound."""
    while True:
        try:
            batch = w.next(BOUND)
        except BaseException as exc:
            assert isinstance(exc, error), f"expected {error.__name__}, got {exc!r}"
            return exc
        assert batch is not None, f"watch neither delivered nor raised {error.__name__} within {BOUND} s"


def _each_ended_or_refused(openers: list[tuple[threading.Thread, list[Any]]]) -> None:
    """Each ``watch()`` thread of ``openers`` returns within the bound: a watch that ends with ``EOFError`` (the
    backend was closed under it), or ``BackendUnavailableError`` (refused: the backend was closed first)."""
    for t, out in openers:
        t.join(BOUND)
        assert not t.is_alive()
        if isinstance(out[0], BackendWatch):
            _ends_with(out[0], EOFError)
        else:
            assert isinstance(out[0], BackendUnavailableError), out


def _events(w: BackendWatch) -> list[bytes]:
    """The values in the next batch of events from ``w`` (progress notifications skipped), within the bound."""
    while True:
        batch = w.next(BOUND)
        assert batch is not None, f"no watch event within {BOUND} s"
        if batch.progress is None:
            return [e.kv.value for e in batch.events]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fd_targets() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(out)


def _settles(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within the bound, polled: for state other threads release with no event to
    wait on (file descriptors grpc closes on its own threads)."""
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_killed_etcd_fails_every_open_watch_and_later_watches_fail_fast(own_etcd: EtcdProcess, root: str) -> None:
    # A reader that took the broken connection for the stream's end would queue EOFError alone (a "closed" watch,
    # which the garbage collector takes as its cue to stop for good); checked by making _read return without
    # queueing the error on grpc.RpcError: the dedicated watches then raise EOFError here.
    backend = EtcdBackend(own_etcd.endpoint)
    backend.share_watches(root)
    try:
        start = backend.revision() + 1
        dedicated = [backend.watch(f"/own-{i}-{root[1:]}", start) for i in range(3)]
        shared = [backend.watch(f"{root}{i}/", start) for i in range(3)]
        assert all(isinstance(w, _HubWatch) for w in shared)
        assert not any(isinstance(w, _HubWatch) for w in dedicated)
        backend.create(f"/own-0-{root[1:]}k", b"v")
        backend.create(f"{root}0/k", b"v")
        for w in (dedicated[0], shared[0]):
            assert _events(w) == [b"v"]
        assert own_etcd._proc is not None
        own_etcd._proc.kill()
        own_etcd._proc.wait(BOUND)
        for w in dedicated + shared:
            _ends_with(w, BackendUnavailableError)
        # etcd is gone for good: a new watch (dedicated, or a new hub, the old one being retired) says so at once
        for prefix in (f"/later-{root[1:]}", root + "later/"):
            t, out = _run(lambda p=prefix: backend.watch(p, start))  # type: ignore[misc]
            t.join(BOUND)
            assert not t.is_alive(), "watch() on a dead etcd did not return"
            if isinstance(out[0], BackendWatch):
                _ends_with(out[0], BackendUnavailableError)
            else:
                assert isinstance(out[0], BackendUnavailableError), out
    finally:
        backend.close()


def test_a_frozen_etcd_holds_up_neither_close_nor_other_watches(own_etcd: EtcdProcess, root: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               asyncio_errors: Callable[[], list[str]]) -> None:
    # watch() waits (up to _RPC_TIMEOUT) for etcd to create the watch. It used to wait holding the backend's lock,
    # so with etcd frozen (SIGSTOP) every other watch() and close() (the API server's shutdown) queued behind it,
    # one full timeout each. Fails on that code: close() below does not return until the first watch() gives up.
    monkeypatch.setattr(etcd_watch, "_RPC_TIMEOUT", 600.0)  # a wait that would outlast the test's bound
    backend = EtcdBackend(own_etcd.endpoint)
    backend.share_watches(root)
    start = backend.revision() + 1
    first = backend.watch(f"/first-{root[1:]}", start)  # the loop and its channel are up
    scheduled = threading.Semaphore(0)
    run = etcd_watch._WatchLoop.run

    def counting_run(self: etcd_watch._WatchLoop, coro: Any) -> Any:
        future = run(self, coro)
        scheduled.release()
        return future

    monkeypatch.setattr(etcd_watch._WatchLoop, "run", counting_run)
    assert own_etcd.pid is not None
    os.kill(own_etcd.pid, signal.SIGSTOP)
    try:
        openers = [_run(lambda p=p: backend.watch(p, start))  # type: ignore[misc]
                   for p in (f"/a-{root[1:]}", f"/b-{root[1:]}", root + "c/")]
        for _ in openers:  # each has scheduled its stream and is now waiting for etcd's answer
            assert scheduled.acquire(timeout=BOUND)
        closer, closed = _run(backend.close)
        closer.join(BOUND)
        assert not closer.is_alive(), "close() waited behind a watch() that etcd does not answer"
        assert closed == [None]
        _each_ended_or_refused(openers)  # close() ended their wait too
        _ends_with(first, EOFError)
    finally:
        os.kill(own_etcd.pid, signal.SIGCONT)
    assert asyncio_errors() == []


def test_watch_on_a_frozen_etcd_returns_within_its_bound_and_recovers(own_etcd: EtcdProcess, root: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcd_watch, "_RPC_TIMEOUT", 0.2)
    backend = EtcdBackend(own_etcd.endpoint)
    backend.share_watches(root)
    try:
        start = backend.revision() + 1
        assert own_etcd.pid is not None
        os.kill(own_etcd.pid, signal.SIGSTOP)
        try:
            t, out = _run(lambda: [backend.watch(f"/d-{root[1:]}", start), backend.watch(root + "h/", start)])
            t.join(BOUND)
            assert not t.is_alive(), "watch() did not give up waiting for a frozen etcd"
            assert isinstance(out[0], list), out
            dedicated, shared = out[0]
            assert dedicated.next(0) is None and shared.next(0) is None
        finally:
            os.kill(own_etcd.pid, signal.SIGCONT)
        # thawed: both streams (opened while it was frozen) carry what happens next
        backend.create(f"/d-{root[1:]}k", b"v")
        backend.create(root + "h/k", b"v")
        for w in (dedicated, shared):
            assert _events(w) == [b"v"]
            w.close()
            _ends_with(w, EOFError)
    finally:
        backend.close()


def test_closing_the_backend_from_a_watch_listener_on_the_loop_thread(etcd_proc: EtcdProcess, root: str,
                                                                      bystander: Bystander,
                                                                      asyncio_errors: Callable[[], list[str]]) -> None:
    # A listener runs on the watch loop's thread. close() there used to wait 5 s for a coroutine the blocked loop
    # could not run, then raise RuntimeError("cannot join current thread") into the listener (and the reader).
    backend = EtcdBackend(etcd_proc.endpoint)
    backend.share_watches(root)
    key = f"/listener-{root[1:]}"
    w = backend.watch(key, backend.revision() + 1)
    shared = backend.watch(root, backend.revision() + 1)
    loop_thread = backend._wloop.thread if backend._wloop is not None else None
    assert loop_thread is not None
    done = threading.Event()
    outcome: list[BaseException | None] = []

    def listener() -> None:
        w.set_listener(None)
        try:
            backend.close()
            outcome.append(None)
        except BaseException as exc:  # the test looks at it
            outcome.append(exc)
        done.set()

    w.set_listener(listener)
    # The create does not wait for the listener (the backend's requests are not on the loop). etcd sends the event
    # as it applies the write, so the listener's close() can reach the channel before the create's answer does;
    # that create then fails as any request cut off by a close does. Either way the close below must hold.
    with contextlib.suppress(BackendUnavailableError):
        backend.create(key + "k", b"v")
    assert done.wait(BOUND)
    assert outcome == [None]
    loop_thread.join(BOUND)
    assert not loop_thread.is_alive(), "the watch loop's thread did not end"
    assert backend._wloop is not None and backend._wloop.loop.is_closed()
    _ends_with(w, EOFError)
    _ends_with(shared, EOFError)
    bystander.poll()
    assert asyncio_errors() == []


def test_close_racing_the_first_event_always_ends_the_watch(etcd_proc: EtcdProcess, root: str) -> None:
    # Whichever comes first, the event or the close (from another thread), next() ends with EOFError and never
    # blocks for good (a close whose EOFError got lost would show as a next() that times out).
    backend = EtcdBackend(etcd_proc.endpoint)
    backend.share_watches(root)
    try:
        for i in range(60):
            prefix = f"{root}{i}/" if i % 2 else f"/race-{i}-{root[1:]}"
            w = backend.watch(prefix, backend.revision() + 1)
            closer, _ = _run(w.close)
            backend.create(prefix + "k", b"v")
            _ends_with(w, EOFError)
            closer.join(BOUND)
            assert not closer.is_alive()
    finally:
        backend.close()


def test_close_racing_watch_on_another_thread_ends_every_watch(etcd_proc: EtcdProcess, root: str) -> None:
    # backend.close() while other threads are opening watches: each watch() either refuses (the backend is
    # closed) or returns a watch that ends with EOFError; none is left running with its stream open.
    for _ in range(10):
        backend = EtcdBackend(etcd_proc.endpoint)
        backend.share_watches(root)
        start = backend.revision() + 1
        backend.watch(root, start).close()  # the loop is up: the race is with the streams, not with its start
        barrier = threading.Barrier(5)
        prefixes = (root + "a/", root + "b/", f"/c-{root[1:]}", f"/d-{root[1:]}")
        openers = [_run(lambda b=backend, p=p, s=start, w=barrier: _open_after(w, b, p, s))  # type: ignore[misc]
                   for p in prefixes]
        barrier.wait(BOUND)
        backend.close()
        _each_ended_or_refused(openers)


def test_backends_closed_beside_a_live_one_leave_no_late_grpc_completion(etcd_proc: EtcdProcess, root: str,
                                                                         bystander: Bystander,
                                                                         asyncio_errors: Callable[[], list[str]]
                                                                         ) -> None:
    # A loop closed while grpc still owes its calls completions makes the bystander's loop log "Exception in
    # callback PollerCompletionQueue._handle_events ... Event loop is closed" (seen when the loop's close cancelled
    # grpc's own tasks instead of letting them finish; that showed here in about one cycle in four).
    for i in range(20):
        backend = EtcdBackend(etcd_proc.endpoint)
        backend.share_watches(root)
        start = backend.revision() + 1
        watches = [backend.watch(f"/late-{i}-{root[1:]}", start), backend.watch(root, start)]
        backend.close()
        for w in watches:
            _ends_with(w, EOFError)
        bystander.poll()
    assert asyncio_errors() == []


def _open_after(barrier: threading.Barrier, backend: EtcdBackend, prefix: str, start: int) -> BackendWatch:
    barrier.wait(BOUND)
    return backend.watch(prefix, start)


def test_hundreds_of_watches_leave_no_thread_fd_or_asyncio_error_behind(etcd_proc: EtcdProcess, root: str,
                                                                        bystander: Bystander,
                                                                        recwarn: pytest.WarningsRecorder,
                                                                        asyncio_errors: Callable[[], list[str]]
                                                                        ) -> None:
    # Checked against a _WatchLoop that does not close its loop (fds left open: its selector and self-pipe) and
    # one whose close() does not stop the thread.
    warm = EtcdBackend(etcd_proc.endpoint)  # grpc's process-wide state (its poller thread, fds) comes once
    warm.watch(root, warm.revision() + 1).close()
    warm.close()
    gc.collect()
    threads, fds = set(threading.enumerate()), _fds()
    for _ in range(2):
        backend = EtcdBackend(etcd_proc.endpoint)
        backend.share_watches(root)
        start = backend.revision() + 1
        dedicated = [backend.watch(f"/many-{i}-{root[1:]}", start) for i in range(200)]
        shared = [backend.watch(f"{root}{i}/", start) for i in range(200)]
        key = uuid.uuid4().hex
        backend.create(f"/many-7-{root[1:]}{key}", b"v")
        backend.create(f"{root}7/{key}", b"v")
        for w in (dedicated[7], shared[7]):
            assert _events(w) == [b"v"]
        for w in dedicated[::2] + shared[::2]:  # half closed one by one, the rest by the backend
            w.close()
        backend.close()
        for w in dedicated + shared:
            _ends_with(w, EOFError)
        del dedicated, shared, w, backend
        gc.collect()
        assert [t.name for t in threading.enumerate() if t not in threads] == []
        # grpc closes a channel's sockets on its own threads, a little after close(): wait for them (bounded)
        assert _settles(lambda: _fds() <= fds), f"{_fds()} fds open, {fds} before: {_fd_targets()}"
        bystander.poll()
    assert [str(w.message) for w in recwarn] == []
    assert asyncio_errors() == []


def test_a_watch_closed_from_its_own_listener_on_the_loop_thread(etcd_proc: EtcdProcess, root: str) -> None:
    # A hub's reader queues on its watches, and called their listeners, with the hub's lock held: a listener that
    # closed its watch (unsubscribe takes that lock) deadlocked the loop's thread, every watch of the backend and
    # the backend's close() with it. A dedicated watch closed from its listener must work as well.
    backend = EtcdBackend(etcd_proc.endpoint)
    backend.share_watches(root)
    try:
        start = backend.revision() + 1
        watches = {"hub": backend.watch(root + "a/", start), "dedicated": backend.watch(f"/self-{root[1:]}", start)}
        assert isinstance(watches["hub"], _HubWatch) and not isinstance(watches["dedicated"], _HubWatch)
        other = backend.watch(root, start)  # the hub's other watch, which must go on
        closed = {name: threading.Event() for name in watches}

        def closer(name: str) -> Callable[[], None]:
            def listener() -> None:
                watches[name].close()
                closed[name].set()
            return listener

        for name, w in watches.items():
            w.set_listener(closer(name))
        backend.create(root + "a/k", b"v")
        backend.create(f"/self-{root[1:]}k", b"v")
        for name in watches:
            assert closed[name].wait(BOUND), f"the {name} watch's listener did not return from close()"
        backend.create(root + "b/k", b"w")
        assert _events(other) == [b"v"]
        assert _events(other) == [b"w"]
        for w in watches.values():
            _ends_with(w, EOFError)
        other.close()
    finally:
        closing, _ = _run(backend.close)
        closing.join(BOUND)
        assert not closing.is_alive(), "the backend's close() hung"


def test_nothing_follows_the_end_of_a_closed_watch(etcd_proc: EtcdProcess, root: str) -> None:
    # The reader may be handling a response on the loop's thread while close() runs on another. Its batch used to
    # be queued after close()'s EOFError, and since an error stays queued (moved behind what follows it), a next()
    # after the EOFError returned that batch. Here the late batch is offered from this thread, after close().
    backend = EtcdBackend(etcd_proc.endpoint)
    try:
        w = backend.watch(f"/after-eof-{root[1:]}", backend.revision() + 1)
        assert isinstance(w, _TrackedEtcdWatch)
        w.close()
        late = WatchBatch((WatchEvent("PUT", KeyValue(f"/after-eof-{root[1:]}k", b"v", 5, 5, 1), None),))
        w._inner._offer(late, 1)
        for _ in range(4):  # close()'s EOFError, the reader's, and whatever came after them
            with pytest.raises(EOFError):
                w.next(0)
    finally:
        backend.close()


def test_closing_the_backend_twice_is_quiet(etcd_proc: EtcdProcess, root: str, recwarn: pytest.WarningsRecorder,
                                            asyncio_errors: Callable[[], list[str]]) -> None:
    # The loop's close() ran again on the second close(): scheduling on the closed loop raised RuntimeError
    # ("Event loop is closed") out of EtcdBackend.close() and left a coroutine never awaited.
    backend = EtcdBackend(etcd_proc.endpoint)
    w = backend.watch(f"/twice-{root[1:]}", backend.revision() + 1)
    backend.close()
    backend.close()
    _ends_with(w, EOFError)
    gc.collect()
    assert [str(w.message) for w in recwarn] == []
    assert asyncio_errors() == []


class _EndingWatchServer:
    """A gRPC server with etcd's Watch service alone, which creates each watch and then ends its stream with status
    OK (as a proxy in front of etcd may, going away): what a reader must not take for the watch's own close."""

    def __init__(self) -> None:
        import grpc
        from etcd3 import etcdrpc

        class Servicer(etcdrpc.WatchServicer):  # type: ignore[misc]
            def Watch(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
                next(requests)
                yield etcdrpc.WatchResponse(header=etcdrpc.ResponseHeader(revision=1), created=True)

        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        etcdrpc.add_WatchServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(None)


def test_a_stream_that_ends_without_close_is_an_unavailable_backend(root: str) -> None:
    # A dedicated watch whose stream ended with status OK used to end with EOFError alone, the error that means
    # "you closed it": the garbage collector, for one, takes that as its cue to stop for good. (The hub already
    # turned such an end into BackendUnavailableError for its watches.)
    server = _EndingWatchServer()
    backend = EtcdBackend(f"127.0.0.1:{server.port}")
    backend.share_watches(root)
    try:
        dedicated = backend.watch(f"/ending-{root[1:]}", 1)
        shared = backend.watch(root, 1)
        assert isinstance(shared, _HubWatch) and not isinstance(dedicated, _HubWatch)
        for w in (dedicated, shared):
            _ends_with(w, BackendUnavailableError)
    finally:
        backend.close()
        server.stop()
