"""The pipeline's arrivals replayed on instant workers: the part of enqueue → ``Get`` that the load's shape sets.

The pipeline (:mod:`keyqueue.lab.pipeline`) times each add that queued a key until a worker's ``get`` returned it.
Part of that wait is not the hand-off's: with ``workers`` threads that each hold a key for a reconcile, a burst of
more distinct keys than there are idle workers makes the extra keys wait for a reconcile to end, however fast the
hand-off is. :func:`replay` measures that part for one run: it feeds the run's own arrivals (the informer
handler's ``add`` calls, in order, with their times) to keyqueue's state machine (:class:`keyqueue._core.QueueCore`,
the same dedup, requeue-while-processing and FIFO rules as the pipeline's queue, no second copy of them) with
``workers`` workers that take a ready key the instant one is free and hold it for a given busy time. What it
returns is the wait of every add that queued a key in that ideal pipeline.

It is a lower bound for the same arrivals only: in a closed loop (the load generator waits for each answer) a
different pipeline would also have produced different arrivals.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence

from keyqueue._core import EMPTY, AddResult, QueueCore
from keyqueue.clock import FakeClock

__all__ = ["replay"]


def replay(arrivals: Iterable[tuple[int, str]], workers: int, busy_ns: int | Sequence[int]) -> list[int]:
    """Waits (ns, in arrival order) of the adds that queued a key, with instant hand-offs.

    ``arrivals``: ``(t_ns, key)`` of every add, in any order (sorted here by time, ties kept in order).
    ``workers``: the number of workers (≥ 1). ``busy_ns``: how long a worker holds each key from its ``get`` to its
    next ``get``: one figure for every key, or a non-empty sequence used in turn (cycled), e.g. the busy times
    measured in the run. A key added while a worker holds it is marked and handed out again at that worker's
    ``done`` (its wait is not counted, as in the pipeline's own table). Raises ``ValueError`` for ``workers`` < 1,
    an empty sequence or a negative busy time.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if isinstance(busy_ns, int):
        busy: Sequence[int] = (busy_ns,)
    else:
        busy = busy_ns
    if not busy or min(busy) < 0:
        raise ValueError(f"busy_ns must be >= 0 (a figure or a non-empty sequence), got {busy_ns!r:.80}")
    core: QueueCore[str] = QueueCore(FakeClock())
    queued_at: dict[str, int] = {}  # keys queued by an add (not by a done), not yet handed out: when
    dones: list[tuple[int, int, str]] = []  # (time a worker is free again, tie-break, key it held)
    free = workers
    turn = 0
    waits: list[int] = []
    pending = deque(sorted(arrivals, key=lambda a: a[0]))

    def hand_out(now: int) -> None:
        nonlocal free, turn
        while free:
            key = core.pop()
            if key is EMPTY:
                return
            assert isinstance(key, str)
            free -= 1
            t = queued_at.pop(key, None)
            if t is not None:
                waits.append(now - t)
            heapq.heappush(dones, (now + busy[turn % len(busy)], turn, key))
            turn += 1

    while pending or dones:
        if dones and (not pending or dones[0][0] <= pending[0][0]):  # a worker finishes first (ties: done first)
            now, _, key = heapq.heappop(dones)
            free += 1
            core.done(key)  # a key marked meanwhile is back in the fifo
        else:
            now, key = pending.popleft()
            if core.add(key) is AddResult.QUEUED:
                queued_at[key] = now
        hand_out(now)
    return waits
