from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import pytest

from keyqueue.errors import ShutDown
from keyqueue.lab.race import SameKeyDetector, run_race

Lab = Callable[..., tuple[int, dict[str, Any]]]

SMALL = ("--workers", "8", "--keys", "16", "--producers", "4", "--hold", "20us")


def test_keyqueue_never_gives_a_key_to_two_workers(lab: Lab) -> None:
    status, s = lab("race", *SMALL, "--adds", "20000")
    assert status == 0
    assert s["control"] is False
    assert s["violations"] == 0
    assert s["adds"] == 20_000
    assert 0 < s["reconciles"] <= s["adds"]
    assert 1 <= s["max_in_flight"] <= s["workers"]
    assert s["collapse"] >= 1.0


def test_control_reports_violations(lab: Lab) -> None:
    # The same harness over queue.Queue: no processing set, so held keys are handed out again.
    status, s = lab("race", *SMALL, "--adds", "8000", "--control")
    assert status == 0  # the expected outcome (violations > 0) held
    assert s["control"] is True
    assert s["violations"] > 0
    assert s["reconciles"] == s["adds"]  # every put is a reconcile: nothing collapses
    assert s["collapse"] == pytest.approx(1.0)


def test_detector_counts_overlap_and_in_flight() -> None:
    d = SameKeyDetector()
    assert d.start("a") and d.start("b")
    assert not d.start("a")  # a second holder of "a"
    assert d.violations == 1 and d.max_in_flight == 2
    d.finish("a")
    d.finish("a")
    d.finish("b")
    assert d.in_flight == 0
    with pytest.raises(KeyError):
        d.finish("a")


def test_run_race_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="workers"):
        run_race("keyqueue", workers=0)
    with pytest.raises(ValueError, match="queue_kind"):
        run_race("deque")  # type: ignore[arg-type]


def test_control_that_cannot_overlap_exits_1(lab: Lab) -> None:
    # One worker can never hold a key twice: the control sees no violation, so the run must say it proved nothing.
    status, s = lab("race", "--control", "--workers", "1", "--keys", "4", "--producers", "2", "--adds", "500")
    assert status == 1
    assert s["control"] is True and s["violations"] == 0 and s["as_expected"] is False


class _NoProcessingSetQueue:
    """A mutant of keyqueue.Queue for the harness: FIFO of every add, no dedup, no processing set, no-op done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: collections.deque[str] = collections.deque()
        self._closed = False

    def add(self, key: str) -> None:
        with self._cond:
            self._items.append(key)
            self._cond.notify()

    def get(self) -> str:
        with self._cond:
            while not self._items:
                if self._closed:
                    raise ShutDown
                self._cond.wait()
            return self._items.popleft()

    def done(self, key: str) -> None:
        pass

    def shut_down(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        self.shut_down()
        return True


def test_a_queue_without_a_processing_set_fails_the_keyqueue_arm(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mutation check of the keyqueue arm itself: swap the queue under test for one that hands out held keys again.
    import keyqueue.lab.race as race

    monkeypatch.setattr(race, "Queue", _NoProcessingSetQueue)
    status, s = lab("race", *SMALL, "--adds", "8000")
    assert s["control"] is False
    assert s["violations"] > 0
    assert status == 1 and s["as_expected"] is False
