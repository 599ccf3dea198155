"""The I/O-free correlators on the fake clock: client-go's counting, similar-event aggregation, spam filter and
events.k8s.io series."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue import FakeClock
from keyqueue.events import EventCorrelator, SeriesCorrelator
from keyqueue.events.correlator import COMBINED_PREFIX, FINISH_TIME


def _event(message: str = "synced", reason: str = "Synced", name: str = "cm", n: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.{n:x}", "namespace": "default"},
        "involvedObject": {"kind": "ConfigMap", "apiVersion": "v1", "name": name, "namespace": "default",
                           "uid": "u-1"},
        "reason": reason, "message": message, "source": {"component": "op"},
        "firstTimestamp": f"2026-01-01T00:00:{n:02d}Z", "lastTimestamp": f"2026-01-01T00:00:{n:02d}Z",
        "count": 1, "type": "Normal",
    }


def _written(event: dict[str, Any], rv: int) -> dict[str, Any]:
    """What the server answers for a write of ``event``."""
    return {**event, "metadata": {**event["metadata"], "resourceVersion": str(rv)}}


def test_repeats_become_a_count_patch_of_the_first_event() -> None:
    c = EventCorrelator(FakeClock())
    first = c.correlate(_event(n=1))
    assert first.patch is None and not first.skip and first.event["count"] == 1
    c.update_state(_written(first.event, 10))
    second = c.correlate(_event(n=2))
    assert second.event["metadata"]["name"] == "cm.1"  # the first one's name: patch it
    assert second.patch == {"count": 2, "lastTimestamp": "2026-01-01T00:00:02Z", "message": "synced"}
    assert second.event["firstTimestamp"] == "2026-01-01T00:00:01Z"
    c.update_state(_written(second.event, 11))
    third = c.correlate(_event(n=3))
    assert third.patch is not None and third.patch["count"] == 3
    # another message, reason or object is a different event
    assert c.correlate(_event("other", n=4)).patch is None
    assert c.correlate(_event(reason="Failed", n=5)).patch is None
    assert c.correlate(_event(name="cm2", n=6)).patch is None


def test_similar_events_are_combined_from_the_tenth_message_within_the_window() -> None:
    clock = FakeClock()
    c = EventCorrelator(clock)
    results = [c.correlate(_event(f"message {i}", n=i)) for i in range(10)]
    assert [r.event["message"].startswith(COMBINED_PREFIX) for r in results] == [False] * 9 + [True]
    assert results[9].event["message"] == COMBINED_PREFIX + "message 9" and results[9].patch is None
    c.update_state(_written(results[9].event, 20))
    eleventh = c.correlate(_event("message 10", n=10))  # counted on the combined event
    assert eleventh.event["metadata"]["name"] == results[9].event["metadata"]["name"]
    assert eleventh.patch is not None and eleventh.patch["count"] == 2
    assert eleventh.patch["message"] == COMBINED_PREFIX + "message 10"
    clock.step(601)  # no similar event for longer than the window: the group starts over
    fresh = c.correlate(_event("message 11", n=11))
    assert fresh.event["message"] == "message 11" and fresh.patch is None


def test_spam_filter_allows_a_burst_of_25_per_object_then_one_per_300_s() -> None:
    clock = FakeClock()
    c = EventCorrelator(clock)
    skipped = [c.correlate(_event(f"m{i}", reason=f"R{i}", n=i)).skip for i in range(26)]
    assert skipped == [False] * 25 + [True]
    assert not c.correlate(_event(name="another", n=1)).skip  # per object
    clock.step(299)
    assert c.correlate(_event("late", n=30)).skip
    clock.step(1)
    assert not c.correlate(_event("later", n=31)).skip
    assert c.correlate(_event("again", n=32)).skip


def test_limits_are_validated() -> None:
    with pytest.raises(TypeError, match="clock"):
        EventCorrelator(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spam_burst"):
        EventCorrelator(FakeClock(), spam_burst=0)
    with pytest.raises(ValueError, match="window"):
        EventCorrelator(FakeClock(), window=float("nan"))


def _new_event(note: str = "it broke", action: str = "Reconcile") -> dict[str, Any]:
    return {
        "metadata": {"name": "cm.1", "namespace": "default"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "op", "reportingInstance": "op-h", "action": action, "reason": "Failed",
        "regarding": {"kind": "ConfigMap", "apiVersion": "v1", "name": "cm", "namespace": "default"},
        "note": note, "type": "Warning",
    }


def test_isomorphic_events_become_a_series_finished_after_six_idle_minutes() -> None:
    clock = FakeClock()
    s = SeriesCorrelator(clock)
    first = s.observe(_new_event(), "2026-01-01T00:00:00.000000Z")
    assert first is not None and "series" not in first
    s.update_state({**first, "metadata": {**first["metadata"], "resourceVersion": "5"}})
    second = s.observe(_new_event("a different note"), "2026-01-01T00:00:01.000000Z")  # note is not in the key
    assert second is not None and second["series"] == {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}
    assert second["metadata"]["resourceVersion"] == "5"
    assert s.observe(_new_event(), "2026-01-01T00:00:02.000000Z") is None  # only the cache moves
    assert [e["series"]["count"] for e in s.open_series()] == [3]
    assert s.observe(_new_event(action="Delete"), "2026-01-01T00:00:03.000000Z") is not None  # another action
    clock.step(FINISH_TIME)
    assert s.finish() == []  # not idle for longer than the finish time yet
    clock.step(1)
    done = s.finish()
    assert [(e["action"], e["series"]) for e in done] == [
        ("Reconcile", {"count": 3, "lastObservedTime": "2026-01-01T00:00:02.000000Z"})]
    assert len(s) == 0  # the single Delete event is forgotten too
    assert "series" not in (s.observe(_new_event(), "2026-01-01T01:00:00.000000Z") or {})  # starts over
