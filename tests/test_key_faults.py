"""A Controller's workers survive a key whose own ``__eq__`` raises: the queue gives such a key back (it stays
waiting, behind the others), the worker logs the failed hand-out, pauses after repeated failures, and the key is
delivered once its ``__eq__`` behaves again."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import Any

import pytest

import keyqueue
from tests.test_edges import Touchy


class Flaky(Touchy):
    """A Touchy key whose ``__eq__`` raises ``explosions`` times, then behaves."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.explosions = 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Touchy) and self.explosions > 0:
            self.explosions -= 1
            raise RuntimeError(f"__eq__ of {self.name} and {other.name}")
        return super().__eq__(other)

    __hash__ = Touchy.__hash__


def _keys() -> tuple[Touchy, Flaky]:
    return Touchy("a"), Flaky("b")


@pytest.mark.parametrize("use_priority_queue", [True, False], ids=["priority", "plain"])
def test_a_controller_hands_out_the_others_first_when_a_keys_eq_raises(
    use_priority_queue: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers: one holds ``a`` until ``c`` was reconciled; the other's first hand-out of ``b`` raises (b is
    compared with a, being processed): the worker survives, ``c`` goes first, ``b`` is still delivered."""
    a, b = _keys()
    c_seen, finished = threading.Event(), threading.Event()
    seen: list[object] = []

    def reconcile(key: object) -> None:
        seen.append(key)
        if key is a:
            assert c_seen.wait(5)
        elif key == "c":
            c_seen.set()
        elif key is b:
            finished.set()

    ctl: keyqueue.Controller[Any] = keyqueue.Controller(reconcile, workers=2, use_priority_queue=use_priority_queue)
    for key in (a, b, "c"):
        ctl.queue.add(key)
    b.explosions = 1
    with ctl:
        assert finished.wait(5)
    assert seen.index("c") < seen.index(b) and len(seen) == 3
    assert "__eq__ of b and a" in " ".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("use_priority_queue", [True, False], ids=["priority", "plain"])
def test_an_aio_controller_hands_out_the_others_first_when_a_keys_eq_raises(
    use_priority_queue: bool, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _keys()

    async def main() -> list[object]:
        c_seen, finished = asyncio.Event(), asyncio.Event()
        seen: list[object] = []

        async def reconcile(key: object) -> None:
            seen.append(key)
            if key is a:
                await asyncio.wait_for(c_seen.wait(), 5)
            elif key == "c":
                c_seen.set()
            elif key is b:
                finished.set()

        ctl: keyqueue.aio.Controller[Any] = keyqueue.aio.Controller(
            reconcile, workers=2, use_priority_queue=use_priority_queue)
        for key in (a, b, "c"):
            ctl.queue.add(key)
        b.explosions = 1
        async with ctl:
            await asyncio.wait_for(finished.wait(), 5)
        return seen

    seen = asyncio.run(main())
    assert seen.index("c") < seen.index(b) and len(seen) == 3
    assert "__eq__ of b and a" in " ".join(r.getMessage() for r in caplog.records)


class _CountFailedGets(logging.Handler):
    """Counts a Controller's "taking a key from the queue failed" records; sets ``reached`` at ``n``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.count, self.reached = n, 0, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "taking a key from the queue failed" in record.getMessage():
            self.count += 1
            if self.count >= self.n:
                self.reached.set()


def test_a_controller_worker_pauses_between_consecutive_failed_gets() -> None:
    """No pause after one failed get; then 5 ms, doubling up to 1 s (the schedule, not a timing)."""
    ctl: keyqueue.Controller[str] = keyqueue.Controller(lambda key: None)
    pauses = [ctl._get_failed(RuntimeError("x"), n) for n in range(1, 12)]
    assert pauses[:3] == [0.0, 0.005, 0.01] and pauses[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(pauses))


@pytest.mark.parametrize("use_priority_queue", [True, False], ids=["priority", "plain"])
def test_a_key_whose_hand_out_keeps_failing_is_delivered_once_the_conflict_ends(use_priority_queue: bool) -> None:
    """``b`` fails every hand-out while ``a`` is being processed; ``a`` is released after the third failure.
    The failing worker survives every one (pausing between them) and then delivers ``b``."""
    a, b = Touchy("a"), Touchy("b")
    counter = _CountFailedGets(3)
    log = logging.getLogger("tests.key_faults")
    log.addHandler(counter)
    finished = threading.Event()

    def reconcile(key: object) -> None:
        if key is a:
            assert counter.reached.wait(10)
            b.explosive = False  # the conflict ends with a's reconcile
        elif key is b:
            finished.set()

    try:
        ctl: keyqueue.Controller[Any] = keyqueue.Controller(
            reconcile, workers=2, use_priority_queue=use_priority_queue, logger=log)
        ctl.queue.add(a)
        ctl.queue.add(b)
        b.explosive = True
        with ctl:
            assert finished.wait(10)
    finally:
        log.removeHandler(counter)
    assert counter.count >= 3
