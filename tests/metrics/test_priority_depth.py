"""``workqueue_depth`` per priority: client-go's exact labels by default, controller-runtime's ``priority`` label
(capped at 25 values per queue) with ``PrometheusMetricsProvider(priority_label=True)``; both priority-queue shells.

Every scrape is parsed back with ``prometheus_client.parser`` (via :class:`tests.metrics.prom.Scrape`).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import keyqueue
from keyqueue import FakeClock, aio
from keyqueue.metrics import PrometheusMetricsProvider, SnapshotMetricsProvider
from keyqueue.metrics._recorders import PullRecorder
from keyqueue.priority import MAX_PRIORITY_LABELS, OVERFLOW_LABEL
from tests.metrics.prom import Scrape

SHELLS = ["threaded", "aio"]


def make_pq(shell: str, name: str, provider: Any, clock: FakeClock | None = None) -> Any:
    if shell == "threaded":
        return keyqueue.PriorityQueue(name=name, clock=clock, metrics_provider=provider)
    return aio.PriorityQueue(name=name, clock=clock, metrics_provider=provider)


def take(q: Any) -> tuple[Any, int]:
    """Hand out the next ready key (never waits: timeout 0), from either shell."""
    if isinstance(q, aio.PriorityQueue):
        return asyncio.run(q.get_with_priority(timeout=0))
    got: tuple[Any, int] = q.get_with_priority(timeout=0)
    return got


def depth_series(s: Scrape) -> list[dict[str, str]]:
    return [dict(smp.labels) for smp in s.families["workqueue_depth"].samples]


def depth_by_label(s: Scrape, name: str) -> dict[str, float]:
    """priority label -> value of ``workqueue_depth`` for one queue name (priority mode)."""
    out: dict[str, float] = {}
    for smp in s.families["workqueue_depth"].samples:
        if smp.labels["name"] == name:
            assert set(smp.labels) == {"name", "priority"}
            out[smp.labels["priority"]] = float(smp.value)
    return out


def fill(shell: str, provider: Any) -> tuple[Any, Any, FakeClock]:
    """A plain queue "plain" (2 ready keys) and a priority queue "pq" with 5 ready keys (p10: a, r; p0: b, c;
    p-3: d, one of them re-added while processing), one key being processed and one delayed key (not in depth)."""
    clock = FakeClock()
    plain: keyqueue.Queue[str] = keyqueue.Queue(name="plain", clock=clock, metrics_provider=provider)
    plain.add("x")
    plain.add("y")
    pq = make_pq(shell, "pq", provider, clock)
    pq.add("r", priority=10)
    assert take(pq) == ("r", 10)  # r is being processed ...
    pq.add("r", priority=10)  # ... and re-added: ready (counted in len and depth), handed out after done
    pq.add("a", priority=10)
    pq.add("b")
    pq.add("c")
    pq.add("d", priority=-3)
    pq.add("w", priority=7, after=5.0)  # waiting: in neither len nor depth
    assert len(pq) == 5
    return plain, pq, clock


@pytest.mark.parametrize("shell", SHELLS)
def test_default_mode_has_client_go_labels_and_total_depth(shell: str) -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)
    assert provider.priority_label is False
    _plain, pq, clock = fill(shell, provider)  # _plain keeps the plain queue alive
    s = Scrape(registry)
    for smp in s.samples():
        extra = {"le"} if smp.name.endswith("_bucket") else set()
        assert set(smp.labels) == {"name"} | extra, smp
    assert "priority" not in s.text
    assert s.value("workqueue_depth", name="pq") == len(pq) == 5
    assert s.value("workqueue_depth", name="plain") == 2
    # The total follows the queue: the delayed key counts once due (the queue makes it ready at its next call,
    # here len()), a hand-out leaves.
    clock.step(5.0)
    assert len(pq) == 6
    assert Scrape(registry).value("workqueue_depth", name="pq") == 6
    take(pq)
    assert len(pq) == 5
    assert Scrape(registry).value("workqueue_depth", name="pq") == 5
    assert "priority" not in Scrape(registry).text
    # The snapshot still carries the split (the provider counts it either way); only the exposition omits it.
    assert provider.snapshot()["pq"].depth_by_priority is not None


@pytest.mark.parametrize("shell", SHELLS)
def test_priority_mode_splits_depth_and_sums_to_the_total(shell: str) -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry, priority_label=True)
    assert provider.priority_label is True
    _plain, pq, clock = fill(shell, provider)  # _plain keeps the plain queue alive
    s = Scrape(registry)
    # Only workqueue_depth carries the priority label; every other family keeps exactly `name` (and `le`).
    for smp in s.samples():
        if smp.name == "workqueue_depth":
            assert set(smp.labels) == {"name", "priority"}
        else:
            extra = {"le"} if smp.name.endswith("_bucket") else set()
            assert set(smp.labels) == {"name"} | extra, smp
    assert depth_by_label(s, "plain") == {"": 2}
    split = depth_by_label(s, "pq")
    assert split == {"-3": 1, "0": 2, "10": 2}
    assert sum(split.values()) == len(pq) == 5
    assert split == {k: float(v) for k, v in pq.depth_by_priority().items()}
    assert s.families["workqueue_depth"].type == "gauge"
    # Order in the exposition: name by name, labels by priority value.
    assert [(d["name"], d["priority"]) for d in depth_series(s)] == [
        ("plain", ""),
        ("pq", "-3"),
        ("pq", "0"),
        ("pq", "10"),
    ]

    # A bump moves a ready key between labels; the delayed key joins its label when due; a hand-out leaves.
    pq.add("d", priority=10)
    clock.step(5.0)
    assert len(pq) == 6  # the queue makes due keys ready at its next call
    split = depth_by_label(Scrape(registry), "pq")
    assert split == {"-3": 0, "0": 2, "7": 1, "10": 3}  # a label once given stays, at 0
    assert sum(split.values()) == 6
    assert take(pq) == ("a", 10)  # r (re-added while processing) is not handed out before its done
    pq.done("r")
    assert take(pq) == ("r", 10)  # back at its FIFO place, ahead of the bumped d
    split = depth_by_label(Scrape(registry), "pq")
    assert split == {"-3": 0, "0": 2, "7": 1, "10": 1}
    assert sum(split.values()) == len(pq) == 4
    # The other families are the usual ones, once per name.
    assert Scrape(registry).value("workqueue_adds_total", name="pq") == 7  # r, r again, a, b, c, d, w when due


@pytest.mark.parametrize("shell", SHELLS)
def test_thirty_priorities_give_25_labels_and_the_overflow_label(shell: str) -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry, priority_label=True)
    pq = make_pq(shell, "storm", provider)
    priorities = list(range(100, 130))  # 30 distinct priorities, one key each
    for p in priorities:
        pq.add(f"k{p}", priority=p)
    split = depth_by_label(Scrape(registry), "storm")
    first = {str(p) for p in priorities[:MAX_PRIORITY_LABELS]}  # labels go to the first 25 priorities seen
    assert len(split) == MAX_PRIORITY_LABELS + 1
    assert set(split) == first | {OVERFLOW_LABEL}
    assert all(split[label] == 1 for label in first)
    assert split[OVERFLOW_LABEL] == 30 - MAX_PRIORITY_LABELS
    assert sum(split.values()) == len(pq) == 30
    # Series order: numeric labels by value, the overflow label last.
    assert [d["priority"] for d in depth_series(Scrape(registry))][-1] == OVERFLOW_LABEL
    # More priorities never add series: they all land on the overflow label.
    for p in range(-50, -40):
        pq.add(f"n{p}", priority=p)
    split = depth_by_label(Scrape(registry), "storm")
    assert len(split) == MAX_PRIORITY_LABELS + 1
    assert split[OVERFLOW_LABEL] == 15
    # Handing out the highest keys (all overflow: 125..129 are above every labelled one) drains that label only.
    for _ in range(5):
        key, prio = take(pq)
        assert prio >= 125
        pq.done(key)
    split = depth_by_label(Scrape(registry), "storm")
    assert split[OVERFLOW_LABEL] == 10
    assert sum(split.values()) == len(pq) == 35


@pytest.mark.parametrize("shell", SHELLS)
def test_thirty_priorities_in_default_mode_stay_one_series(shell: str) -> None:
    # Control for the test above: the same storm under client-go's labels is one series with the total.
    registry = CollectorRegistry()
    pq = make_pq(shell, "storm", PrometheusMetricsProvider(registry))
    for p in range(30):
        pq.add(f"k{p}", priority=p)
    s = Scrape(registry)
    assert depth_series(s) == [{"name": "storm"}]
    assert s.value("workqueue_depth", name="storm") == 30


def test_snapshot_carries_depth_by_priority_for_priority_queues_only() -> None:
    provider = SnapshotMetricsProvider()
    plain: keyqueue.Queue[str] = keyqueue.Queue(name="plain", metrics_provider=provider)
    plain.add("x")
    pq: keyqueue.PriorityQueue[str] = keyqueue.PriorityQueue(name="pq", metrics_provider=provider)
    pq.add("a", priority=2)
    pq.add("b", priority=2)
    pq.add("c", priority=-1)
    snap = provider.snapshot()
    assert snap["plain"].depth_by_priority is None
    assert snap["pq"].depth_by_priority == {"-1": 1, "2": 2}
    assert snap["pq"].depth == 3
    # Snapshots are copies: changing one does not change the queue's counts.
    copied = snap["pq"].depth_by_priority
    assert copied is not None
    copied["2"] = 99
    assert provider.snapshot()["pq"].depth_by_priority == {"-1": 1, "2": 2}
    # QueueMetrics stays hashable (the mapping is left out of the hash).
    assert isinstance(hash(provider.snapshot()["pq"]), int)
    # The hook sits on the priority queue's recorder only; a plain queue's recorder has none.
    assert isinstance(plain._core.metrics, PullRecorder)
    assert plain._core.metrics.priority_depth is None
    assert isinstance(pq._core.metrics, PullRecorder)
    assert pq._core.metrics.priority_depth is pq._depth


def test_a_name_shared_by_plain_and_priority_queues() -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry, priority_label=True)
    plain: keyqueue.Queue[str] = keyqueue.Queue(name="shared", metrics_provider=provider)
    pq1: keyqueue.PriorityQueue[str] = keyqueue.PriorityQueue(name="shared", metrics_provider=provider)
    pq2: aio.PriorityQueue[str] = aio.PriorityQueue(name="shared", metrics_provider=provider)
    plain.add("x")
    plain.add("y")
    pq1.add("a", priority=1)
    pq2.add("a", priority=1)
    pq2.add("b", priority=4)
    m = provider.snapshot()["shared"]
    assert m.depth_by_priority == {"": 2, "1": 2, "4": 1}
    assert sum(m.depth_by_priority.values()) == m.depth == 5
    assert depth_by_label(Scrape(registry), "shared") == {"": 2, "1": 2, "4": 1}
    # When the priority queues are gone, the name is a plain queue's again: one series, priority="".
    del pq1, pq2
    gc.collect()
    assert provider.snapshot()["shared"].depth_by_priority is None
    assert depth_by_label(Scrape(registry), "shared") == {"": 2}


def test_priority_mode_before_any_queue_exports_nothing_and_still_claims_the_names() -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry, priority_label=True)
    assert Scrape(registry).text == ""
    with pytest.raises(ValueError, match="already has workqueue_"):
        PrometheusMetricsProvider(registry)
    provider.unregister()
    PrometheusMetricsProvider(registry)  # control: free again once unregistered


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_priority_label_must_be_a_bool(bad: object) -> None:
    registry = CollectorRegistry()
    with pytest.raises(TypeError, match=f"priority_label must be a bool, got {type(bad).__name__}"):
        PrometheusMetricsProvider(registry, priority_label=bad)  # type: ignore[arg-type]
    PrometheusMetricsProvider(registry)  # nothing was registered by the failed call
