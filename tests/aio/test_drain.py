"""shut_down_with_drain() while async workers are mid-processing."""

from __future__ import annotations

import asyncio

import pytest

from keyqueue import AddResult, ShutDown, aio
from tests.aio.helpers import run, state


def test_drain_waits_for_workers_mid_processing_and_for_redeliveries() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        release = asyncio.Event()
        holding = asyncio.Semaphore(0)
        processed: list[str] = []

        async def worker() -> None:
            async for key in q:
                holding.release()
                await release.wait()
                processed.append(key)

        for k in ["a", "b", "c", "d", "e", "f"]:
            q.add(k)
        workers = [asyncio.create_task(worker()) for _ in range(4)]
        for _ in range(4):
            await holding.acquire()  # four keys are being processed, two are queued
        assert q.add("a") is AddResult.MARKED  # re-added mid-processing: must still be processed in the drain
        drains = [asyncio.create_task(q.shut_down_with_drain(timeout=10)) for _ in range(2)]
        await asyncio.sleep(0)
        assert q.shutting_down
        assert q.add("z") is AddResult.DROPPED
        assert not any(d.done() for d in drains)
        release.set()
        assert await asyncio.gather(*drains) == [True, True]  # every drain caller returns
        assert sorted(processed) == ["a", "a", "b", "c", "d", "e", "f"]
        assert state(q) == ([], set(), set())
        await asyncio.gather(*workers)  # each worker's async for ended at ShutDown
        with pytest.raises(ShutDown):
            await q.get()

    run(main())


def test_drain_done_from_a_foreign_thread() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        a = await q.get()
        d = asyncio.create_task(q.shut_down_with_drain())
        await asyncio.sleep(0)
        assert not d.done()
        await asyncio.to_thread(q.done, a)
        assert await d is True

    run(main())


def test_drain_wakes_waiting_getters_and_shut_down_releases_it() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        await q.get()  # never done
        g = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        d = asyncio.create_task(q.shut_down_with_drain())
        with pytest.raises(ShutDown):
            await g
        assert not d.done()
        await asyncio.to_thread(q.shut_down)
        assert await d is False

    run(main())


def test_drain_timeout_and_idle_drain() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        await q.get()
        assert await q.shut_down_with_drain(timeout=0.01) is False
        assert q._drainers == []
        q.done("a")
        assert await q.shut_down_with_drain(timeout=0) is True
        assert await aio.Queue[str]().shut_down_with_drain() is True

    run(main())
