"""Every row of the benchmark table: what it measures, its baseline, its target and client-go's figure.

Rows whose module has not landed yet (``keyqueue.aio``, ``keyqueue.metrics.PrometheusMetricsProvider``,
``keyqueue.PriorityQueue``) report a skip with the reason and light up by themselves once the module exists.
Keys are strings shaped like controller keys (``default/obj-N``), hashed once before timing (a str caches its hash)
so the rows measure the queue, not string hashing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import inspect
import os
import queue
import statistics
import threading
import time
import tracemalloc
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import keyqueue
from benchmarks.harness import Case, Check, Context, Measurement, Skip, time_batch, time_inline
from benchmarks.naive import NaiveWorkQueue
from benchmarks.scaling import reconcile_throughput
from benchmarks.threads import adders_workers, firehose, race, race_via_lab, wakeup_latency
from keyqueue import (
    DelayingQueue,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    Queue,
    RateLimitingQueue,
)
from keyqueue import _gil as gil

__all__ = ["build_cases", "keys"]

KEY = "default/obj-7"
_KEYS: list[str] = []


def keys(n: int) -> list[str]:
    """The first ``n`` distinct keys ``default/obj-0`` ... (created once per process, hashes cached)."""
    for i in range(len(_KEYS), n):
        k = f"default/obj-{i}"
        hash(k)
        _KEYS.append(k)
    return _KEYS[:n]


# -- keyqueue, threading shell ---------------------------------------------------------------------------------------


def _add_new(n: int) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        return time_batch(ctx, "for k in ks: add(k)", "q = Queue(); add = q.add", {"Queue": Queue, "ks": keys(n)},
                          ops=n, unit="ns/op")
    return run


def _add_dedup(ctx: Context) -> Measurement:
    return time_inline(ctx, "add(k)", "q = Queue(); add = q.add; add(k)", {"Queue": Queue, "k": KEY})


def _add_processing_mark(n: int) -> Callable[[Context], Measurement]:
    # Fresh state per repeat: n keys all being processed and not dirty; each add marks one (MARKED, under the lock).
    setup = "q = Queue(); add = q.add\nfor k in ks: add(k)\nfor _ in ks: q.get()"
    def run(ctx: Context) -> Measurement:
        return time_batch(ctx, "for k in ks: add(k)", setup, {"Queue": Queue, "ks": keys(n)}, ops=n, unit="ns/op")
    return run


def _add_processing_dedup(ctx: Context) -> Measurement:
    return time_inline(ctx, "add(k)", "q = Queue(); add = q.add; add(k); q.get(); add(k)", {"Queue": Queue, "k": KEY})


_CYCLE = "add(k); get(); done(k)"
_CYCLE_SETUP = "add = q.add; get = q.get; done = q.done"


def _cycle_of(make: Callable[[], Any]) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        return time_inline(ctx, _CYCLE, _CYCLE_SETUP, {"q": make(), "k": KEY})
    return run


def _cycle_floor(ctx: Context) -> Measurement:
    # The floor: what add+get+done must do, written inline (no method calls): the dirty/processing sets, the
    # deque and three lock pairs, in client-go's order. No dedup fast path, no metrics, no waking.
    stmt = (
        "acquire()\nif k not in dirty:\n    dirty.add(k)\n    if k not in processing: append(k)\nrelease()\n"
        "acquire()\nx = popleft(); dirty.remove(x); processing.add(x)\nrelease()\n"
        "acquire()\nprocessing.remove(k)\nif k in dirty: append(k)\nrelease()"
    )
    setup = ("lock = Lock(); acquire = lock.acquire; release = lock.release; fifo = deque(); append = fifo.append; "
             "popleft = fifo.popleft; dirty = set(); processing = set()")
    return time_inline(ctx, stmt, setup, {"deque": deque, "Lock": threading.Lock, "k": KEY})


def _metrics_floor(ctx: Context) -> Measurement:
    # base.floor with what client-go's metrics add to it, also inline: three reads of the monotonic clock (add,
    # get, done), the dirty and processing dicts holding each key's time (so depth is len(dirty)), and the queue
    # and work durations appended to two buffers that are emptied every 256.
    # The Prometheus objects are not touched: this is the least a queue can do per cycle and still report them.
    stmt = (
        "acquire()\nif k not in dirty:\n    dirty[k] = now()\n    if k not in processing: append(k)\nrelease()\n"
        "acquire()\nx = popleft(); t = now(); processing[x] = t; t0 = dirty[x]; del dirty[x]; qobs(t - t0)\n"
        "if len(qo) >= 256: del qo[:]; del wo[:]\nrelease()\n"
        "acquire()\nt0 = processing[k]; del processing[k]\nif k in dirty: append(k)\nwobs(now() - t0)\nrelease()"
    )
    setup = ("lock = Lock(); acquire = lock.acquire; release = lock.release; fifo = deque(); append = fifo.append; "
             "popleft = fifo.popleft; dirty = {}; processing = {}; qo = []; wo = []; qobs = qo.append; "
             "wobs = wo.append")
    return time_inline(ctx, stmt, setup, {"deque": deque, "Lock": threading.Lock, "k": KEY, "now": time.monotonic_ns})


def _iterate(ctx: Context) -> Measurement:
    # `for key in q: q.add(key)` unrolled: each next() finishes the previous key and takes the next one.
    return time_inline(ctx, "add(k); nx()", "add = q.add; add(k); nx = iter(q).__next__; nx()",
                       {"q": Queue(), "k": KEY})


def _cycle_new_key(n: int) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        return time_batch(ctx, "for k in ks: add(k); get(); done(k)", "q = Queue(); " + _CYCLE_SETUP,
                          {"Queue": Queue, "ks": keys(n)}, ops=n, unit="ns/op")
    return run


def _bulk(n: int) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        ks = keys(n)
        return time_batch(ctx, "for k in ks: add(k)\nfor _ in ks: done(get())", "q = Queue(); " + _CYCLE_SETUP,
                          {"Queue": Queue, "ks": ks}, ops=n)
    return run


def _bulk_memory(n: int) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        ks = keys(n)  # the key strings exist before tracing starts: only the queue's own memory is counted
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            q: Queue[str] = Queue()
            add, get, done = q.add, q.get, q.done
            for k in ks:
                add(k)
            after_adds = tracemalloc.get_traced_memory()[0] - base
            for _ in ks:
                done(get())
            current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return Measurement(
            "B/key", [(peak - base) / n], ops=n,
            note=f"held after adds {after_adds / n:.0f} B/key; after drain {(current - base) / n:.0f} B/key "
                 "(sets do not shrink)",
            extra={"peak_bytes": peak - base, "after_adds_bytes": after_adds, "after_drain_bytes": current - base},
        )
    return run


def _add_after(n: int, fake: bool) -> Callable[[Context], Measurement]:
    if fake:
        setup = ("clock = FakeClock(); q = DelayingQueue(clock=clock); add_after = q.add_after; get = q.get; "
                 "done = q.done")
        stmt = "for k in ks: add_after(k, 0.001)\nclock.step(0.002)\nfor _ in ks: done(get())"
    else:
        setup = "q = DelayingQueue(); add_after = q.add_after; get = q.get; done = q.done"
        stmt = "for k in ks: add_after(k, 0.001)\nfor _ in ks: done(get())"

    def run(ctx: Context) -> Measurement:
        return time_batch(ctx, stmt, setup, {"DelayingQueue": DelayingQueue, "FakeClock": FakeClock, "ks": keys(n)},
                          ops=n)
    return run


def _rate_limited(n: int) -> Callable[[Context], Measurement]:
    setup = ("q = RateLimitingQueue(Limiter(0.001, 1000.0)); arl = q.add_rate_limited; get = q.get; done = q.done; "
             "forget = q.forget")
    stmt = "for k in ks: arl(k)\nfor _ in ks:\n    k = get(); forget(k); done(k)"

    def run(ctx: Context) -> Measurement:
        g = {"RateLimitingQueue": RateLimitingQueue, "Limiter": ItemExponentialFailureRateLimiter, "ks": keys(n)}
        return time_batch(ctx, stmt, setup, g, ops=n)
    return run


def _rate_limited_default(n: int) -> Callable[[Context], Measurement]:
    # The row: the default controller limiter (per-key exponential max a 10 qps bucket) on a FakeClock,
    # stepped far enough for every key to be due.
    setup = ("clock = FakeClock(); q = RateLimitingQueue(clock=clock); arl = q.add_rate_limited; get = q.get; "
             "done = q.done; forget = q.forget")
    stmt = "for k in ks: arl(k)\nclock.step(1e6)\nfor _ in ks:\n    k = get(); forget(k); done(k)"

    def run(ctx: Context) -> Measurement:
        g = {"RateLimitingQueue": RateLimitingQueue, "FakeClock": FakeClock, "ks": keys(n)}
        return time_batch(ctx, stmt, setup, g, ops=n)
    return run


# -- optional modules ------------------------------------------------------------------------------------------------


def _prometheus_provider() -> Any:
    """A fresh ``PrometheusMetricsProvider`` on a private registry, or a :class:`Skip` saying why not."""
    mod = importlib.import_module("keyqueue.metrics")
    cls = getattr(mod, "PrometheusMetricsProvider", None)
    if cls is None:
        return Skip("keyqueue.metrics.PrometheusMetricsProvider does not exist yet (metrics issue in progress)")
    try:
        from prometheus_client import CollectorRegistry
    except ImportError as e:
        return Skip(f"prometheus_client not installed ({e})")
    return cls(registry=CollectorRegistry())


def _metrics_row(stmt: str, setup: str) -> Callable[[Context], Measurement | Skip]:
    def run(ctx: Context) -> Measurement | Skip:
        provider = _prometheus_provider()
        if isinstance(provider, Skip):
            return provider
        q: Queue[str] = Queue(name="keyqueue_bench", metrics_provider=provider)
        return time_inline(ctx, stmt, setup, {"q": q, "k": KEY})
    return run


def _named_no_provider(ctx: Context) -> Measurement:
    return time_inline(ctx, _CYCLE, _CYCLE_SETUP, {"q": Queue(name="keyqueue_bench_noop"), "k": KEY})


def _async_loop_row(
    ctx: Context, make: Callable[[], Awaitable[Any]], body: Callable[[Any, str, int], Awaitable[None]]
) -> Measurement:
    """ns per iteration of ``body(q, key, n)`` (a coroutine looping ``n`` times) on a private event loop."""
    n = ctx.size(100_000, 2_000)
    loop = asyncio.new_event_loop()
    try:
        q = loop.run_until_complete(make())
        m = time_batch(ctx, "run(body(q, k, n))", "pass",
                       {"run": loop.run_until_complete, "body": body, "q": q, "k": KEY, "n": n}, ops=n, unit="ns/op",
                       repeats=ctx.repeats)
        m.loops = n
        return m
    finally:
        loop.close()


async def _aio_cycle_sync_add(q: Any, k: str, n: int) -> None:
    add, get, done = q.add, q.get, q.done
    for _ in range(n):
        add(k)
        await get()
        done(k)


async def _aio_cycle_async_add(q: Any, k: str, n: int) -> None:
    add, get, done = q.add, q.get, q.done
    for _ in range(n):
        await add(k)
        await get()
        await done(k)


def _import_aio() -> Any:
    try:
        return importlib.import_module("keyqueue.aio")
    except ImportError as e:
        return Skip(f"keyqueue.aio is not importable yet (asyncio shell issue in progress): {e}")


def _aio_row(cls_name: str, iterate: bool = False) -> Callable[[Context], Measurement | Skip]:
    """A row of one ``keyqueue.aio`` class, the queue built in the row's loop (a loop-owned queue binds to it):
    the add + get + done cycle, or ``async for`` with an add per iteration (``iterate``)."""
    def run(ctx: Context) -> Measurement | Skip:
        aio = _import_aio()
        if isinstance(aio, Skip):
            return aio
        cls = getattr(aio, cls_name)

        async def make() -> Any:
            return cls()

        if iterate:
            body = _aio_iterate_body
        else:
            body = _aio_cycle_async_add if inspect.iscoroutinefunction(cls.add) else _aio_cycle_sync_add
        return _async_loop_row(ctx, make, body)
    return run


async def _aio_iterate_body(q: Any, k: str, n: int) -> None:
    add = q.add
    it = q.__aiter__()
    nx = it.__anext__
    add(k)
    await nx()
    for _ in range(n):
        add(k)
        await nx()
    await it.aclose()


def _aio_dedup(ctx: Context) -> Measurement | Skip:
    aio = _import_aio()
    if isinstance(aio, Skip):
        return aio
    if inspect.iscoroutinefunction(aio.Queue.add):
        return Skip("keyqueue.aio.Queue.add is a coroutine; this row times the plain-method add")
    loop = asyncio.new_event_loop()
    try:
        async def make() -> Any:
            return aio.Queue()
        q = loop.run_until_complete(make())
        return time_inline(ctx, "add(k)", "add = q.add; add(k)", {"q": q, "k": KEY})
    finally:
        loop.close()


def _priority_cls() -> Any:
    return keyqueue.PriorityQueue


def _prio_cycle(priority: int | None) -> Callable[[Context], Measurement | Skip]:
    def run(ctx: Context) -> Measurement | Skip:
        cls = _priority_cls()
        if isinstance(cls, Skip):
            return cls
        stmt = _CYCLE if priority is None else f"add(k, priority={priority}); get(); done(k)"
        return time_inline(ctx, stmt, _CYCLE_SETUP, {"q": cls(), "k": KEY})
    return run


def _prio_bulk(n: int) -> Callable[[Context], Measurement | Skip]:
    def run(ctx: Context) -> Measurement | Skip:
        cls = _priority_cls()
        if isinstance(cls, Skip):
            return cls
        kp = [(k, i % 5) for i, k in enumerate(keys(n))]
        return time_batch(ctx, "for k, p in kp: add(k, priority=p)\nfor _ in kp: done(get())",
                          "q = PQ(); " + _CYCLE_SETUP, {"PQ": cls, "kp": kp}, ops=n)
    return run


# -- baselines -------------------------------------------------------------------------------------------------------


def _loop_overhead(ctx: Context) -> Measurement:
    return time_inline(ctx, "pass")


def _set_in(ctx: Context) -> Measurement:
    return time_inline(ctx, "k in s", "s = {k}", {"k": KEY})


def _lock_pair(ctx: Context) -> Measurement:
    return time_inline(ctx, "acquire(); release()", "lock = Lock(); acquire = lock.acquire; release = lock.release",
                       {"Lock": threading.Lock})


def _stdlib_put_get(cls: Callable[[], Any]) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        return time_inline(ctx, "put(k); get()", "q = cls(); put = q.put; get = q.get", {"cls": cls, "k": KEY})
    return run


def _deque_lock(ctx: Context) -> Measurement:
    setup = ("d = deque(); lock = Lock(); acquire = lock.acquire; release = lock.release; "
             "append = d.append; popleft = d.popleft")
    return time_inline(ctx, "acquire(); append(k); release(); acquire(); popleft(); release()", setup,
                       {"deque": deque, "Lock": threading.Lock, "k": KEY})


async def _asyncio_queue_body(q: Any, k: str, n: int) -> None:
    put, get = q.put, q.get
    for _ in range(n):
        await put(k)
        await get()


def _asyncio_queue(ctx: Context) -> Measurement:
    async def make() -> Any:
        return asyncio.Queue()
    return _async_loop_row(ctx, make, _asyncio_queue_body)


def _aiok8s(ctx: Context) -> Measurement | Skip:
    try:
        from aiok8s.workqueue import queue as aiok8s_queue  # type: ignore[import-untyped]
    except Exception as e:  # it is an old package: any import-time failure is a reason to skip, recorded
        return Skip(f"aiok8s 0.0.2 does not import here: {type(e).__name__}: {e} "
                    "(install it with: .venv/bin/pip install aiok8s==0.0.2)")

    async def make() -> Any:
        return aiok8s_queue.new()
    return _async_loop_row(ctx, make, _aio_cycle_async_add)


# -- scaling ---------------------------------------------------------------------------------------------------------


_SCALE_QUEUES: dict[int, Queue[str]] = {}


def _scale(n: int) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        # Steady state: n keys queued; each cycle takes the head, finishes it and adds it back at the tail. The
        # queue is built once per process and reused by later rounds (the cycle keeps it at n keys).
        q = _SCALE_QUEUES.get(n)
        if q is None:
            q = _SCALE_QUEUES[n] = Queue()
            for k in keys(n):
                q.add(k)
        m = time_inline(ctx, "k = get(); done(k); add(k)", _CYCLE_SETUP, {"q": q})
        m.extra["keys_queued"] = n
        if len(q) != n:
            raise AssertionError(f"scaling row lost its steady state: {len(q)} keys queued, expected {n}")
        return m
    return run


def _flatness(ids: list[str]) -> Callable[[Context], Measurement | Skip]:
    def run(ctx: Context) -> Measurement | Skip:
        rows = [ctx.results[i] for i in ids if i in ctx.results]
        if len(rows) < 2:
            return Skip("needs at least two scaling rows")
        meds = [r.median for r in rows]
        bests = [r.min for r in rows]
        return Measurement(
            "x", [max(meds) / min(meds)],
            note=("largest / smallest median over " + ", ".join(f"{r.m.extra['keys_queued']:,}" for r in rows)
                  + f" keys queued; on the best repeats: {max(bests) / min(bests):.2f}x"),
            extra={"sizes": [r.m.extra["keys_queued"] for r in rows], "medians_ns": meds, "best_ns": bests,
                   "flatness_best": max(bests) / min(bests)},
        )
    return run


# -- throughput ------------------------------------------------------------------------------------------------------


def _firehose(duration_s: float) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        runs = [firehose(duration_s) for _ in range(ctx.size(3, 2))]
        return Measurement(
            "adds/s", [r["adds_per_s"] for r in runs], ops=sum(r["adds"] for r in runs), higher_is_better=True,
            note=f"{duration_s:g} s per run; keys processed per run: {', '.join(str(r['processed']) for r in runs)}",
            extra={"runs": runs, "duration_s": duration_s, "keys": 20, "workers": 5, "work_s": 0.005},
        )
    return run


def _adders_workers(duration_s: float) -> Callable[[Context], Measurement]:
    # keyqueue and queue.Queue alternate (kq, q, kq, q, ...) so both see the same background load; the
    # queue.Queue runs become the base.queue_workers row.
    def run(ctx: Context) -> Measurement:
        kq: list[dict[str, Any]] = []
        plain: list[dict[str, Any]] = []
        for _ in range(ctx.size(3, 1)):
            kq.append(adders_workers("keyqueue", duration_s))
            plain.append(adders_workers("queue.Queue", duration_s))
        med = statistics.median
        return Measurement(
            "keys/s", [r["processed_per_s"] for r in kq], higher_is_better=True,
            note=(f"{duration_s:g} s per run; adds/s " + ", ".join(f"{r['adds_per_s'] / 1e6:.2f} M" for r in kq)
                  + "; voluntary context switches/s " + ", ".join(f"{r['voluntary_switches_per_s']:,.0f}" for r in kq)
                  + " (queue.Queue: " + ", ".join(f"{r['voluntary_switches_per_s']:,.0f}" for r in plain) + ")"),
            extra={"runs": kq, "queue_runs": plain, "adds_per_s": med(r["adds_per_s"] for r in kq),
                   "duration_s": duration_s, "adders": 8, "workers": 4, "keys": 10_000},
        )
    return run


def _worker_counts() -> list[int]:
    """1, 2, then powers of two up to the machine's cores (at most 8)."""
    cores = min(os.cpu_count() or 1, 8)
    counts = [1, 2]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return counts


def _aio_worker_counts() -> list[int]:
    """The worker counts, plus one more than the cores: an asyncio worker waits out two thread hand-offs per key
    (to the executor and back), which one more worker than cores covers."""
    counts = _worker_counts()
    return [*counts, counts[-1] + 1]


def _reconcile_scaling(kinds: tuple[str, ...], n_keys: int) -> Callable[[Context], Measurement]:
    # Every kind and worker count runs in each repeat, in alternating order (1 2 4, 4 2 1, ...), so all see the same
    # background load; the first kind's one-worker runs are this row, the others become the rows that read them
    # (_scaling_row).
    def run(ctx: Context) -> Measurement:
        counts = _aio_worker_counts() if kinds[0] == "aio" else _worker_counts()
        runs: dict[str, list[dict[str, Any]]] = {f"{k}.{w}": [] for k in kinds for w in counts}
        for i in range(ctx.size(5, 1)):
            order = [(k, w) for w in counts for k in kinds]
            for kind, w in order if i % 2 == 0 else reversed(order):
                runs[f"{kind}.{w}"].append(reconcile_throughput(kind, w, n_keys=n_keys))
        first = runs[f"{kinds[0]}.1"]
        return Measurement(
            "keys/s", [r["keys_per_s"] for r in first], higher_is_better=True,
            note=(f"{n_keys:,} keys per run, reconcile = {first[0]['spin_rounds']:,} rounds of pure-Python arithmetic "
                  f"(~{first[0]['work_us']:g} µs on one thread); {'GIL' if gil.GIL else 'free-threaded, no GIL'}"),
            extra={"runs": runs, "gil": gil.GIL},
        )
    return run


def _scaling_row(first: str, run_key: str) -> Callable[[Context], Measurement | Skip]:
    def run(ctx: Context) -> Measurement | Skip:
        src = ctx.results.get(first)
        if src is None:
            return Skip(f"measured by the {first!r} row")
        runs = src.m.extra["runs"].get(run_key)
        if not runs:
            return Skip(f"{run_key}: more workers than this machine's cores")
        return Measurement("keys/s", [r["keys_per_s"] for r in runs], higher_is_better=True,
                           note=f"runs alternating with the other rows of {first!r}", extra={"runs": runs})
    return run


def _queue_workers(ctx: Context) -> Measurement | Skip:
    src = ctx.results.get("workers")
    if src is None:
        return Skip("measured by the 'workers' row")
    runs = src.m.extra["queue_runs"]
    return Measurement("keys/s", [r["processed_per_s"] for r in runs], higher_is_better=True,
                       note="the same scenario on queue.Queue (put/get, no dedup), alternating with the keyqueue runs",
                       extra={"runs": runs})


def _wakeup(kind: str) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        runs = [wakeup_latency(kind, ctx.size(400, 40)) for _ in range(ctx.size(3, 1))]
        return Measurement(
            "µs", [r["median_us"] for r in runs],
            note="per run: median / p90 / max " + "; ".join(
                f"{r['median_us']:,.0f} / {r['p90_us']:,.0f} / {r['max_us']:,.0f} µs" for r in runs),
            extra={"runs": runs},
        )
    return run


def _race(control: bool, size: dict[str, Any]) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        outcome = race_via_lab(control=control, **size)
        note = f"harness: {outcome.harness}" if outcome is not None else ""
        if outcome is None:
            outcome = race(control=control, **size)
            note = "keyqueue.lab.race.run_race not available: benchmarks.threads.race"
        d = outcome.as_dict()
        text = (f"{d['workers']} workers, {d['keys']} keys, {d['producers']} producers, {d['adds']:,} adds, "
                f"{d['hold_s'] * 1e6:g} µs sleep hold: reconciles={d['reconciles']:,} violations={d['violations']:,} "
                f"collapse={d['collapse']:.1f}x max-in-flight={d['max_in_flight']}")
        return Measurement("s", [outcome.elapsed_s], ops=outcome.adds, note=(text + ("; " + note if note else "")),
                           extra=d)
    return run


# -- the table -------------------------------------------------------------------------------------------------------

G_CORE = "keyqueue, threading shell"
G_OPT = "keyqueue, optional modules"
G_BASE = "baselines (same run)"
G_SCALE = "scaling: add+get+done with N keys queued"
G_THRU = "throughput (threads)"
G_CORES = "reconciles on every core: CPU-bound reconcile (~250 µs), keys/s by workers"


def build_cases(smoke: bool) -> list[Case]:
    """All rows, in table order, sized for ``smoke`` or a full run."""
    def size(full: int, small: int) -> int:
        return small if smoke else full

    n_new = size(100_000, 2_000)
    n_bulk = size(1_000_000, 10_000)
    n_delay = size(100_000, 2_000)
    scale_sizes = [10**3, 10**4, 10**5] if smoke else [10**3, 10**4, 10**5, 10**6]
    scale_ids = [f"scale.1e{len(str(n)) - 1}" for n in scale_sizes]
    race_size: dict[str, Any] = (
        {"workers": 4, "keys": 8, "producers": 2, "adds": 4_000, "hold_s": 20e-6}
        if smoke else {"workers": 16, "keys": 64, "producers": 8, "adds": 320_000, "hold_s": 20e-6}
    )

    cycle_targets = (Check("≤ 700 ns", "le", 700.0), Check("≤ 1/1.5 of queue.Queue", "le", 1 / 1.5, ref="base.queue"))
    cases = [
        Case("add.new", f"add, new key → QUEUED ({n_new:,} keys)", G_CORE, _add_new(n_new)),
        Case("add.dedup", "add, key waiting → DEDUP no-op", G_CORE, _add_dedup, baseline="base.set_in",
             checks=(Check("≤ 100 ns", "le", 100.0),), reference="18 ns"),
        Case("add.processing", f"add, key being processed → MARKED ({n_new:,} keys)", G_CORE,
             _add_processing_mark(n_new)),
        Case("add.processing_dedup", "add, key processing + already marked → DEDUP", G_CORE, _add_processing_dedup,
             baseline="base.set_in", reference="22 ns"),
        Case("cycle", "add+get+done, one key", G_CORE, _cycle_of(Queue), baseline="base.queue",
             checks=cycle_targets, reference="108–115 ns"),
        Case("iter", "for key in q: + add(key) per iteration", G_CORE, _iterate, baseline="cycle",
             checks=(Check("≤ 600 ns", "le", 600.0),), needs=("cycle",)),
        Case("cycle.newkey", f"add+get+done, a new key each cycle ({n_new:,})", G_CORE, _cycle_new_key(n_new),
             baseline="cycle", reference="104 ns"),
        Case("bulk", f"{n_bulk:,} keys: add all, then get+done all", G_CORE, _bulk(n_bulk),
             checks=(Check("≤ 1,200 ns/key", "le", 1200.0),), reference="744–775 ns/key"),
        Case("bulk.mem", f"{n_bulk:,} keys: peak queue memory (tracemalloc)", G_CORE, _bulk_memory(n_bulk),
             checks=(Check("≤ 200 B/key", "le", 200.0),)),
        Case("delay.real", f"add_after(1 ms) ×{n_delay:,}, then drain (real clock)", G_CORE,
             _add_after(n_delay, fake=False), checks=(Check("≤ 2,500 ns/key", "le", 2500.0),),
             reference="1,056 ns/key"),
        Case("delay.fake", f"add_after(1 ms) ×{n_delay:,}, FakeClock.step, drain", G_CORE,
             _add_after(n_delay, fake=True)),
        Case("ratelimited", f"add_rate_limited ×{n_delay:,} (per-key 1 ms), then drain", G_CORE,
             _rate_limited(n_delay), reference="1,354–1,405 ns/key"),
        Case("ratelimited.default", f"add_rate_limited ×{n_delay:,} (default limiter, FakeClock), then drain",
             G_CORE, _rate_limited_default(n_delay), checks=(Check("≤ 5,000 ns/key", "le", 5000.0),)),
        # optional modules
        Case("metrics.cycle", "add+get+done, PrometheusMetricsProvider", G_OPT, _metrics_row(_CYCLE, _CYCLE_SETUP),
             baseline="cycle", checks=(Check("≤ 1.5x without metrics", "le", 1.5, ref="cycle"),), needs=("cycle",)),
        Case("metrics.dedup", "add dedup, PrometheusMetricsProvider", G_OPT,
             _metrics_row("add(k)", "add = q.add; add(k)"), baseline="add.dedup",
             checks=(Check("≤ 2x without metrics", "le", 2.0, ref="add.dedup"),), needs=("add.dedup",)),
        Case("metrics.noop", "add+get+done, named queue, default provider", G_OPT, _named_no_provider,
             baseline="cycle", needs=("cycle",)),
        Case("aio.cycle", "asyncio shell: add + await get + done", G_OPT, _aio_row("Queue"), baseline="cycle",
             checks=(Check("≤ 1.5x threading cycle", "le", 1.5, ref="cycle"),), needs=("cycle",)),
        Case("aio.iter", "asyncio shell: async for key in q: + add(key)", G_OPT, _aio_row("Queue", iterate=True),
             baseline="base.asyncio", needs=("base.asyncio",)),
        Case("aio.dedup", "asyncio shell: add, key waiting → DEDUP", G_OPT, _aio_dedup, baseline="add.dedup",
             needs=("add.dedup",)),
        Case("prio.cycle", "PriorityQueue add+get+done, one key", G_OPT, _prio_cycle(None), baseline="cycle",
             needs=("cycle",)),
        Case("prio.cycle_priority", "PriorityQueue add(priority=5)+get+done", G_OPT, _prio_cycle(5),
             baseline="cycle", needs=("cycle",)),
        Case("prio.bulk", f"PriorityQueue {n_delay:,} keys × 5 priorities: add, drain", G_OPT, _prio_bulk(n_delay)),
        # baselines
        Case("base.loop", "timeit loop overhead (included in every row)", G_BASE, _loop_overhead),
        Case("base.set_in", "`k in set` (hit)", G_BASE, _set_in, reference="11.5 ns (CPython)"),
        Case("base.lock", "lock.acquire() + release()", G_BASE, _lock_pair, reference="60–62 ns (CPython)"),
        Case("base.queue", "queue.Queue put+get", G_BASE, _stdlib_put_get(queue.Queue),
             reference="1,040–1,120 ns (CPython)"),
        Case("base.simplequeue", "queue.SimpleQueue put+get", G_BASE, _stdlib_put_get(queue.SimpleQueue),
             reference="38–40 ns (CPython)"),
        Case("base.deque_lock", "deque + Lock put+get (locked lower bound)", G_BASE, _deque_lock),
        Case("base.floor", "add+get+done inlined: set/deque ops + 3 lock pairs, no calls", G_BASE, _cycle_floor),
        Case("base.metrics_floor", "the same floor with the metrics' work: 3 clock reads, 2 time dicts, 2 buffers",
             G_BASE, _metrics_floor, baseline="base.floor", needs=("base.floor",)),
        Case("base.naive", "naive locked workqueue add+get+done", G_BASE, _cycle_of(NaiveWorkQueue),
             reference="790–1,100 ns (CPython)"),
        Case("base.asyncio", "asyncio.Queue await put + await get", G_BASE, _asyncio_queue),
        Case("base.aiok8s", "aiok8s 0.0.2 await add+get+done", G_BASE, _aiok8s),
    ]
    for n, cid in zip(scale_sizes, scale_ids, strict=True):
        cases.append(Case(cid, f"{n:,} keys queued", G_SCALE, _scale(n), baseline=scale_ids[0],
                          reference="172 ns (10k)" if n == 10**4 else ""))
    interleaved = {
        "add.dedup", "add.processing_dedup", "cycle", "base.floor", "base.metrics_floor", "iter", "aio.iter",
        "metrics.cycle", "metrics.dedup", "metrics.noop", "aio.cycle", "aio.dedup", "prio.cycle", "prio.cycle_priority",
        "base.loop", "base.set_in", "base.lock", "base.queue", "base.simplequeue", "base.deque_lock", "base.naive",
        "base.asyncio", "base.aiok8s", *scale_ids,
    }
    # "Flat" (O(1) per operation): 1,000x more keys may cost a little more through cache misses, not by a factor
    # that grows with the size (O(log n) would be ~2x over this range, O(n) ~1,000x).
    cases.append(Case("scale.flatness", "flatness: largest / smallest", G_SCALE, _flatness(scale_ids),
                      checks=(Check("flat: ≤ 1.5x", "le", 1.5),), needs=tuple(scale_ids)))
    fh = 0.2 if smoke else 1.0
    cases += [
        Case("firehose", "firehose: 1 producer, 20 keys, 5 workers × 5 ms", G_THRU, _firehose(fh),
             checks=(Check("≥ 1,000,000 adds/s", "ge", 1e6),)),
        Case("workers", "8 adder threads (10,000 keys) + 4 workers: keys processed/s", G_THRU,
             _adders_workers(0.3 if smoke else 2.0), baseline="base.queue_workers",
             checks=(Check("≥ 2x queue.Queue (same run)", "ge", 2.0, ref="base.queue_workers"),
                     Check("adds ≥ 1 M/s", "ge", 1e6, field="adds_per_s")), reference="878,777",
             needs=("base.queue_workers",)),
        Case("base.queue_workers", "the same on queue.Queue (put/get): keys processed/s", G_THRU, _queue_workers,
             needs=("workers",)),
        Case("wakeup", "add → blocked worker's get, adder thread busy adding (median)", G_THRU, _wakeup("keyqueue"),
             baseline="base.wakeup", checks=(Check("≤ 300 µs", "le", 300.0),)),
        Case("base.wakeup", "the same: queue.SimpleQueue behind a `key in set` loop", G_THRU,
             _wakeup("baseline")),
        Case("race", "race harness, keyqueue.Queue", G_THRU, _race(False, race_size),
             checks=(Check("0 violations", "eq", 0, field="violations"), Check("collapse > 1x", "gt", 1.0,
                                                                              field="collapse"))),
        Case("race.control", "race harness, control: plain queue.Queue", G_THRU, _race(True, race_size),
             checks=(Check("violations > 0 (detector works)", "gt", 0, field="violations"),)),
    ]
    # Two workers reconcile at least 1.7x the keys of one where threads run in parallel (no GIL); with a GIL the
    # rows are informative (threads take turns). scale.bare.* is the same reconcile on plain threads, no queue;
    # scale.aio_bare.* the same asyncio.to_thread calls from plain tasks, no queue.
    n_scale = size(4_000, 200)
    groups = (("threads", "Controller, worker threads", ("threads", "bare")),
              ("aio", "aio.Controller, asyncio.to_thread", ("aio", "aio_bare")))
    for kind, label, kinds in groups:
        first = f"scale.{kind}.1"
        cases.append(Case(first, f"{label}: 1 worker", G_CORES, _reconcile_scaling(kinds, n_scale)))
        for k in kinds:
            for w in _aio_worker_counts() if kind == "aio" else _worker_counts():
                if k == kind and w == 1:
                    continue
                rid = f"scale.{k}.{w}"
                plural = "s" if w > 1 else ""
                name = (f"{label}: {w} workers" if k == kind else
                        f"baseline: the same calls on {w} plain thread{plural}, no queue" if k == "bare" else
                        f"baseline: the same asyncio.to_thread calls from {w} plain task{plural}, no queue")
                base = f"scale.{k}.1" if w > 1 else None
                checks = ((Check("≥ 1.7x one worker (no GIL)", "ge", 1.7, ref=first),)
                          if k == kind and w == 2 and not gil.GIL else ())
                cases.append(Case(rid, name, G_CORES, _scaling_row(first, f"{k}.{w}"), baseline=base,
                                  checks=checks, needs=(first,)))
    return [dataclasses.replace(c, interleave=True) if c.id in interleaved else c for c in cases]
