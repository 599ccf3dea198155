"""How an :class:`~.etcd.EtcdBackend` reads etcd's watch streams: :class:`_WatchLoop`, the asyncio loop thread
every stream is read on, and :class:`_EtcdWatch`, one gRPC Watch stream read into a queue."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Coroutine
from typing import Any, Final

from .base import (
    BackendUnavailableError,
    BackendWatch,
    CompactedError,
    KeyValue,
    WatchBatch,
    WatchEvent,
    WatchOverflowError,
    prefix_end,
)

_RPC_TIMEOUT: Final = 10.0
#: gRPC's default 4 MiB receive limit fails a range or a watch answer of many or large objects; kube-apiserver's etcd
#: client accepts up to 2 GiB.
_CHANNEL_OPTIONS: Final = (("grpc.max_receive_message_length", 2**31 - 1),)
_ETCD_EVENT_DELETE: Final = 1  # mvccpb.Event.EventType: PUT = 0, DELETE = 1


def _kv_from_pb(pb: Any) -> KeyValue:
    return KeyValue(
        pb.key.decode(), bytes(pb.value), int(pb.create_revision), int(pb.mod_revision), int(pb.version)
    )


class _Pending:
    """How many events a watch has queued that its consumer has not taken yet, against its ``max_pending``.
    Thread-safe: the producing thread reserves, the consuming thread releases."""

    __slots__ = ("_count", "_lock", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        self._lock = threading.Lock()

    def reserve(self, count: int) -> bool:
        """Count ``count`` more events queued; False (nothing counted) if that would pass the limit while some are
        still waiting (a batch larger than the limit is still taken by an empty watch)."""
        with self._lock:
            if self._count + count > self.limit and self._count > 0:
                return False
            self._count += count
            return True

    def release(self, batch: WatchBatch) -> None:
        """The consumer took ``batch``."""
        with self._lock:
            self._count -= max(1, len(batch.events))


class _WatchLoop:
    """Where an :class:`~.etcd.EtcdBackend` reads its watch streams: an asyncio loop in one daemon thread
    (``etcd-watch-loop``) with a ``grpc.aio`` channel of its own to etcd.

    Why not grpc's blocking stream iterator in a thread per watch: it takes one message per ``next()``, and each
    message passes from grpc's polling thread to the reading thread, two GIL hand-offs per event. In an API server
    whose request threads keep the GIL busy, every hand-off can wait up to a switch interval, so under a steady
    stream of writes such a watch falls behind etcd by tens to hundreds of milliseconds and then delivers its
    backlog in bursts. On this loop, grpc's own poller (which holds no GIL) wakes the loop's thread, and every
    message that has arrived is handled in that one wake-up.
    """

    def __init__(self, endpoint: str) -> None:
        self.loop = asyncio.SelectorEventLoop()  # not the policy's: an application's loop policy is not ours to use
        self.thread = threading.Thread(target=self._run, name="etcd-watch-loop", daemon=True)
        self.thread.start()
        self.stub: Any = None
        self._channel: Any = None
        self._close_lock = threading.Lock()
        self._closed = False
        self._closing: asyncio.Task[None] | None = None  # close() from the loop's own thread
        self.run(self._open(endpoint)).result(timeout=_RPC_TIMEOUT)

    def _run(self) -> None:
        self.loop.run_forever()
        # Stopped by close(), the channel closed: let what is still running finish (a reader handling its
        # cancellation, grpc's own tasks of the cancelled calls, which end with grpc's last completions: cancelling
        # them would leave those to arrive at a closed loop) rather than destroy it pending; cancel what is left
        # after 5 s. Then close the loop here, whichever thread stopped it (a loop closes only once stopped).
        tasks = asyncio.all_tasks(self.loop)
        if tasks:
            _, left = self.loop.run_until_complete(asyncio.wait(tasks, timeout=5))
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.wait(left, timeout=1))
        self.loop.close()

    async def _open(self, endpoint: str) -> None:
        import grpc.aio
        from etcd3 import etcdrpc

        # connects lazily, with the first stream
        self._channel = grpc.aio.insecure_channel(endpoint, options=_CHANNEL_OPTIONS)
        self.stub = etcdrpc.WatchStub(self._channel)

    def run(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Schedule ``coro`` on the loop (any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def on_loop(self) -> bool:
        return threading.current_thread() is self.thread

    def close(self) -> None:
        """Close the channel (ending any stream still open) and stop the loop's thread (waits up to 10 s).

        Called on the loop's own thread (from a watch listener), it cannot wait for the loop: it schedules the
        channel's close and the loop's stop, which happen once the running callback has returned.  Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        async def close_channel() -> None:
            await self._channel.close()

        async def close_channel_and_stop() -> None:
            try:
                await close_channel()
            finally:
                self.loop.stop()
        if self.on_loop():
            self._closing = self.loop.create_task(close_channel_and_stop())
            return
        with contextlib.suppress(Exception):  # the loop stops either way
            self.run(close_channel()).result(timeout=5)
        with contextlib.suppress(RuntimeError):  # already closed (it stopped)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class _EtcdWatch(BackendWatch):
    """One gRPC Watch stream, read on the backend's :class:`_WatchLoop` into a queue."""

    def __init__(self, loop: _WatchLoop, prefix: str, start_revision: int, max_pending: int) -> None:
        from etcd3 import etcdrpc

        self._pending = _Pending(max_pending)  # events queued, not yet taken by next()
        self._out: queue.SimpleQueue[WatchBatch | BaseException] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._start_revision = start_revision
        create = etcdrpc.WatchCreateRequest(
            key=prefix.encode(),
            range_end=prefix_end(prefix.encode()),
            start_revision=start_revision,
            prev_kv=True,
            progress_notify=True,
        )
        self._loop = loop
        self._started = threading.Event()  # etcd created the watch, or the stream ended first
        self._call: Any = None  # the grpc.aio stream, once open (touch it only on the loop)
        self._task = self._loop.run(self._read(etcdrpc.WatchRequest(create_request=create)))

    def wait_created(self) -> None:
        """Block until etcd has created the watch, the stream ended or :meth:`close` was called, at most
        ``_RPC_TIMEOUT`` seconds (at once on the watch loop's thread, which cannot wait for itself), so that a change
        made after this returns arrives as a change of its own, as with a watch opened synchronously.  A frozen etcd
        that never answers is not detected here nor by :meth:`next` (which then just times out).  Call it without
        the backend's lock held: other watches and ``close()`` must not wait behind it."""
        if not self._loop.on_loop():
            self._started.wait(_RPC_TIMEOUT)

    async def _read(self, create: Any) -> None:
        """The stream's life, on the watch loop: open it, queue what each response carries, and queue
        :class:`EOFError` last, however it ends (after :class:`BackendUnavailableError` if it ended by other means
        than :meth:`close`)."""
        import grpc
        import grpc.aio

        call: Any = None
        try:
            call = self._call = self._loop.stub.Watch()
            await call.write(create)
            while not self._closed.is_set():
                resp = await call.read()
                if resp is grpc.aio.EOF:  # status OK (etcd ends so only a stream its client stopped writing to)
                    if not self._closed.is_set():
                        self._put(BackendUnavailableError("etcd ended the watch stream"))
                    return
                if not self._handle(resp):
                    return
        except asyncio.CancelledError:  # close(), or the call was cancelled under it
            if not self._closed.is_set():
                self._put(BackendUnavailableError("etcd watch stream cancelled"))
        except grpc.RpcError as exc:
            if not self._closed.is_set():
                self._put(BackendUnavailableError(f"etcd watch failed: {exc}"))
        except Exception as exc:  # pragma: no cover - defensive: never die silently
            self._put(BackendUnavailableError(f"etcd watch failed: {exc!r}"))
        finally:
            if call is not None:
                call.cancel()
            self._put(EOFError("watch closed"))
            self._started.set()

    def _handle(self, resp: Any) -> bool:
        """Queue what one WatchResponse carries; False when the stream is to end."""
        if resp.compact_revision:
            self._put(CompactedError(self._start_revision, int(resp.compact_revision)))
            return False
        if resp.canceled:
            self._put(BackendUnavailableError(f"etcd canceled the watch: {resp.cancel_reason}"))
            return False
        if resp.created:
            self._started.set()
            if not resp.events:
                return True
        if not resp.events:
            return self._offer(WatchBatch((), progress=int(resp.header.revision)), 1)
        events = []
        for ev in resp.events:
            prev = _kv_from_pb(ev.prev_kv) if ev.HasField("prev_kv") else None
            kv = _kv_from_pb(ev.kv)
            if ev.type == _ETCD_EVENT_DELETE:
                events.append(WatchEvent("DELETE", kv, prev))
            else:
                events.append(WatchEvent("PUT", kv, prev))
        return self._offer(WatchBatch(tuple(events)), len(events))

    def _put(self, item: WatchBatch | BaseException) -> None:
        self._out.put(item)
        self._notify()

    def _offer(self, batch: WatchBatch, count: int) -> bool:
        """Queue a batch of ``count`` events; on overflow queue the error, cancel the stream and return False.
        Once closed, nothing: a batch never follows the EOFError that :meth:`close` queues."""
        with self._close_lock:  # with close()'s: a batch is queued before the watch is closed, or not at all
            if self._closed.is_set():
                return False
            queued = self._pending.reserve(count)
            if queued:
                self._out.put(batch)
            else:
                self._overflowed = True
                self._out.put(WatchOverflowError(f"watch consumer more than {self._pending.limit} events behind"))
                self._closed.set()  # the reader ends the stream
        self._notify()  # outside the lock: a listener may close the watch
        return queued

    def next(self, timeout: float | None) -> WatchBatch | None:
        item = self._take(self._out, timeout)
        if item is not None:
            self._pending.release(item)
        return item

    def request_progress(self) -> None:
        # etcd 3.5.1 answers an explicit WatchProgressRequest out of band, possibly
        # before events still queued for this watch (fixed only in 3.5.8), so a
        # revision from it is unsafe.  The periodic notifications requested with
        # progress_notify=True travel through the watch's own channel and are safe;
        # their period is etcd's --experimental-watch-progress-notify-interval.
        return

    def close(self) -> None:
        with self._close_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._task.cancel()
        # The reader queues EOFError as it ends, but a task cancelled before its first step never runs, and the
        # future cannot tell (it is cancelled at once either way, without waiting for the reader): queue it here
        # too (a second EOFError changes nothing).
        self._put(EOFError("watch closed"))
        self._started.set()
