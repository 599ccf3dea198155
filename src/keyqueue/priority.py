"""controller-runtime's priority queue beyond its state machine: its default rate limiter and the depth per
priority label it exports. The queues are :class:`keyqueue.PriorityQueue` and :class:`keyqueue.aio.PriorityQueue`.

Metrics (for a named queue with a provider): the queue's metrics under their usual names, with controller-runtime's
priority-queue meaning (adds and depth count a key when it becomes ready, so a delayed key is not in depth; queue
latency runs from becoming ready to hand-out; retries count adds whose delay is > 0, merged or not), plus depth per
priority label (:meth:`PriorityQueue.depth_by_priority <keyqueue.PriorityQueue.depth_by_priority>`, at most
:data:`MAX_PRIORITY_LABELS` labels). A :class:`~keyqueue.metrics.SnapshotMetricsProvider` snapshot carries it as
``QueueMetrics.depth_by_priority``; a :class:`~keyqueue.metrics.PrometheusMetricsProvider` exports it as
``workqueue_depth{name, priority}`` when built with ``priority_label=True``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

from keyqueue.ratelimit import ItemExponentialFailureRateLimiter

__all__ = ["MAX_PRIORITY_LABELS", "OVERFLOW_LABEL", "PriorityDepth", "default_priority_rate_limiter"]

#: controller-runtime's cap on distinct ``priority`` label values of ``workqueue_depth``.
MAX_PRIORITY_LABELS: Final = 25
#: The label value used for every priority beyond the first :data:`MAX_PRIORITY_LABELS` distinct ones.
OVERFLOW_LABEL: Final = "exceeded_cardinality_limit"


def default_priority_rate_limiter() -> ItemExponentialFailureRateLimiter[Hashable]:
    """controller-runtime's priority-queue default: per-key exponential backoff 5 ms .. 1000 s, no token bucket."""
    return ItemExponentialFailureRateLimiter(0.005, 1000.0)


class PriorityDepth:
    """Ready keys per priority label, with controller-runtime's cardinality cap. Not thread-safe (the queue's
    lock guards it).

    The first :data:`MAX_PRIORITY_LABELS` distinct priorities seen get their decimal string as label; every later
    one is counted under :data:`OVERFLOW_LABEL`. A label, once given, stays (its count may drop to 0).
    """

    __slots__ = ("_depth", "_labels")

    def __init__(self) -> None:
        self._labels: dict[int, str] = {}
        self._depth: dict[str, int] = {}

    def label(self, priority: int) -> str:
        """The label ``priority`` is counted under (assigning one if it is new)."""
        label = self._labels.get(priority)
        if label is None:
            label = str(priority) if len(self._labels) < MAX_PRIORITY_LABELS else OVERFLOW_LABEL
            self._labels[priority] = label
        return label

    def inc(self, priority: int) -> None:
        label = self.label(priority)
        self._depth[label] = self._depth.get(label, 0) + 1

    def dec(self, priority: int) -> None:
        label = self.label(priority)
        self._depth[label] = self._depth.get(label, 0) - 1

    def snapshot(self) -> dict[str, int]:
        """label → ready keys at that priority (labels that ever had a key; counts may be 0)."""
        return dict(self._depth)
