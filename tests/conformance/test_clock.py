"""Conformance: the clocks every queue and the token bucket take (``clock=``)."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

from keyqueue import FakeClock, RealClock


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start=12.5)
    assert clock.now() == 12.5
    assert clock.now_ns() == 12_500_000_000
    clock.step(0.25)
    assert clock.now() == 12.75
    clock.step(0)
    assert clock.now() == 12.75
    clock.set(20.0)
    assert clock.now_ns() == 20_000_000_000
    assert clock.real_wait(clock.now_ns() + 1) is None  # waiters rely on the step's wake-up, never time out


def test_fake_clock_keeps_exact_integer_nanoseconds() -> None:
    clock = FakeClock()
    for _ in range(3):
        clock.step(0.000025)
    assert clock.now_ns() == 75_000  # float seconds would drift (3 * 2.5e-05 != 7.5e-05)


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda c: c.step(-1.0), ValueError),
        (lambda c: c.step(math.nan), ValueError),
        (lambda c: c.step(math.inf), ValueError),
        (lambda c: c.step("1"), TypeError),
        (lambda c: c.step(True), TypeError),
        (lambda c: c.set(0.5), ValueError),  # backwards
        (lambda c: c.set(math.nan), ValueError),
        (lambda c: c.set(math.inf), ValueError),
        (lambda c: c.set("2"), TypeError),
    ],
)
def test_fake_clock_rejects_bad_moves_and_stays_put(call: Any, exc: type[Exception]) -> None:
    clock = FakeClock(start=1.0)
    with pytest.raises(exc, match=r"seconds|backwards"):
        call(clock)
    assert clock.now_ns() == 1_000_000_000


@pytest.mark.parametrize(("start", "exc"), [(math.nan, ValueError), (math.inf, ValueError), ("0", TypeError)])
def test_fake_clock_rejects_a_bad_start(start: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="FakeClock start"):
        FakeClock(start)


def test_step_calls_subscribers_without_keeping_them_alive() -> None:
    clock = FakeClock()
    calls: list[int] = []

    class Listener:
        def on_jump(self) -> None:
            calls.append(clock.now_ns())

    listener = Listener()
    clock.subscribe(listener.on_jump)
    clock.step(1.0)
    assert calls == [1_000_000_000]
    del listener  # only a weak reference is held: a queue can be collected while its clock lives on
    clock.step(1.0)
    assert calls == [1_000_000_000]


def test_fake_clock_is_thread_safe() -> None:
    clock = FakeClock()
    gate = threading.Barrier(4)

    def stepper() -> None:
        gate.wait(5)
        for _ in range(1000):
            clock.step(0.001)

    threads = [threading.Thread(target=stepper) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert clock.now_ns() == 4 * 1000 * 1_000_000


def test_real_clock_is_monotonic_and_never_notifies() -> None:
    clock = RealClock()
    a = clock.now_ns()
    b = clock.now_ns()
    assert b >= a
    assert abs(clock.now() - time.monotonic()) < 1.0
    clock.subscribe(lambda: None)  # a no-op: a real clock never jumps
    wait = clock.real_wait(clock.now_ns() + 2_000_000_000)
    assert wait is not None and 0 < wait <= 2.0
    assert clock.real_wait(clock.now_ns() - 1) == 0.0
