"""The queues' edges (issue 16): bad arguments, infinite timeouts, keys whose own methods misbehave.

Every test runs against the four queue kinds that matter here — the threading and asyncio ``RateLimitingQueue``
(which is also a ``Queue`` and a ``DelayingQueue``) and the threading and asyncio ``PriorityQueue`` — through the
synchronous facades the other suites use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keyqueue
from keyqueue import FakeClock
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
