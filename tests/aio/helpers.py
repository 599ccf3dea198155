"""Helpers for the asyncio shell's tests (no pytest-asyncio: each test runs its own loop with a hard timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from keyqueue import aio

R = TypeVar("R")


def run(coro: Coroutine[Any, Any, R], timeout: float = 10.0, *, debug: bool = False) -> R:
    """``asyncio.run(coro)`` with a deadline, so a broken wake-up fails the test instead of hanging it.

    ``debug=True`` runs the loop in asyncio's debug mode, in which a non-thread-safe call on the loop from another
    thread (e.g. resolving one of its futures directly) raises ``RuntimeError`` instead of passing unnoticed.
    """

    async def main() -> R:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(main(), debug=debug)


def waiting_getters(q: aio.Queue[Any]) -> int:
    return len(q._getters)


async def until_waiting(q: aio.Queue[Any], n: int = 1) -> None:
    """Yield to the loop until ``n`` ``get()`` calls are parked in ``q`` (each task needs one loop step)."""
    for _ in range(1000):
        if waiting_getters(q) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"expected {n} waiting get() calls, found {waiting_getters(q)}")


def state(q: aio.Queue[Any]) -> tuple[list[Any], set[Any], set[Any]]:
    """(fifo, dirty, processing) of the queue's core, for asserting that nothing was lost or left behind."""
    core = q._core
    return list(core.ordering), set(core.dirty), set(core.processing)
