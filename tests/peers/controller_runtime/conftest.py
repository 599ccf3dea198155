"""The priority-queue translations run on both priority queue shells: ``tests/priority``'s own ``make_pq`` fixture
(a :class:`keyqueue.PriorityQueue`, or a :class:`keyqueue.aio.PriorityQueue` behind a blocking facade)."""

from __future__ import annotations

from tests.priority.conftest import make_pq

__all__ = ["make_pq"]
