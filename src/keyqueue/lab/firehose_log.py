"""The firehose's event log: what the generator's adds and the workers' gets and dones did, one line per event,
written from a thread of its own so that the threads that emit events never format or write.

Which events are printed depends on the mode (``keyqueue-lab run``'s ``--verbose``, ``--quiet``, ``--follow``): see
:class:`EventLog`.
"""

from __future__ import annotations

import math
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from keyqueue._core import AddResult
from keyqueue.lab.common import format_count, format_duration

__all__ = ["EventLog"]

_QUEUED, _DEDUP, _MARKED = AddResult.QUEUED, AddResult.DEDUP, AddResult.MARKED

_STOP = object()


class EventLog:
    """Formats events and writes them from one thread, in the order they were emitted.

    Threads call :meth:`emit` with small tuples (cheap; no formatting, no I/O on the caller's thread):

    * ``("add", key, AddResult)`` — a generator add and what the queue did with it
    * ``("get", key, worker, seq)`` — a worker took ``key``; ``seq`` counts hand-outs of that key
    * ``("rl", key, worker, attempt, delay, parts)`` — a failed reconcile went to ``add_rate_limited``; ``parts``
      says what each part of the limiter answered (``" = max(per-key 5ms, bucket(10/s) 59.84s)"``, or empty)
    * ``("done", key, worker, seq, ok, redelivered, failures_forgotten)``
    * ``("line", text)`` — a ready line ([STATS] and the like)

    ``mode="all"`` prints every event. ``mode="follow"`` traces one processing cycle (from a ``Get`` to the next
    ``Get`` of the same key, normally seq+1) of each key every ``follow_every`` seconds (0: every cycle), and folds
    each run of no-op adds into one line. ``mode="none"`` prints only ``line`` events.
    """

    def __init__(self, write: Callable[[str], None], mode: str = "all", follow_every: float = 1.0) -> None:
        self._write = write
        self._mode = mode
        self._every = follow_every
        self._q: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="lab-event-log", daemon=True)
        self.emit: Callable[[Any], None] = self._q.put
        # Printer-thread state
        self._phase: dict[Hashable, str] = {}  # "waiting" | "held" | "marked"
        self._holder: dict[Hashable, int] = {}
        self._tracing: set[Hashable] = set()
        self._trace_started: dict[Hashable, float] = {}
        self._folded: dict[Hashable, int] = {}  # no-op adds not printed yet, per key
        self.lines_written = 0

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending, then stop the thread. Blocks until everything emitted so far is written (at most
        ``timeout`` seconds; ``None``, the default: however long the writes take — a ``--verbose`` run on a slow
        terminal can trail the queue by seconds, and the summary must not overtake or truncate its log)."""
        self._q.put(_STOP)
        self._thread.join(timeout)

    def line(self, text: str) -> None:
        self._q.put(("line", text))

    # printer thread

    def _loop(self) -> None:
        get, get_nowait = self._q.get, self._q.get_nowait
        while True:
            batch = [get()]
            while len(batch) < 2000:
                try:
                    batch.append(get_nowait())
                except stdlib_queue.Empty:
                    break
            out: list[str] = []
            stop = False
            for event in batch:
                if event is _STOP:
                    stop = True
                    break
                self._handle(event, out)
            if stop:
                for key in list(self._folded):
                    self._flush_folded(key, out)
            if out:
                self.lines_written += len(out)
                self._write("\n".join(out))
            if stop:
                return

    def _flush_folded(self, key: Hashable, out: list[str]) -> None:
        n = self._folded.pop(key, 0)
        if n:
            out.append(f"[DEDUP] key={key} … {format_count(n)} more adds, each a no-op the same way")

    def _handle(self, event: tuple[Any, ...], out: list[str]) -> None:
        kind = event[0]
        if kind == "line":
            out.append(event[1])
            return
        key = event[1]
        mode = self._mode
        if kind == "get":
            # "marked" here means a generator add marked the key between the worker's get() and this event (the
            # worker emits after get() returns): the key is held *and* marked. Otherwise it is now simply held.
            if self._phase.get(key) != "marked":
                self._phase[key] = "held"
            self._holder[key] = event[2]
            if mode == "all":
                out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
            elif mode == "follow":
                self._flush_folded(key, out)
                printed = False
                if key in self._tracing:  # the cycle is complete: show the next hand-out and stop
                    out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
                    printed = True
                    self._tracing.discard(key)
                now = time.monotonic()
                if now - self._trace_started.get(key, -math.inf) >= self._every:
                    self._trace_started[key] = now
                    self._tracing.add(key)
                    if not printed:
                        out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
            return
        shown = mode == "all" or (mode == "follow" and key in self._tracing)
        if kind == "add":
            result = event[2]
            phase = self._phase.get(key, "absent")
            if result == _DEDUP:
                if shown:
                    if mode == "follow" and key in self._folded:
                        self._folded[key] += 1
                        return
                    out.append(f"[ENQUEUE] key={key} (generator)")
                    if phase == "marked":
                        why = "already marked for redelivery — the add is a no-op"
                    elif phase == "waiting":
                        why = "already waiting in the FIFO — the add is a no-op"
                    elif phase == "held":  # an add the log did not see (a retry that fired) marked it
                        why = "already marked for redelivery (by a retry that fired) — the add is a no-op"
                    else:  # a retry that fired queued it
                        why = "already waiting in the FIFO (a retry fired) — the add is a no-op"
                    out.append(f"[DEDUP] key={key} {why}")
                    if mode == "follow":
                        self._folded[key] = 0
                return
            if mode == "follow":
                self._flush_folded(key, out)
            if result == _MARKED:
                # Normally the holder's Get was logged already. If not, a worker has taken the key but its Get
                # event is still on its way (the worker emits it after get() returns): do not name a stale holder.
                holder = f"WORKER-{self._holder.get(key, '?')}" if phase == "held" else "a worker (its Get follows)"
                self._phase[key] = "marked"
                if shown:
                    out.append(f"[ENQUEUE] key={key} (generator)")
                    out.append(
                        f"[REQUEUE-WHILE-PROCESSING] key={key} {holder} holds it — "
                        "marked dirty; done() will queue it once more"
                    )
            elif result == _QUEUED:
                self._phase[key] = "waiting"
                if shown:
                    out.append(f"[ENQUEUE] key={key} (generator) → joined the FIFO")
            elif shown:
                out.append(f"[ENQUEUE] key={key} (generator) → dropped: the queue is shutting down")
            return
        if mode == "follow":
            self._flush_folded(key, out)
        if kind == "rl":
            if shown:
                _, _, wid, attempt, delay, parts = event
                out.append(f"[RATELIMIT] key={key} attempt={attempt} backoff={format_duration(delay)}{parts}")
        elif kind == "done":
            _, _, wid, seq, ok, redelivered, forgotten = event
            self._phase[key] = "waiting" if redelivered else "absent"
            if shown:
                if ok:
                    tail = "Forget"
                    if forgotten:
                        tail += f" (backoff reset: {forgotten} failure{'s' if forgotten != 1 else ''} forgotten)"
                else:
                    tail = "AddRateLimited"
                out.append(f"[WORKER-{wid}] key={key} Done seq={seq} result={'OK' if ok else 'ERR'} → {tail}")
                if redelivered:
                    out.append(
                        f"[REDELIVERY] key={key} was added while WORKER-{wid} held it → done() put it back in "
                        "the FIFO (once)"
                    )

