"""Conformance: a pluggable ordering (client-go's ``QueueConfig.Queue`` with its ``Touch`` hook).

The ordering only decides *which* waiting key goes next; dedup, one holder per key and one redelivery per burst of
adds while processing are the core's and must hold for any ordering.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from keyqueue import AddResult


class Lifo:
    """Newest waiting key first: append/popleft/len, no touch."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def append(self, item: str) -> None:
        self.items.append(item)

    def popleft(self) -> str:
        return self.items.pop()

    def __len__(self) -> int:
        return len(self.items)


class MoveToFrontOnTouch(Lifo):
    """FIFO that moves a key added again while waiting to the front (a re-prioritisation), recording touches."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[str] = []

    def popleft(self) -> str:
        return self.items.pop(0)

    def touch(self, item: str) -> None:
        self.touched.append(item)
        self.items.remove(item)
        self.items.insert(0, item)


def test_the_ordering_decides_the_order_and_every_guarantee_holds(make_queue: Any) -> None:
    q = make_queue(ordering=Lifo())
    for k in "abc":
        assert q.add(k) == AddResult.QUEUED
    assert q.add("a") == AddResult.DEDUP  # still deduplicated by the core
    assert len(q) == 3
    assert q.get(timeout=1) == "c"
    assert q.add("c") == AddResult.MARKED  # held: marked, not appended to the ordering
    assert q.add("c") == AddResult.DEDUP
    assert len(q) == 2
    assert q.done("c") is True  # re-queued once, through the ordering
    assert [q.get(timeout=1) for _ in range(3)] == ["c", "b", "a"]
    for k in "cba":
        assert q.done(k) is False
    assert len(q) == 0


def test_touch_is_called_for_an_add_of_a_waiting_key_only(make_queue: Any) -> None:
    order = MoveToFrontOnTouch()
    q = make_queue(ordering=order)
    q.add("a")
    q.add("b")
    q.add("c")
    assert q.add("c") == AddResult.DEDUP
    assert order.touched == ["c"]
    assert q.get(timeout=1) == "c"  # moved to the front by its touch
    q.add("c")  # being processed: MARKED, no touch (client-go touches only waiting keys)
    q.add("c")  # processing + dirty: DEDUP, no touch either
    assert order.touched == ["c"]
    q.done("c")  # re-queued at the back
    assert order.items == ["a", "b", "c"]


def test_every_add_of_a_waiting_key_reaches_touch(make_queue: Any) -> None:
    """An ordering with touch turns the lock-free dedup path off: no add may skip the hook."""
    order = MoveToFrontOnTouch()
    q = make_queue(ordering=order)
    q.add("a")
    q.add("b")
    for _ in range(100):
        assert q.add("a") == AddResult.DEDUP
    assert order.touched == ["a"] * 100


def test_the_default_ordering_is_fifo(make_queue: Any) -> None:
    q = make_queue(ordering=deque())
    for k in "abc":
        q.add(k)
    assert [q.get(timeout=1) for _ in range(3)] == ["a", "b", "c"]


@pytest.mark.parametrize("kind", ["queue", "delaying", "ratelimiting"])
def test_a_bad_ordering_is_refused_at_construction(make_queue: Any, kind: str) -> None:
    with pytest.raises(TypeError, match=r"ordering must have append.*object lacks append, popleft, __len__"):
        make_queue(kind, ordering=object())
    with pytest.raises(ValueError, match="ordering must start empty, got one holding 1 keys"):
        make_queue(kind, ordering=deque(["x"]))


def test_delayed_keys_fire_through_the_ordering(make_queue: Any) -> None:
    order = Lifo()
    q = make_queue("delaying", ordering=order)
    q.add("a")
    assert q.add_after("b", 0) == AddResult.QUEUED  # due now: an add like any other
    assert q.get(timeout=1) == "b"


def test_an_ordering_may_subclass_the_protocol(make_queue: Any) -> None:
    """``class Fifo(keyqueue.Ordering[str])`` works in both builds (a protocol defined in a compiled module would be
    a mypyc trait, and instantiating a Python subclass of it raises)."""
    from keyqueue import Ordering
    from keyqueue._core import MetricsRecorder

    class Fifo(Ordering[str]):
        def __init__(self) -> None:
            self.items: deque[str] = deque()

        def append(self, item: str, /) -> None:
            self.items.append(item)

        def popleft(self) -> str:
            return self.items.popleft()

        def __len__(self) -> int:
            return len(self.items)

    q = make_queue(ordering=Fifo())
    for k in ("a", "b"):
        assert q.add(k) is AddResult.QUEUED
    assert [q.get(timeout=1), q.get(timeout=1)] == ["a", "b"]

    class Recorder(MetricsRecorder):  # the core's other protocols: a Python subclass can be instantiated too
        pass

    Recorder()  # raised "interpreted classes cannot inherit from compiled traits" while the protocol was compiled
