"""The queues' edges: bad arguments, infinite timeouts, keys whose own methods misbehave.

Every test runs against the four queue kinds that matter here — the threading and asyncio ``RateLimitingQueue``
(which is also a ``Queue`` and a ``DelayingQueue``) and the threading and asyncio ``PriorityQueue`` — through the
synchronous facades the other suites use.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keyqueue
from keyqueue import AddResult, FakeClock
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


# -- timeouts -------------------------------------------------------------------------------------------


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


# -- argument types -------------------------------------------------------------------------------------


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


# -- a key whose own __eq__ raises ---------------------------------------------------------------------


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


def test_an_add_result_prints_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    q: keyqueue.Queue[str] = keyqueue.Queue()
    print(q.add("a"), q.add("a"), f"{q.add('b')}")
    assert capsys.readouterr().out == "QUEUED DEDUP QUEUED\n"
    assert [str(result) for result in AddResult] == [result.name for result in AddResult]
