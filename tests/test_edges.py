"""The queues' edges (issue 16): bad arguments, infinite timeouts, keys whose own methods misbehave.

Every test runs against the four queue kinds that matter here — the threading and asyncio ``RateLimitingQueue``
(which is also a ``Queue`` and a ``DelayingQueue``) and the threading and asyncio ``PriorityQueue`` — through the
synchronous facades the other suites use.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keyqueue
from keyqueue import AddResult, FakeClock, KeyMutatedError
from keyqueue.metrics import SnapshotMetricsProvider
from tests.priority.conftest import build as build_priority
from tests.shells import SHELLS, wait_for_getters, wait_until

KINDS = [(shell, kind) for shell in ("threaded", "asyncio") for kind in ("ratelimiting", "priority")]


def _build(shell: str, kind: str, **kwargs: Any) -> Any:
    if kind == "priority":
        return build_priority("threaded" if shell == "threaded" else "aio", **kwargs)
    return SHELLS[shell](kind, **kwargs)


@pytest.fixture(params=KINDS, ids=[f"{s}-{k}" for s, k in KINDS])
def make(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make(**kwargs)`` → a queue of the kind under test (sync facade), shut down after the test."""
    shell, kind = request.param
    created: list[Any] = []

    def factory(**kwargs: Any) -> Any:
        q = _build(shell, kind, **kwargs)
        created.append(q)
        return q

    yield factory
    for q in created:
        q.shut_down()
        close = getattr(q, "close", None)
        if close is not None:
            close()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` in a daemon thread; its result (or exception) lands in the returned list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# -- item 4: timeouts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("forever", [math.inf, 1e10, 10**12])
def test_get_with_an_infinite_timeout_waits_for_a_key(make: Any, forever: float) -> None:
    q = make()
    t, out = in_thread(lambda: q.get(timeout=forever))
    wait_for_getters(q)
    q.add("k")
    t.join(5)
    assert out == ["k"]


@pytest.mark.parametrize("forever", [math.inf, 1e10])
def test_get_with_an_infinite_timeout_and_a_never_due_key(make: Any, forever: float) -> None:
    # A delayed entry that is never due (math.inf) makes the getter sleep "until it is due": ~292 years, more than
    # the OS accepts. It must still wait, and take the key that is added meanwhile.
    q = make()
    q.add_after("never", math.inf)
    t, out = in_thread(lambda: q.get(timeout=forever))
    wait_for_getters(q)
    q.add("k")
    t.join(5)
    assert out == ["k"]


@pytest.mark.parametrize("forever", [math.inf, 1e10])
def test_drain_with_an_infinite_timeout_waits_for_done(make: Any, forever: float) -> None:
    q = make()
    q.add("k")
    assert q.get() == "k"
    t, out = in_thread(lambda: q.shut_down_with_drain(timeout=forever))
    wait_until(lambda: len(q._drainers) if not isinstance(q._drainers, int) else q._drainers, what="a drainer")
    q.done("k")
    t.join(5)
    assert out == [True]


@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["10**400", "-10**400"])
def test_an_int_too_large_for_a_float_is_an_error_naming_the_parameter(make: Any, huge: int) -> None:
    q = make()
    q.add("k")
    with pytest.raises(ValueError, match="timeout"):
        q.get(timeout=huge)
    with pytest.raises(ValueError, match="timeout"):
        q.shut_down_with_drain(timeout=huge)
    assert not q.shutting_down  # rejected before anything happened
    with pytest.raises(ValueError, match="delay"):
        q.add_after("d", huge)
    if hasattr(q, "get_with_priority"):
        with pytest.raises(ValueError, match="after"):
            q.add("d", after=huge)
    assert len(q) == 1
    assert q.get(timeout=0) == "k"


def test_fake_clock_refuses_an_int_too_large_for_a_float_naming_the_parameter() -> None:
    clock = FakeClock(1.0)
    with pytest.raises(ValueError, match="start"):
        FakeClock(10**400)
    with pytest.raises(ValueError, match="step"):
        clock.step(10**400)
    with pytest.raises(ValueError, match="set"):
        clock.set(10**400)
    assert clock.now() == 1.0


def test_controller_stop_and_stop_timeout_accept_forever() -> None:
    seen = threading.Event()

    def reconcile(key: str) -> None:
        seen.set()

    c: keyqueue.Controller[str] = keyqueue.Controller(reconcile, stop_timeout=math.inf)
    c.start()
    c.queue.add("k")
    assert seen.wait(5)
    assert c.stop(math.inf) is True
    with pytest.raises(ValueError, match="stop_timeout"):
        keyqueue.Controller(reconcile, stop_timeout=10**400)
    with pytest.raises(ValueError, match="timeout"):
        keyqueue.Controller(reconcile).stop(10**400)


def test_aio_controller_stop_accepts_forever() -> None:
    import asyncio

    async def main() -> bool:
        seen = asyncio.Event()

        async def reconcile(key: str) -> None:
            seen.set()

        c: keyqueue.aio.Controller[str] = keyqueue.aio.Controller(reconcile)
        c.start()
        c.queue.add("k")
        await asyncio.wait_for(seen.wait(), 5)
        with pytest.raises(ValueError, match="timeout"):
            await c.stop(10**400)
        return await c.stop(math.inf)

    assert asyncio.run(main()) is True


# -- item 5: argument types -------------------------------------------------------------------------------------


def test_clock_must_be_a_clock(make: Any) -> None:
    with pytest.raises(TypeError, match="clock"):
        make(clock="x")
    with pytest.raises(TypeError, match="clock"):
        make(clock=FakeClock)  # the class, not an instance
    make(clock=FakeClock())  # a real one is fine


def test_controller_clock_must_be_a_clock() -> None:
    with pytest.raises(TypeError, match="clock"):
        keyqueue.Controller(lambda key: None, clock="x")  # type: ignore[arg-type]


def test_done_of_an_unhashable_item_is_a_type_error_like_add(make: Any) -> None:
    q = make()
    q.add("k")
    with pytest.raises(TypeError, match=r"hashable.*set"):
        q.add({1})
    with pytest.raises(TypeError, match=r"hashable.*set"):
        q.done({1})
    assert q.get(timeout=0) == "k"
    q.done("k")


# -- item 2: a key mutated while the queue holds it --------------------------------------------------------------


class Mutable:
    """A key whose hash is a field the test changes (the mistake item 2 is about).

    The hashes are small ints chosen so that the mutated key's new hash probes an empty slot of the queue's small
    sets and dicts: CPython compares identity before hashes, so a lookup whose probe happened to reach the key's
    old slot would still find it (then nothing is wrong to report, and the key simply goes on as what it is now).
    The other keys are ints 5..9, which hash to themselves, away from those slots.
    """

    def __init__(self, h: int) -> None:
        self.h = h

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mutable) and other.h == self.h

    def __repr__(self) -> str:
        return f"Mutable({self.h})"


def _depth(provider: SnapshotMetricsProvider) -> int:
    return provider.snapshot()["m"].depth


def test_a_key_mutated_while_waiting_is_a_clear_error_and_the_others_flow(make: Any) -> None:
    provider = SnapshotMetricsProvider()
    q = make(name="m", metrics_provider=provider)
    m = Mutable(0)
    for key in (5, m, 6):
        q.add(key)
    m.h = 3
    assert q.get(timeout=0) == 5
    q.done(5)
    with pytest.raises(KeyMutatedError, match=r"Mutable\(3\).*mutated while waiting") as caught:
        q.get(timeout=0)
    assert caught.value.key is m
    del caught
    assert q.get(timeout=0) == 6
    q.done(6)
    assert len(q) == 0 and _depth(provider) == 0  # forgotten everywhere, metrics included
    assert q.add(m) is AddResult.QUEUED  # as it is now, it is an ordinary key again
    assert q.get(timeout=0) is m
    assert q.done(m) is False
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None  # the queue (and its recorder) kept no reference to the dropped key


def test_a_key_mutated_while_being_processed_is_reported_by_done(make: Any) -> None:
    provider = SnapshotMetricsProvider()
    q = make(name="m", metrics_provider=provider)
    m = Mutable(0)
    q.add(m)
    assert q.get(timeout=0) is m
    assert q.add(m) is AddResult.MARKED  # re-added while processing, under its old hash
    m.h = 3
    with pytest.raises(KeyMutatedError, match="being processed"):
        q.done(m)
    assert len(q) == 0 and _depth(provider) == 0
    q.add(7)
    assert q.get(timeout=0) == 7
    q.done(7)
    assert q.shut_down_with_drain(timeout=5) is True  # nothing is left "processing"
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None


def test_a_key_mutated_while_delayed_is_reported_when_due(make: Any) -> None:
    clock = FakeClock()
    q = make(clock=clock)
    m = Mutable(0)
    q.add_after(m, 5)
    q.add_after(6, 6)
    m.h = 3
    clock.step(6)
    with pytest.raises(KeyMutatedError, match=r"Mutable\(3\)"):
        q.get(timeout=0)
    assert q.get(timeout=0) == 6
    q.done(6)
    assert len(q) == 0


def test_a_getter_woken_for_a_mutated_key_passes_the_wake_up_on(make: Any) -> None:
    q = make()
    t1, out1 = in_thread(lambda: q.get(timeout=5))
    t2, out2 = in_thread(lambda: q.get(timeout=5))
    wait_for_getters(q, 2)
    m = Mutable(0)
    with q._lock:  # two keys arrive, the first one mutated, and one getter is woken (as one add would)
        q._core.add(m)
        m.h = 3
        q._core.add(6)
        q._wake_one()
    t1.join(6)
    t2.join(6)
    results = out1 + out2
    assert 6 in results  # the getter that met the mutated key woke the other one for 6
    assert any(isinstance(r, KeyMutatedError) for r in results)
    q.done(6)


def _mutating_reconcile(seen: list[object], last: Callable[[], None]) -> Callable[[object], None]:
    def reconcile(key: object) -> None:
        seen.append(key)
        if isinstance(key, Mutable) and key.h == 1:
            key.h = 4  # mutated by its reconcile: done() finds it mutated
        if key == 9:
            last()

    return reconcile


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return " ".join(r.getMessage() for r in caplog.records)


def test_a_controller_worker_survives_mutated_keys(caplog: pytest.LogCaptureFixture) -> None:
    finished = threading.Event()
    seen: list[object] = []
    c: keyqueue.Controller[Any] = keyqueue.Controller(_mutating_reconcile(seen, finished.set), workers=1)
    waiting = Mutable(0)
    for key in (5, waiting, Mutable(1), 9):
        c.queue.add(key)
    waiting.h = 3  # mutated while waiting
    with c:
        assert finished.wait(5)
    assert [k for k in seen if isinstance(k, int)] == [5, 9]  # one worker, alive throughout
    assert len(c.queue) == 0
    assert "Mutable(3)" in _messages(caplog) and "Mutable(4)" in _messages(caplog)


def test_an_aio_controller_worker_survives_mutated_keys(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> list[object]:
        finished = asyncio.Event()
        seen: list[object] = []
        c: keyqueue.aio.Controller[Any] = keyqueue.aio.Controller(_mutating_reconcile(seen, finished.set), workers=1)
        waiting = Mutable(0)
        for key in (5, waiting, Mutable(1), 9):
            c.queue.add(key)
        waiting.h = 3
        async with c:
            await asyncio.wait_for(finished.wait(), 5)
        return seen

    seen = asyncio.run(main())
    assert [k for k in seen if isinstance(k, int)] == [5, 9]
    assert "Mutable(3)" in _messages(caplog) and "Mutable(4)" in _messages(caplog)


# -- item 3: a key whose own __eq__ raises ---------------------------------------------------------------------


class Touchy:
    """All Touchy keys collide (one hash); comparing with an ``explosive`` one raises."""

    def __init__(self, name: str, explosive: bool = False) -> None:
        self.name = name
        self.explosive = explosive

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Touchy):
            return False
        if self.explosive or other.explosive:
            raise RuntimeError(f"__eq__ of {self.name} and {other.name}")
        return other.name == self.name

    def __repr__(self) -> str:
        return f"Touchy({self.name!r})"


def test_an_add_whose_eq_raises_changes_nothing(make: Any) -> None:
    q = make()
    a, b = Touchy("a"), Touchy("b", explosive=True)
    q.add(a)
    assert q.get(timeout=0) is a
    with pytest.raises(RuntimeError, match="__eq__"):
        q.add(b)  # compared with a, which is being processed
    assert len(q) == 0
    q.done(a)
    assert q.add(b) is AddResult.QUEUED  # not "DEDUP": the failed add left no mark behind
    assert q.get(timeout=0) is b
    q.done(b)
    assert len(q) == 0


def test_a_get_whose_eq_raises_keeps_the_key_queued_and_the_others_flowing(make: Any) -> None:
    q = make()
    a, b = Touchy("a"), Touchy("b")
    q.add(a)
    q.add(b)
    assert q.get(timeout=0) is a
    b.explosive = True  # from now on comparing b with a raises (a is being processed)
    q.add("c")
    with pytest.raises(RuntimeError, match="__eq__"):
        q.get(timeout=0)  # b, the head, cannot join the processing set
    assert len(q) == 2  # b is still queued (behind c)
    assert q.get(timeout=0) == "c"
    q.done("c")
    b.explosive = False
    q.done(a)
    assert q.get(timeout=0) is b  # nothing was lost
    q.done(b)
    assert len(q) == 0


def test_a_done_whose_eq_raises_changes_nothing(make: Any) -> None:
    q = make()
    a, b = Touchy("a"), Touchy("b")
    q.add(a)
    q.add(b)
    assert q.get(timeout=0) is a
    assert q.get(timeout=0) is b
    a.explosive = True
    with pytest.raises(RuntimeError, match="__eq__"):
        q.done(b)  # looking b up compares it with a
    a.explosive = False
    assert q.done(b) is False and q.done(a) is False  # both were still being processed
    assert q.shut_down_with_drain(timeout=5) is True


def test_priority_core_knows_every_superseded_heap_entry() -> None:
    """The mutated-key detection of the priority core rests on one invariant: a heap entry that is not live is
    exactly one whose id is in the core's stale set. Checked after a seeded random mix of adds (raised priorities,
    delays), hand-outs, dones and clock steps, with heap compaction happening along the way."""
    rng = random.Random(16)
    clock = FakeClock()
    q: keyqueue.PriorityQueue[int] = keyqueue.PriorityQueue(clock=clock)
    core = q._pcore
    handed: list[int] = []
    nonempty = 0
    for step in range(20_000):
        k, r = rng.randrange(200), rng.random()
        if r < 0.4:
            q.add(k, priority=rng.randrange(-5, 5))
        elif r < 0.6:
            q.add(k, priority=rng.randrange(-5, 5), after=rng.random())
        elif r < 0.75:
            with contextlib.suppress(TimeoutError):
                handed.append(q.get(timeout=0))
        elif r < 0.9 and handed:
            q.done(handed.pop(rng.randrange(len(handed))))
        else:
            clock.step(0.05)
        if step % 997 == 0:
            items = core._items
            dead_ready = {id(e) for e in core._ready if items.get(e[2]) is not e}
            dead_waiting = {id(e) for e in core._waiting if items.get(e[3]) is not e}
            assert dead_ready == core._stale_ready
            assert dead_waiting == core._stale_waiting
            nonempty += bool(dead_ready) and bool(dead_waiting)
    assert nonempty > 5  # the checks saw superseded entries in both heaps, not just empty sets
