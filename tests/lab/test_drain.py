from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from keyqueue import DelayingQueue

Lab = Callable[..., tuple[int, dict[str, Any]]]

HELD = 2
EVERYTHING = 7  # 2 held + 4 queued + the redelivery of the key re-added while held


def test_drain_semantics(lab: Lab) -> None:
    status, s = lab("drain", "--work", "50ms", "--drain-timeout", "20ms")
    assert status == 0
    plain = s["shut_down"]
    drained = s["shut_down_with_drain"]
    timed_out = s["shut_down_with_drain_timeout"]

    # shut_down() returns at once, with the work still in flight and keys still queued.
    assert plain["returned"] is None
    assert plain["in_flight_at_return"] == HELD
    assert plain["finished_at_return"] == []
    assert plain["queued_at_return"] == 4

    # shut_down_with_drain() returns True only after everything queued or re-added was finished.
    assert drained["returned"] is True
    assert drained["waited_for_work"] is True
    assert drained["in_flight_at_return"] == 0 and drained["queued_at_return"] == 0
    assert len(drained["finished_at_return"]) == EVERYTHING

    # With a timeout that passes first: False, work still in flight.
    assert timed_out["returned"] is False
    assert timed_out["in_flight_at_return"] == HELD

    for arm in (plain, drained, timed_out):
        assert len(arm["processed"]) == EVERYTHING  # workers still finish what was queued
        assert arm["redelivered"] == ["default/obj-0"]
        assert arm["dropped_delayed"] == ["default/obj-later"]
        assert arm["late_add"] == "DROPPED"


def test_a_drain_that_does_not_wait_exits_1(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    # controller-runtime's priority queue implements ShutDownWithDrain as a plain ShutDown: the check must notice.
    import keyqueue.lab.drain as drain_module

    class NoDrain(DelayingQueue[str]):
        def shut_down_with_drain(self, timeout: float | None = None) -> bool:
            self.shut_down()
            return True

    monkeypatch.setattr(drain_module, "DelayingQueue", NoDrain)
    status, s = lab("drain", "--work", "20ms", "--drain-timeout", "10ms")
    assert status == 1
    assert s["shut_down_with_drain"]["returned"] is True
    assert s["shut_down_with_drain"]["in_flight_at_return"] == HELD  # returned with the work still in flight
    assert s["shut_down_with_drain"]["waited_for_work"] is False


def test_drain_rejects_bad_durations(lab: Lab) -> None:
    status, s = lab("drain", "--work", "soon")
    assert status == 2 and s == {}
