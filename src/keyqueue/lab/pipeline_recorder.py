"""What one pipeline run books, under one lock, and what it answers from that.

A :class:`PipelineRecorder` books every trigger answered (by the pipeline's own trigger server, or from the trigger
process's records), every informer event and the add it made, and every reconcile; the informer's event handlers
(``_on_add``, ``_on_update``, ``_on_delete``) and the controller's reconcile function (``_reconcile``) are its
methods, and book as they go. From that it answers: the verification (every name reconciled after its last
trigger, never by two workers at once), the stage statistics (:mod:`keyqueue.lab.pipeline_stages`), the ``[STATS]``
line and the report (:mod:`keyqueue.lab.pipeline_report`). :class:`keyqueue.lab.pipeline.Pipeline` is a recorder
with the processes and threads that feed it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TextIO

from keyqueue._core import AddResult
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.lab.common import format_duration
from keyqueue.lab.handoff import HandoffProbe, HandoffSample
from keyqueue.lab.load import LoadResult
from keyqueue.lab.pipeline_config import PipelineConfig
from keyqueue.lab.pipeline_report import Verification, format_report, format_stats_line
from keyqueue.lab.pipeline_stages import Samples, StageStats, TimedQueue, replay_bound, slice_summary, stage_stats
from keyqueue.lab.race import SameKeyDetector
from keyqueue.lab.trigger_process import TriggerProcess

__all__ = ["PipelineRecorder"]

_MAX_UNMATCHED: Final = 50_000  # bound on bookkeeping of write/event pairs that never meet (foreign writes)


class PipelineRecorder:
    """The bookkeeping of one pipeline run with ``config``: see the module docstring. ``reconcile``: replaces the
    simulated work; called as ``reconcile(key, obj_or_None)`` in a worker thread (an exception counts as a
    failure). ``out``: where log lines go. :attr:`queue` and :attr:`informer` are set by whoever starts them;
    :attr:`detector` is the same-key detector around every reconcile."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        reconcile: Callable[[str, dict[str, Any] | None], None] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.config = config
        self._reconcile_hook = reconcile
        self.out = out if out is not None else sys.stdout
        self.line_sink: Callable[[str], None] | None = None
        """Where log lines go instead of :attr:`out` while set (a live view prints them above itself)."""
        self._out_lock = threading.RLock()  # re-entered by _enqueue, which keeps an add and its line together
        self._lock = threading.Lock()  # all bookkeeping below
        self._cond = threading.Condition(self._lock)  # notified after every reconcile
        self._samples = Samples()
        # (key, rv) → ns the write was sent and its answer came (no event yet)
        self._write_done: dict[tuple[str, int], tuple[int, int]] = {}
        self._event_seen: dict[tuple[str, int], int] = {}  # (key, rv) → ns the handler ran (no write answer yet)
        # key → (ns of the add that queued it, a worker idle, the probe's CPU clocks at that add when a worker was free
        # for it, a worker free for it: more idle workers than keys already waiting)
        self._pending_get: dict[str, tuple[int, bool, tuple[int, int, int] | None, bool]] = {}
        self.probe = HandoffProbe()
        self._last_trigger_rv: dict[str, int] = {}
        self._reconciled_rv: dict[str, int] = {}
        self._active = 0  # reconciles running now (workers - active = workers waiting in get)
        self._worker_ids: dict[str, int] = {}
        self._triggers = 0
        self._trigger_errors = 0
        self._reconcile_seq = 0
        self._reconciles = 0
        self._reconcile_failures = 0
        self._events = 0
        self._log_counts: dict[str, int] = {}
        self.detector = SameKeyDetector()
        self.informer: Informer | None = None
        self.queue: TimedQueue | None = None
        self._trigger_proc: TriggerProcess | None = None  # its records are booked by _sync_triggers

    # -- logging ---------------------------------------------------------------------------------------------

    def _log(self, kind: str, line: str) -> None:
        limit = self.config.log_lines
        if limit == 0:
            return
        with self._lock:
            n = self._log_counts.get(kind, 0) + 1
            self._log_counts[kind] = n
        if limit < 0 or n <= limit:
            self.print_line(line)
        elif n == limit + 1:
            self.print_line(f"{kind} ... (further {kind} lines suppressed; --log-lines -1 shows all)")

    def _will_print(self, kind: str) -> bool:
        """Whether the next ``kind`` line will be printed (or its "suppressed" note)."""
        limit = self.config.log_lines
        with self._lock:
            return limit < 0 or (limit > 0 and self._log_counts.get(kind, 0) <= limit)

    def print_line(self, line: str) -> None:
        """Write ``line`` to :attr:`out`, or to :attr:`line_sink` while one is set (above a live view)."""
        with self._out_lock:
            sink = self.line_sink
            if sink is not None:
                sink(line)
            else:
                print(line, file=self.out, flush=True)

    # -- triggers answered -----------------------------------------------------------------------------------

    def _sync_triggers(self, records: list[Any] | None = None) -> None:
        """Book the triggers the trigger process answered since the last call (nothing without one)."""
        proc = self._trigger_proc
        if records is None:
            records = proc.collect() if proc is not None else []
        for key, rv, t_start, t_api, t_done, t_end in records:
            if rv < 0:
                with self._lock:
                    self._trigger_errors += 1
            else:
                self._note_trigger(key, rv, t_start, t_api, t_done, t_end)

    def _note_trigger(self, key: str, rv: int, t_start: int, t_api: int, t_done: int, t_end: int) -> None:
        """Book one answered trigger (from this process's trigger server or the trigger process's records): its
        stage samples, the resourceVersion the verification waits for, and the write → event pairing."""
        with self._lock:
            self._triggers += 1
            if rv > self._last_trigger_rv.get(key, 0):
                self._last_trigger_rv[key] = rv
            self._samples.api.append(t_done - t_api)
            seen = self._event_seen.pop((key, rv), None)
            if seen is None:
                if len(self._write_done) >= _MAX_UNMATCHED:
                    self._write_done.clear()
                self._write_done[(key, rv)] = (t_api, t_done)
            else:
                self._samples.write_to_event.append(seen - t_done)
                self._samples.sent_to_event.append(seen - t_api)
            self._samples.handler.append(t_end - t_start)

    # -- informer handlers (informer thread) -----------------------------------------------------------------

    def _on_add(self, obj: dict[str, Any]) -> None:
        self._enqueue(obj, "ADDED", time.perf_counter_ns())

    def _on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._enqueue(new, "MODIFIED" if old is not new else "RESYNC", time.perf_counter_ns())

    def _on_delete(self, obj: Any) -> None:
        self._enqueue(None, "DELETED", time.perf_counter_ns(), key=meta_namespace_key(obj))

    def _enqueue(self, obj: dict[str, Any] | None, kind: str, t_handler: int, key: str = "") -> None:
        queue, informer = self.queue, self.informer
        assert queue is not None and informer is not None
        if not self.probe.informer_watched:
            self.probe.watch_informer_thread(threading.get_ident())  # handlers run in the informer's thread
        received = informer.event_received_ns
        if obj is not None:
            key = meta_namespace_key(obj)
            rv = int(obj["metadata"].get("resourceVersion") or 0)
        else:
            rv = 0
        delta: int | None = None
        waiting = len(queue)  # keys ready, not yet taken (outside self._lock: the queue's lock is not nested in it)
        with self._lock:
            self._events += 1
            self._samples.arrivals.append((t_handler, key))
            if received and kind in ("ADDED", "MODIFIED"):
                self._samples.chunk_to_handler.append(t_handler - received)
                written = self._write_done.pop((key, rv), None)
                if written is None:
                    if len(self._event_seen) >= _MAX_UNMATCHED:
                        self._event_seen.clear()
                    self._event_seen[(key, rv)] = t_handler
                else:
                    delta = t_handler - written[0]
                    self._samples.sent_to_event.append(delta)
                    self._samples.write_to_event.append(t_handler - written[1])
            mine = key not in self._pending_get
            if mine:
                idle = self._active < self.config.workers
                free = self.config.workers - self._active > waiting
                self._pending_get[key] = (t_handler, idle, self.probe.cpu() if free else None, free)
        if delta is not None:
            when = f"{format_duration(delta / 1e9)} after the write was sent"
        else:
            when = "(no matching /trigger write yet)" if kind in ("ADDED", "MODIFIED") and received else ""
        # While this add's line is to be printed, the output stays this thread's from the add to the line, so that a
        # worker's Get line for the key comes after it (the worker's measurement is taken before its line).
        with self._out_lock if self._will_print("[ENQUEUE]") else contextlib.nullcontext():
            t_add = time.perf_counter_ns()
            result = queue.add(key)
            t_added = time.perf_counter_ns()
            with self._lock:
                self._samples.add.append(t_added - t_add)
                if result != AddResult.QUEUED and mine:
                    self._pending_get.pop(key, None)
            self._log("[ENQUEUE]", f"[ENQUEUE] key={key} (informer: {kind}) {when}".rstrip())
        if result == AddResult.MARKED:
            self._log("[REQUEUE-WHILE-PROCESSING]", f"[REQUEUE-WHILE-PROCESSING] key={key} a worker holds this key "
                                                    "— marked, redelivered once at Done()")
        elif result == AddResult.DEDUP:
            self._log("[DEDUP]", f"[DEDUP] key={key} already waiting or marked — Add is a no-op")

    # -- workers ---------------------------------------------------------------------------------------------

    def _worker_id(self) -> int:
        name = threading.current_thread().name
        with self._lock:
            wid = self._worker_ids.get(name)
            if wid is None:
                wid = self._worker_ids[name] = len(self._worker_ids) + 1
        return wid

    def _reconcile(self, key: str) -> None:
        """The controller's reconcile function (a worker thread): read the cache, do the (simulated) work."""
        queue, informer = self.queue, self.informer
        assert queue is not None and informer is not None
        clock = time.perf_counter_ns
        t_get = getattr(queue.local, "t_get", 0) or clock()
        handoff = getattr(queue.local, "handoff", None)
        wid = self._worker_id()
        with self._lock:
            self._active += 1
            self._reconcile_seq += 1
            seq = self._reconcile_seq
            pending = self._pending_get.pop(key, None)
            if pending is not None:
                waited = t_get - pending[0]
                self._samples.enqueue_to_get.append(waited)
                if pending[1]:
                    self._samples.enqueue_to_get_idle.append(waited)
                if pending[3]:
                    self._samples.enqueue_to_get_free.append(waited)
                    if pending[2] is not None and handoff is not None:
                        sched0, sched1, cpu1 = handoff
                        self._samples.handoff.append(HandoffSample.of(waited, pending[2], cpu1, sched0, sched1))
                else:
                    self._samples.enqueue_to_get_busy.append(waited)
        try:
            after = f" {format_duration(waited / 1e9)} after that" if pending is not None else ""
            self._log("[WORKER]", f"[WORKER-{wid}] key={key} Get seq={seq}{after}")
            self.detector.start(key)
            try:
                t0 = clock()
                obj = informer.store.get_by_key(key)
                seen_rv = int(obj["metadata"].get("resourceVersion") or 0) if obj is not None else 0
                if self._reconcile_hook is not None:
                    self._reconcile_hook(key, obj)
                elif self.config.reconcile > 0:
                    time.sleep(self.config.reconcile)
                t1 = clock()
            finally:
                self.detector.finish(key)
        except BaseException:
            with self._cond:
                self._active -= 1
                self._reconcile_failures += 1
                self._cond.notify_all()
            raise  # the controller re-adds the key rate-limited and logs
        with self._cond:
            self._active -= 1
            self._reconciles += 1
            self._samples.reconcile.append(t1 - t0)
            if seen_rv > self._reconciled_rv.get(key, -1):
                self._reconciled_rv[key] = seen_rv
            self._cond.notify_all()

    # -- results ---------------------------------------------------------------------------------------------

    def _lost_names(self) -> list[str]:
        # With the lock held.
        return sorted(k for k, rv in self._last_trigger_rv.items() if self._reconciled_rv.get(k, -1) < rv)

    def wait_reconciled(self, timeout: float) -> bool:
        """Block until every triggered name has been reconciled after its last trigger (``True``), or
        ``timeout`` seconds passed (``False``). With ``trigger_process`` the triggers it answered are collected
        first, and again every 0.5 s while waiting."""
        deadline = time.monotonic() + timeout
        while True:
            self._sync_triggers()
            with self._cond:
                if not self._lost_names():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    def verify(self) -> Verification:
        """The correctness check, now (call :meth:`wait_reconciled` first)."""
        self._sync_triggers()
        with self._lock:
            lost = self._lost_names()
            return Verification(
                names=len(self._last_trigger_rv),
                triggers=self._triggers,
                reconciles=self._reconciles,
                lost=len(lost),
                lost_names=lost[:20],
                violations=self.detector.violations,
            )

    def reset_measurements(self) -> None:
        """Forget the latency samples taken so far (e.g. after a warm-up). Counters and the verification's
        per-name bookkeeping are kept."""
        self._sync_triggers()  # the trigger process's records so far belong to what is forgotten
        with self._lock:
            self._samples = Samples()
            if self.queue is not None:
                self.queue.done_ns = []
                self.queue.busy_ns = []

    def stages(self, recent: int = 0) -> dict[str, StageStats]:
        """Per-stage latency statistics so far; with ``recent > 0``, of each stage's last ``recent`` samples."""
        self._sync_triggers()
        with self._lock:
            s, queue = self._samples, self.queue
            lists = s.by_stage(queue.done_ns if queue is not None else [], queue.busy_ns if queue is not None else [])
            handoff = s.handoff[-recent:] if recent > 0 else s.handoff
        return stage_stats(lists, handoff, recent)

    def handoff_slices(self) -> dict[str, float]:
        """How often the scheduler put a worker free for the key on a core during the ``get`` an add woke it from
        (:class:`~keyqueue.lab.handoff.HandoffSample`): ``n`` samples, ``mean``, ``once`` (share woken once: it got
        the GIL at its first try), ``p50``, ``p95``. Empty without the kernel's counters."""
        with self._lock:
            counts = sorted(h.slices for h in self._samples.handoff if h.slices >= 0)
        return slice_summary(counts)

    def replay_bound(self, limit: int = 100_000) -> dict[str, StageStats]:
        """The adds of this run (its last ``limit``) replayed on instant workers (:func:`keyqueue.lab.replay.replay`,
        the part of enqueue → ``Get`` that the arrivals' bursts set): the waits of the adds that queued a key, with
        ``workers`` workers that take a ready key at once and hold it for exactly the configured reconcile
        (``"reconcile"``; left out with a custom reconcile function) and for the busy times measured in this run, in
        turn (``"measured"``: the reconcile and the worker's own turnaround). Empty before any add."""
        with self._lock:
            arrivals = self._samples.arrivals[-limit:]
        busy = list(self.queue.busy_ns) if self.queue is not None else []
        return replay_bound(arrivals, busy, self.config.workers, self._simulated_reconcile())

    def _simulated_reconcile(self) -> float | None:
        """The simulated reconcile's seconds; ``None`` with a custom reconcile function."""
        return self.config.reconcile if self._reconcile_hook is None else None

    def counters(self) -> tuple[int, int, int]:
        """(triggers handled, informer events, reconciles) so far."""
        self._sync_triggers()
        with self._lock:
            return self._triggers, self._events, self._reconciles

    def stats_line(self) -> str:
        """The ``[STATS]`` line."""
        assert self.queue is not None
        st = self.queue.stats()
        stage = self.stages()["trigger_handler"]
        with self._lock:
            triggers, events, reconciles, lost = self._triggers, self._events, self._reconciles, len(self._lost_names())
        return format_stats_line(st, len(self.queue), stage, triggers, events, reconciles, lost)

    def verdict(self, load: LoadResult | None = None) -> bool:
        """The run's one verdict: verified (:meth:`verify`) and no request of ``load`` failed."""
        return self.verify().ok and (load is None or load.errors == 0)

    def report(self, micro: dict[str, float] | None = None, load: LoadResult | None = None, *,
               interrupted: bool = False, verbose: bool = False) -> str:
        """The stage table (measured in this run; ``verbose``: all of it) and the verification with the run's
        verdict (:meth:`verdict` of ``load``: OK or FAILED; INTERRUPTED instead of OK when a signal cut the load
        short), as text."""
        return format_report(self.stages(), self.replay_bound(), self.handoff_slices(), self.verify(),
                             self.verdict(load), self._simulated_reconcile(), micro, load, interrupted=interrupted,
                             verbose=verbose)
