"""client-go's metrics test sequence (TestMetrics in util/workqueue), with a FakeClock, exact values.

add -> adds 1, depth 1; +50 µs, get -> queue latency 5e-05; 5 adds while processing -> adds 2, depth 1;
+25 µs, done -> work duration 2.5e-05; get -> latency 2.5e-05; +1 ms -> unfinished 0.001, longest 0.001;
done -> work duration 0.001.

Run against three observers (a recording MetricsProvider, SnapshotMetricsProvider, the Prometheus exposition),
both shells (via the conformance ``make_queue`` fixture: threading and asyncio) and every queue class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import keyqueue
from keyqueue import FakeClock
from keyqueue.metrics import PrometheusMetricsProvider, SnapshotMetricsProvider
from tests.metrics.prom import Scrape
from tests.metrics.recording import RecordingProvider

KINDS = ["queue", "delaying", "ratelimiting"]


def drive(q: Any, clock: FakeClock, check: Callable[[str], None]) -> None:
    """The sequence; ``check(step)`` asserts the metrics after each step."""
    q.add("x")
    check("added")
    clock.step(50e-6)
    assert q.get(timeout=5) == "x"
    check("got")
    for _ in range(5):
        q.add("x")
    check("re-added")
    clock.step(25e-6)
    assert q.done("x") is True  # re-added while processing: back in the queue
    check("done1")
    assert q.get(timeout=5) == "x"
    check("got2")
    clock.step(1e-3)
    check("stepped")
    assert q.done("x") is False
    check("done2")


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_recording_provider(make_queue: Callable[..., Any], kind: str) -> None:
    clock = FakeClock()
    provider = RecordingProvider()
    q = make_queue(kind, name="seq", clock=clock, metrics_provider=provider)
    m = provider.series["seq"]
    # The queue asked once for each of the seven metrics, for its own name.
    assert sorted(provider.created) == sorted(
        (k, "seq") for k in ("depth", "adds", "latency", "work", "unfinished", "longest", "retries")
    )

    def check(step: str) -> None:
        if step == "added":
            assert (m.adds.value, m.depth.value) == (1, 1)
        elif step == "got":
            assert m.depth.value == 0
            assert m.latency.observations == [5e-05]
        elif step == "re-added":
            assert (m.adds.value, m.depth.value) == (2, 1)
        elif step == "done1":
            assert m.work.observations == [2.5e-05]
            assert m.depth.value == 1  # queued again, still dirty
        elif step == "got2":
            assert m.latency.observations == [5e-05, 2.5e-05]
            assert m.depth.value == 0
        elif step == "stepped":
            # The FakeClock step refreshed the in-flight gauges (client-go: its ticker on a fake clock).
            assert m.unfinished.value == 0.001
            assert m.longest.value == 0.001
        elif step == "done2":
            assert m.work.observations == [2.5e-05, 0.001]
            assert m.retries.value == 0

    drive(q, clock, check)
    assert m.adds.value == 2 and m.depth.value == 0


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_snapshot_provider(make_queue: Callable[..., Any], kind: str) -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q = make_queue(kind, name="seq", clock=clock, metrics_provider=provider)

    def check(step: str) -> None:
        s = provider.snapshot()["seq"]
        qd, wd = s.queue_duration, s.work_duration
        if step == "added":
            assert (s.adds, s.depth) == (1, 1)
            assert qd.count == 0 and wd.count == 0
        elif step == "got":
            assert s.depth == 0
            assert (qd.count, qd.sum) == (1, 5e-05)
            assert dict(qd.buckets)[1e-05] == 0 and dict(qd.buckets)[0.0001] == 1
            assert s.unfinished_work_seconds == 0.0  # started this instant
        elif step == "re-added":
            assert (s.adds, s.depth) == (2, 1)
        elif step == "done1":
            assert (wd.count, wd.sum) == (1, 2.5e-05)
            assert dict(wd.buckets)[1e-05] == 0 and dict(wd.buckets)[0.0001] == 1
            assert s.unfinished_work_seconds == 0.0 and s.longest_running_processor_seconds == 0.0
        elif step == "got2":
            # The sum is kept in integer ns: exactly 75 µs (float addition would give 7.500000000000001e-05).
            assert qd.count == 2 and qd.sum == 7.5e-05
            assert s.depth == 0
        elif step == "stepped":
            assert s.unfinished_work_seconds == 0.001
            assert s.longest_running_processor_seconds == 0.001
        elif step == "done2":
            assert wd.count == 2 and wd.sum == 0.001025
            # 1 ms is exactly a bound: counted in le=0.001 (upper bounds are inclusive), not above it.
            assert dict(wd.buckets)[0.0001] == 1 and dict(wd.buckets)[0.001] == 2
            assert s.unfinished_work_seconds == 0.0  # nothing in flight any more
            assert s.retries == 0 and s.queues == 1

    drive(q, clock, check)


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_prometheus_exposition(make_queue: Callable[..., Any], kind: str) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    q = make_queue(kind, name="seq", clock=clock, metrics_provider=PrometheusMetricsProvider(registry))
    lbl = {"name": "seq"}

    def check(step: str) -> None:
        s = Scrape(registry)
        v = s.value
        if step == "added":
            assert v("workqueue_adds_total", **lbl) == 1 and v("workqueue_depth", **lbl) == 1
            assert v("workqueue_queue_duration_seconds_count", **lbl) == 0
        elif step == "got":
            assert v("workqueue_depth", **lbl) == 0
            assert v("workqueue_queue_duration_seconds_count", **lbl) == 1
            assert v("workqueue_queue_duration_seconds_sum", **lbl) == 5e-05
            b = s.buckets("workqueue_queue_duration_seconds", "seq")
            assert (b["1e-05"], b["0.0001"], b["+Inf"]) == (0, 1, 1)
        elif step == "re-added":
            assert v("workqueue_adds_total", **lbl) == 2 and v("workqueue_depth", **lbl) == 1
        elif step == "done1":
            assert v("workqueue_work_duration_seconds_count", **lbl) == 1
            assert v("workqueue_work_duration_seconds_sum", **lbl) == 2.5e-05
        elif step == "got2":
            assert v("workqueue_queue_duration_seconds_count", **lbl) == 2
            assert v("workqueue_queue_duration_seconds_sum", **lbl) == 7.5e-05
        elif step == "stepped":
            assert v("workqueue_unfinished_work_seconds", **lbl) == 0.001
            assert v("workqueue_longest_running_processor_seconds", **lbl) == 0.001
        elif step == "done2":
            assert v("workqueue_work_duration_seconds_count", **lbl) == 2
            assert v("workqueue_work_duration_seconds_sum", **lbl) == 0.001025
            b = s.buckets("workqueue_work_duration_seconds", "seq")
            assert (b["0.0001"], b["0.001"], b["0.01"], b["+Inf"]) == (1, 2, 2, 2)
            assert v("workqueue_unfinished_work_seconds", **lbl) == 0
            assert v("workqueue_longest_running_processor_seconds", **lbl) == 0
            assert v("workqueue_retries_total", **lbl) == 0

    drive(q, clock, check)


def test_sequence_priority_queue() -> None:
    """The priority queue (threads and asyncio) feeds the same recorder."""
    classes: list[Any] = [keyqueue.PriorityQueue]
    try:
        from keyqueue.aio import PriorityQueue as AioPriorityQueue
    except ImportError:  # pragma: no cover - the asyncio priority queue has not landed
        pass
    else:
        classes.append(AioPriorityQueue)
    for cls in classes:
        clock = FakeClock()
        provider = SnapshotMetricsProvider()
        q = cls(name="prio", clock=clock, metrics_provider=provider)
        q.add("x")
        clock.step(50e-6)
        if cls is keyqueue.PriorityQueue:
            assert q.get(timeout=5) == "x"
        else:
            from tests.aio.helpers import run

            assert run(q.get(5)) == "x"
        q.add("x")
        clock.step(25e-6)
        q.done("x")
        s = provider.snapshot()["prio"]
        assert (s.adds, s.depth) == (2, 1), cls
        assert (s.queue_duration.count, s.queue_duration.sum) == (1, 5e-05), cls
        assert (s.work_duration.count, s.work_duration.sum) == (1, 2.5e-05), cls
        q.shut_down()


def test_sequence_counting_core() -> None:
    """``stats=True`` (every add goes through the locked path) records the same numbers."""
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: keyqueue.Queue[str] = keyqueue.Queue(name="s", clock=clock, metrics_provider=provider, stats=True)
    q.add("x")
    clock.step(50e-6)
    q.get()
    for _ in range(5):
        q.add("x")
    s = provider.snapshot()["s"]
    assert (s.adds, s.depth, s.queue_duration.sum) == (2, 1, 5e-05)
    assert q.stats().deduplicated == 4
