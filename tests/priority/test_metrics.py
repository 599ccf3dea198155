"""Priority-queue metrics: controller-runtime's meaning of adds/depth/retries/latency, and depth per priority with
the 25-label cap."""

from __future__ import annotations

from typing import Any

from keyqueue import FakeClock, PriorityQueue
from keyqueue.metrics import SnapshotMetricsProvider
from keyqueue.priority import MAX_PRIORITY_LABELS, OVERFLOW_LABEL, PriorityDepth


def snap(provider: SnapshotMetricsProvider, name: str) -> Any:
    return provider.snapshot()[name]


def test_depth_counts_ready_keys_per_priority_and_moves_on_bump() -> None:
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(name="pq", metrics_provider=provider)
    q.add("a", priority=1)
    q.add("b", priority=1)
    q.add("c")
    assert q.depth_by_priority() == {"1": 2, "0": 1}
    q.add("c", priority=1)  # raised: depth moves from label 0 to label 1
    assert q.depth_by_priority() == {"1": 3, "0": 0}
    assert snap(provider, "pq").depth == 3
    assert snap(provider, "pq").adds == 3  # the bump is not an add
    q.get(timeout=0)
    assert q.depth_by_priority() == {"1": 2, "0": 0}
    assert snap(provider, "pq").depth == 2


def test_waiting_keys_are_not_in_depth_and_adds_count_when_ready() -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(name="pq", clock=clock, metrics_provider=provider)
    q.add("w", after=1, priority=2)
    m = snap(provider, "pq")
    assert (m.depth, m.adds, m.retries) == (0, 0, 1)
    assert q.depth_by_priority() == {}
    clock.step(1)
    assert len(q) == 1
    m = snap(provider, "pq")
    assert (m.depth, m.adds) == (1, 1)
    assert q.depth_by_priority() == {"2": 1}


def test_retries_count_only_adds_with_a_positive_effective_delay() -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(name="pq", clock=clock, metrics_provider=provider)
    q.add_after("a", 0)
    q.add_after("b", -1)
    q.add("c", rate_limited=True, after=-1)  # rate limited, but the effective delay is negative: ready now
    assert snap(provider, "pq").retries == 0
    q.add_after("d", 1)
    q.add_rate_limited("e")
    q.add_after("d", 5)  # merged into d's entry (kept), still a retry as in controller-runtime
    assert snap(provider, "pq").retries == 3
    q.shut_down()
    q.add_after("f", 1)  # dropped: not counted
    assert snap(provider, "pq").retries == 3


def test_latency_runs_from_becoming_ready_to_hand_out() -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(name="pq", clock=clock, metrics_provider=provider)
    q.add("a", after=1)
    clock.step(1)  # ready at t=1
    clock.step(0.00005)
    assert q.get(timeout=0) == "a"
    h = snap(provider, "pq").queue_duration
    assert h.count == 1
    assert h.sum == 5e-05
    clock.step(0.000025)
    q.done("a")
    w = snap(provider, "pq").work_duration
    assert (w.count, w.sum) == (1, 2.5e-05)


def test_priority_label_cardinality_is_capped_at_25() -> None:
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(name="pq", metrics_provider=provider)
    for p in range(40):
        q.add(f"k{p}", priority=p)
    depth = q.depth_by_priority()
    assert len(depth) == MAX_PRIORITY_LABELS + 1
    assert depth[OVERFLOW_LABEL] == 40 - MAX_PRIORITY_LABELS
    assert all(depth[str(p)] == 1 for p in range(MAX_PRIORITY_LABELS))
    assert sum(depth.values()) == 40
    # Draining takes keys from the overflow label too, and never below zero.
    for _ in range(40):
        q.done(q.get(timeout=0))
    assert set(q.depth_by_priority().values()) == {0}


def test_priority_depth_labels_stick() -> None:
    d = PriorityDepth()
    for p in range(MAX_PRIORITY_LABELS):
        d.inc(p)
    d.inc(1000)
    assert d.label(1000) == OVERFLOW_LABEL
    assert d.label(3) == "3"  # an early label keeps its own value
    d.dec(1000)
    assert d.snapshot()[OVERFLOW_LABEL] == 0


def test_unnamed_queue_emits_nothing() -> None:
    provider = SnapshotMetricsProvider()
    q: PriorityQueue[str] = PriorityQueue(metrics_provider=provider)
    q.add("a", priority=3)
    assert q.depth_by_priority() == {}
    assert provider.snapshot() == {}
    assert q._core.metrics is None
