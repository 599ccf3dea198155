"""Fixtures for the priority queue tests: every behaviour test runs against both shells.

The asyncio queue is driven through a small synchronous facade (each ``get`` runs in a fresh event loop with
``asyncio.run``; the asyncio shell lets getters wait in any loop), so one test body checks both shells.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keyqueue
from keyqueue import aio


class AioFacade:
    """Blocking methods over a :class:`keyqueue.aio.PriorityQueue` (everything else is delegated)."""

    def __init__(self, q: aio.PriorityQueue[Any]) -> None:
        self.q = q

    def get(self, timeout: float | None = None) -> Any:
        return asyncio.run(self.q.get(timeout))

    def get_with_priority(self, timeout: float | None = None) -> tuple[Any, int]:
        return asyncio.run(self.q.get_with_priority(timeout))

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        return asyncio.run(self.q.shut_down_with_drain(timeout))

    def __len__(self) -> int:
        return len(self.q)

    def __repr__(self) -> str:
        return repr(self.q)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.q, name)


def build(shell: str, *args: Any, **kwargs: Any) -> Any:
    if shell == "threaded":
        return keyqueue.PriorityQueue(*args, **kwargs)
    return AioFacade(aio.PriorityQueue(*args, **kwargs))


@pytest.fixture(params=["threaded", "aio"])
def make_pq(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_pq(**kwargs)`` → a priority queue of the shell under test, shut down after the test."""
    created: list[Any] = []

    def factory(*args: Any, **kwargs: Any) -> Any:
        q = build(str(request.param), *args, **kwargs)
        created.append(q)
        return q

    yield factory
    for q in created:
        q.shut_down()
