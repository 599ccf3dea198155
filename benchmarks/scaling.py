"""Reconciles on every core: a controller's keys/s with 1, 2, … workers and a CPU-bound pure-Python reconcile.

With a GIL, threads take turns: two workers reconcile no faster than one (a little slower, from the hand-overs).
On free-threaded CPython they run in parallel. :func:`reconcile_throughput` measures one controller run:
``n_keys`` distinct keys are queued before it starts, its workers reconcile each once, and the time from
``start()`` until the last reconcile returns gives keys/s. The reconcile is pure Python arithmetic on local values
(no shared object, no I/O, no lock), calibrated once per process to about ``work_us`` on one thread, so its cost is
the same for every worker count.

``kind``: ``"threads"`` (:class:`keyqueue.Controller`, ``workers`` threads), ``"aio"``
(:class:`keyqueue.aio.Controller`, ``workers`` tasks, each reconcile run by ``asyncio.to_thread``) or ``"bare"``
(the baseline: ``workers`` plain threads making the same reconcile calls, ``n_keys`` in all, no queue): how far the
interpreter and the machine let such code run in parallel at all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import keyqueue
from keyqueue import aio

__all__ = ["calibrate", "reconcile_throughput", "spin"]

_RUN_TIMEOUT_S = 120.0


def spin(n: int) -> int:
    """``n`` rounds of integer arithmetic on locals: CPU-bound, allocation-light, touching no shared object."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


_rounds: dict[float, int] = {}


def calibrate(work_us: float) -> int:
    """The :func:`spin` rounds that take about ``work_us`` µs on one thread of this interpreter (cached)."""
    n = _rounds.get(work_us)
    if n is None:
        n = 1000
        while True:
            best = min(_timed(n) for _ in range(5))
            if best >= 0.02:
                break
            n *= 2
        n = max(1, round(n * work_us * 1e-6 / best))
        _rounds[work_us] = n
    return n


def _timed(n: int) -> float:
    t0 = time.perf_counter()
    spin(n)
    return time.perf_counter() - t0


class _Finish:
    """Counts reconciles under a lock; sets ``event`` at the ``target``-th."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.at = 0.0

    def one(self) -> None:
        with self.lock:
            self.count += 1
            if self.count == self.target:
                self.at = time.perf_counter()
                self.event.set()


def reconcile_throughput(kind: str, workers: int, *, n_keys: int = 2000, work_us: float = 250.0) -> dict[str, Any]:
    """Keys/s of one controller run (see the module docstring). Raises ``RuntimeError`` if the run does not finish
    within two minutes."""
    rounds = calibrate(work_us)
    keys = [f"default/obj-{i}" for i in range(n_keys)]
    finish = _Finish(n_keys)
    if kind == "threads":
        def reconcile(key: str) -> None:
            spin(rounds)
            finish.one()

        c: keyqueue.Controller[str] = keyqueue.Controller(reconcile, workers=workers, name=f"scale-{workers}")
        for k in keys:
            c.queue.add(k)
        t0 = time.perf_counter()
        c.start()
        try:
            if not finish.event.wait(_RUN_TIMEOUT_S):
                raise RuntimeError(f"{finish.count} of {n_keys} reconciles in {_RUN_TIMEOUT_S:g} s")
        finally:
            c.stop()
    elif kind == "bare":
        def calls(k: int) -> None:
            for _ in range(k):
                spin(rounds)
                finish.one()

        share = [n_keys // workers + (i < n_keys % workers) for i in range(workers)]
        threads = [threading.Thread(target=calls, args=(k,)) for k in share]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(_RUN_TIMEOUT_S)
        if not finish.event.is_set():
            raise RuntimeError(f"{finish.count} of {n_keys} calls in {_RUN_TIMEOUT_S:g} s")
    elif kind == "aio":
        async def main() -> float:
            async def reconcile(key: str) -> None:
                await asyncio.to_thread(spin, rounds)
                finish.one()

            ac: aio.Controller[str] = aio.Controller(reconcile, workers=workers, name=f"scale-aio-{workers}")
            for k in keys:
                ac.queue.add(k)
            start = time.perf_counter()
            ac.start()
            try:
                async with asyncio.timeout(_RUN_TIMEOUT_S):
                    while not finish.event.is_set():
                        await asyncio.sleep(0.005)
            finally:
                await ac.stop()
            return start

        t0 = asyncio.run(main())
    elif kind == "aio_bare":
        async def bare_main() -> float:
            async def calls(k: int) -> None:
                for _ in range(k):
                    await asyncio.to_thread(spin, rounds)
                    finish.one()

            share = [n_keys // workers + (i < n_keys % workers) for i in range(workers)]
            start = time.perf_counter()
            async with asyncio.timeout(_RUN_TIMEOUT_S):
                await asyncio.gather(*(calls(k) for k in share))
            return start

        t0 = asyncio.run(bare_main())
    else:
        raise ValueError(f"kind must be 'threads', 'aio', 'bare' or 'aio_bare', got {kind!r}")
    elapsed = finish.at - t0
    return {"kind": kind, "workers": workers, "keys": n_keys, "work_us": work_us, "spin_rounds": rounds,
            "elapsed_s": elapsed, "keys_per_s": n_keys / elapsed}
