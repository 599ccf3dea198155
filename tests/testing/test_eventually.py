"""keyqueue.testing.eventually and aeventually: success, the timeout path and its message, no sleep after the last
attempt, arguments checked. The timing is checked on a fake clock (every sleep and attempt recorded); the real
clock only shows that the waits really wait."""

from __future__ import annotations

import asyncio
import math
import time
import types
from typing import Any

import pytest

import keyqueue.testing
from keyqueue.testing import aeventually, eventually


class FakeTime:
    """Stands in for the ``time`` module inside keyqueue.testing: sleeping advances the clock; every sleep and every
    attempt (``attempt()``) goes into ``log``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.log: list[tuple[str, float]] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.log.append(("sleep", seconds))
        self.now += seconds

    def attempt(self) -> None:
        self.log.append(("attempt", self.now))


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(keyqueue.testing, "time", fake)
    return fake


class FakeAsyncio:
    """Stands in for the ``asyncio`` module inside keyqueue.testing: the loop's clock and ``sleep`` are fake."""

    def __init__(self, clock: FakeTime) -> None:
        self.clock = clock

    def get_running_loop(self) -> Any:
        asyncio.get_running_loop()  # aeventually must still need a running loop
        return types.SimpleNamespace(time=self.clock.monotonic)

    async def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)


@pytest.fixture
def fake_loop_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(keyqueue.testing, "asyncio", FakeAsyncio(fake))
    return fake


# ---------------------------------------------------------------- success


def test_returns_the_first_truthy_value(fake_time: FakeTime) -> None:
    values = iter([None, 0, "", {"ready": True}])

    def check() -> Any:
        fake_time.attempt()
        return next(values)

    assert eventually(check, timeout=1.0, interval=0.1) == {"ready": True}
    assert [kind for kind, _ in fake_time.log] == ["attempt", "sleep"] * 3 + ["attempt"]


def test_an_asserting_check_is_retried_until_it_passes(fake_time: FakeTime) -> None:
    calls = []

    def check() -> str:
        calls.append(1)
        assert len(calls) >= 3, f"only {len(calls)} calls"
        return "done"

    assert eventually(check, timeout=1.0, interval=0.1) == "done"
    assert len(calls) == 3


def test_the_first_attempt_is_immediate(fake_time: FakeTime) -> None:
    assert eventually(lambda: 42) == 42
    assert fake_time.log == []  # no sleep at all


def test_other_exceptions_propagate_at_once(fake_time: FakeTime) -> None:
    calls = []

    def check() -> bool:
        calls.append(1)
        raise KeyError("a bug, not a condition")

    with pytest.raises(KeyError):
        eventually(check, timeout=5.0)
    assert len(calls) == 1
    assert fake_time.log == []


# ---------------------------------------------------------------- the timeout path


def test_timeout_attempts_at_the_deadline_and_does_not_sleep_after_it(fake_time: FakeTime) -> None:
    start = fake_time.now

    def check() -> bool:
        fake_time.attempt()
        return False

    with pytest.raises(AssertionError) as info:
        eventually(check, timeout=1.0, interval=0.3)
    kinds = [kind for kind, _ in fake_time.log]
    assert kinds[-1] == "attempt"  # the last thing done was an attempt, not a sleep
    assert kinds == ["attempt", "sleep"] * 4 + ["attempt"]
    sleeps = [seconds for kind, seconds in fake_time.log if kind == "sleep"]
    assert sleeps == pytest.approx([0.3, 0.3, 0.3, 0.1])  # the last sleep is cut to end at the deadline
    assert fake_time.log[-1] == ("attempt", pytest.approx(start + 1.0))
    assert "5 attempts" in str(info.value)
    assert "returned False" in str(info.value)
    assert "test_timeout_attempts_at_the_deadline_and_does_not_sleep_after_it.<locals>.check" in str(info.value)
    assert "within 1.0 s" in str(info.value)


def test_timeout_carries_the_last_assertion_error(fake_time: FakeTime) -> None:
    calls = []

    def check() -> bool:
        calls.append(1)
        raise AssertionError(f"phase is Pending (attempt {len(calls)})")

    with pytest.raises(AssertionError) as info:
        eventually(check, timeout=0.5, interval=0.1)
    assert len(calls) == 6
    assert "last attempt: AssertionError: phase is Pending (attempt 6)" in str(info.value)
    cause = info.value.__cause__
    assert isinstance(cause, AssertionError)
    assert str(cause) == "phase is Pending (attempt 6)"
    assert cause.__traceback__ is not None  # the failing assert's own frame is kept


def test_timeout_explains_a_check_that_returned_none(fake_time: FakeTime) -> None:
    with pytest.raises(AssertionError, match=r"returned None \(a check that only asserts must end with"):
        eventually(lambda: None, timeout=0.2)


def test_a_timeout_of_zero_makes_one_attempt(fake_time: FakeTime) -> None:
    def check() -> bool:
        fake_time.attempt()
        return False

    with pytest.raises(AssertionError, match="1 attempts"):
        eventually(check, timeout=0)
    assert [kind for kind, _ in fake_time.log] == ["attempt"]


def test_the_real_clock_waits_the_whole_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(AssertionError):
        eventually(lambda: False, timeout=0.3, interval=0.05)
    assert time.monotonic() - start >= 0.3


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(("kwargs", "error", "named"), [
    ({"check": None}, TypeError, "check"),
    ({"check": "not callable"}, TypeError, "check"),
    ({"timeout": "10"}, TypeError, "timeout"),
    ({"timeout": True}, TypeError, "timeout"),
    ({"timeout": None}, TypeError, "timeout"),
    ({"timeout": -0.1}, ValueError, "timeout"),
    ({"timeout": math.inf}, ValueError, "timeout"),
    ({"timeout": math.nan}, ValueError, "timeout"),
    ({"interval": 0}, ValueError, "interval"),
    ({"interval": -1}, ValueError, "interval"),
    ({"interval": math.nan}, ValueError, "interval"),
    ({"interval": "0.1"}, TypeError, "interval"),
])
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type[Exception], named: str) -> None:
    calls = []
    arguments: dict[str, Any] = {"check": lambda: calls.append(1) or True, "timeout": 1.0, "interval": 0.1, **kwargs}
    with pytest.raises(error, match=rf"^{named} must"):
        eventually(**arguments)
    with pytest.raises(error, match=rf"^{named} must"):
        asyncio.run(aeventually(**arguments))
    assert calls == []  # checked before the first attempt


# ---------------------------------------------------------------- aeventually


def test_aeventually_returns_the_first_truthy_value_and_the_loop_runs_meanwhile() -> None:
    async def main() -> str:
        ready = asyncio.Event()

        async def setter() -> None:
            await asyncio.sleep(0)
            ready.set()

        async def check() -> str:
            return "set" if ready.is_set() else ""

        task = asyncio.create_task(setter())  # runs only while aeventually sleeps
        value = await aeventually(check, timeout=5.0, interval=0.01)
        await task
        return value

    assert asyncio.run(main()) == "set"


def test_aeventually_retries_an_asserting_check(fake_loop_time: FakeTime) -> None:
    calls = []

    async def check() -> int:
        calls.append(1)
        assert len(calls) == 4
        return len(calls)

    assert asyncio.run(aeventually(check, timeout=1.0, interval=0.1)) == 4
    assert [kind for kind, _ in fake_loop_time.log] == ["sleep"] * 3


def test_aeventually_timeout_attempts_at_the_deadline_and_carries_the_last_failure(fake_loop_time: FakeTime) -> None:
    calls = []

    async def check() -> bool:
        fake_loop_time.attempt()
        calls.append(1)
        raise AssertionError(f"attempt {len(calls)}")

    with pytest.raises(AssertionError) as info:
        asyncio.run(aeventually(check, timeout=1.0, interval=0.4))
    assert [kind for kind, _ in fake_loop_time.log] == ["attempt", "sleep"] * 3 + ["attempt"]
    assert [s for kind, s in fake_loop_time.log if kind == "sleep"] == pytest.approx([0.4, 0.4, 0.2])
    assert "4 attempts" in str(info.value) and "AssertionError: attempt 4" in str(info.value)
    assert str(info.value.__cause__) == "attempt 4"


def test_aeventually_wants_an_awaitable() -> None:
    with pytest.raises(TypeError, match="check must return an awaitable"):
        asyncio.run(aeventually(lambda: True, timeout=1.0))  # type: ignore[arg-type, return-value]


def test_aeventually_needs_a_running_loop() -> None:
    async def check() -> bool:
        return True

    coro = aeventually(check)
    with pytest.raises(RuntimeError):
        coro.send(None)
    coro.close()
