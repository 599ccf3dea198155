"""client-go ``util/workqueue/metrics_test.go``, translated case by case, on both in-process shells.

client-go's test provider records every metric call; :class:`tests.metrics.recording.RecordingProvider` is the
same thing here (a plain :class:`keyqueue.metrics.MetricsProvider`, which the queue calls on every event). client-go
refreshes the two in-flight gauges on a ticker of the queue's clock; keyqueue refreshes them after every jump of a
``FakeClock``, so Go's "step the clock, wait for the update" is "step the clock, read the gauge".
"""

from __future__ import annotations

from typing import Any

from keyqueue import FakeClock
from tests.metrics.recording import RecordingProvider


def test_metric_shutdown(make_queue: Any) -> None:
    """client-go metrics_test.go TestMetricShutdown: the in-flight gauges are updated while the queue runs and no
    longer once it is shut down, however far the clock moves. (A key is kept in flight so that an update would
    have something to report; the step before shutdown is the control that shows updates do happen.)"""
    provider = RecordingProvider()
    clock = FakeClock()
    q = make_queue(name="test", clock=clock, metrics_provider=provider)
    series = provider.series["test"]
    q.add("foo")
    q.get(timeout=5)
    before = series.unfinished.calls
    clock.step(0.001)
    assert series.unfinished.calls > before  # updated while running
    q.shut_down()
    frozen = (series.unfinished.calls, series.unfinished.value, series.longest.calls, series.longest.value)
    clock.step(3600)
    assert (series.unfinished.calls, series.unfinished.value, series.longest.calls, series.longest.value) == frozen


def test_metrics(make_queue: Any) -> None:
    """client-go metrics_test.go TestMetrics: adds and depth count an add that makes a key dirty (five re-adds while
    processing count once; depth stays 1); queue latency runs from that add to ``get`` (5e-05 s, then 2.5e-05 s);
    work duration from ``get`` to ``done`` (2.5e-05 s, then 0.001 s); unfinished work and the longest-running
    processor show the key in flight for 1 ms (0.001). Exact float equality, as Go (integer nanoseconds)."""
    provider = RecordingProvider()
    clock = FakeClock(0.0)
    q = make_queue(name="test", clock=clock, metrics_provider=provider)
    m = provider.series["test"]

    q.add("foo")
    assert m.adds.value == 1
    assert m.depth.value == 1.0
    clock.step(50e-6)
    assert q.get(timeout=5) == "foo"
    assert m.latency.observations == [5e-05]

    for _ in range(5):
        q.add("foo")
    assert m.adds.value == 2
    assert m.depth.value == 1.0

    clock.step(25e-6)
    q.done("foo")
    assert m.work.observations == [2.5e-05]
    assert m.depth.value == 1.0

    assert q.get(timeout=5) == "foo"
    assert m.latency.observations == [5e-05, 2.5e-05]

    clock.step(0.001)
    assert m.unfinished.value == 0.001
    assert m.longest.value == 0.001

    q.done("foo")
    assert m.work.observations == [2.5e-05, 0.001]
