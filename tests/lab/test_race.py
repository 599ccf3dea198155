from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

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
