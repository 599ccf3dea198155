"""The asyncio shell on its own (the conformance suite drives it through a facade): native use in one loop."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio
import redis.exceptions

import keyqueue.redis.aio as rq
from keyqueue import AddResult, ShutDown
from keyqueue.redis import RedisUnavailable
from tests.redis.proxy import CuttableProxy, redis_port


def test_async_workers_share_keys_one_holder_each(redis_url: str) -> None:
    async def main() -> list[str]:
        name = f"aio-{uuid.uuid4().hex[:8]}"
        async with rq.Queue(name, url=redis_url) as q, rq.Queue(name, url=redis_url) as other:
            for i in range(20):
                assert await q.add(f"k{i}") == AddResult.QUEUED
            seen: list[str] = []

            async def worker(handle: rq.Queue) -> None:
                async for key in handle:
                    assert key not in seen
                    seen.append(key)
                    if len(seen) == 20:
                        q.shut_down()
                        other.shut_down()

            await asyncio.wait_for(asyncio.gather(worker(q), worker(other), worker(q)), 10)
            assert q.held == [] and other.held == []
            await q.delete()
            return seen

    assert sorted(asyncio.run(main())) == sorted(f"k{i}" for i in range(20))


def test_lease_context_and_shutdown_wakes_a_waiting_get(redis_url: str) -> None:
    async def main() -> None:
        async with rq.RateLimitingQueue(f"aio-{uuid.uuid4().hex[:8]}", url=redis_url) as q:
            await q.add("a")
            async with q.lease(timeout=1) as key:
                assert await q.add(key) == AddResult.MARKED
            assert await q.len() == 1  # done ran and queued the re-add
            assert await q.get(timeout=1) == "a"
            assert await q.add_rate_limited("a") == AddResult.DELAYED
            assert await q.num_requeues("a") == 1
            await q.forget("a")
            assert await q.num_requeues("a") == 0
            assert await q.done("a") is False  # the rate-limited add is delayed, not dirty: no redelivery
            assert await q.delete() > 0  # nothing left, not even the delayed "a": the next get() must wait
            waiter = asyncio.ensure_future(q.get())
            for _ in range(5000):
                if q._getters or waiter.done():
                    break
                await asyncio.sleep(0.001)
            assert q._getters == 1
            q.shut_down()
            with pytest.raises(ShutDown):
                await asyncio.wait_for(waiter, 5)
            await q.delete()

    asyncio.run(main())


def test_unreachable_redis_names_the_url() -> None:
    async def main() -> None:
        q = rq.Queue("x", url="redis://127.0.0.1:1/0")
        with pytest.raises(RedisUnavailable, match="127"):
            await q.add("a")
        with pytest.raises(RedisUnavailable, match="127"):
            await q.get(timeout=0.2)
        await q.aclose()

    asyncio.run(main())


def test_scripts_flushed_from_redis_are_loaded_again(redis_url: str) -> None:
    import redis

    async def main() -> None:
        async with rq.Queue(f"aio-{uuid.uuid4().hex[:8]}", url=redis_url) as q:
            assert await q.add("a") == AddResult.QUEUED
            with redis.Redis.from_url(redis_url) as sync:
                sync.script_flush()
            assert await q.add("b") == AddResult.QUEUED  # NOSCRIPT: loaded and sent once more, applied once
            assert (await q.inspect())["queued"] == 2
            assert await q.get(timeout=1) == "a"
            await q.delete()

    asyncio.run(main())


def test_a_queue_left_by_an_older_layout_is_refused_until_deleted(redis_url: str) -> None:
    import redis

    from keyqueue.redis import RedisQueueError

    async def main() -> None:
        name = f"aio-old-{uuid.uuid4().hex[:8]}"
        with redis.Redis.from_url(redis_url) as sync:
            sync.hset(f"kq:{{{name}}}:lease", "a", "1|h")
        async with rq.Queue(name, url=redis_url) as q:
            for call in (lambda: q.add("a"), lambda: q.add_many(["a"]), lambda: q.get(timeout=1)):
                with pytest.raises(RedisQueueError, match=rf"older keyqueue.*DEL kq:{{{name}}}:fifo"):
                    await call()
            assert await q.delete() == 1
            assert await q.add("a") == AddResult.QUEUED
            await q.delete()

    asyncio.run(main())


def test_add_many_pipelines_adds_in_order(redis_url: str) -> None:
    import redis

    async def main() -> None:
        async with rq.Queue(f"aio-{uuid.uuid4().hex[:8]}", url=redis_url) as q:
            with redis.Redis.from_url(redis_url) as sync:
                sync.script_flush()
            keys = ["a", "b", "a"] + [f"k{i}" for i in range(1_500)]
            results = await q.add_many(keys)
            assert results[:3] == [AddResult.QUEUED, AddResult.QUEUED, AddResult.DEDUP]
            assert results[3:] == [AddResult.QUEUED] * 1_500
            assert (await q.inspect())["queued"] == 2 + 1_500
            assert await q.get(timeout=1) == "a"
            with pytest.raises(TypeError, match="bytes"):
                await q.add_many([b"x"])
            q.shut_down()
            assert await q.add_many(["z"]) == [AddResult.DROPPED]
            await q.delete()

    asyncio.run(main())


def test_get_on_a_dead_connection_raises_within_its_timeout(redis_url: str) -> None:
    # As the threaded shell's test (tests/redis/test_faults.py), with its control next to it: a plain
    # redis.asyncio BLPOP on the same dead connection waits out the socket timeout (3 s).
    bound = 2.0  # generous slack over GET_MARGIN (0.5 s)

    async def main() -> tuple[float, float]:
        with CuttableProxy(redis_port(redis_url)) as proxy:
            url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3"
            async with rq.Queue(f"aio-dead-{uuid.uuid4().hex[:8]}", url=url) as q:
                with pytest.raises(TimeoutError):
                    await q.get(timeout=0.05)  # an open, answering connection in the pool
                proxy.cut()
                start = time.monotonic()
                with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}.*did not answer"):
                    await q.get(timeout=0.5)
                queue_s = time.monotonic() - start
                proxy.restore()
                assert await q.add("k") == AddResult.QUEUED  # nothing half-applied; the handle works again
                assert await q.get(timeout=1) == "k"
                assert await q.done("k") is False
                await q.delete()
            client = redis.asyncio.Redis.from_url(url)  # control: from_url, no retries
            assert await client.ping()
            proxy.cut()
            start = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError):
                await client.blpop(["nothing"], timeout=0.5)
            plain_s = time.monotonic() - start
            await client.aclose()
            return queue_s, plain_s

    queue_s, plain_s = asyncio.run(main())
    assert queue_s < 0.5 + bound
    assert plain_s >= 0.5 + bound


def test_renewal_and_a_first_connect_on_a_dead_connection_are_bounded(redis_url: str) -> None:
    # A renewal gives up at the beat interval (lease / 3 = 0.3 s), not the socket timeout (3 s); a fresh handle's get
    # that must open its connection through the cut is bounded by its deadline. Control: len(), bounded by the socket
    # timeout only, waits it out on the same dead connection.
    bound = 2.0

    async def main() -> tuple[float, float, float]:
        with CuttableProxy(redis_port(redis_url)) as proxy:
            url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3"
            name = f"aio-renew-{uuid.uuid4().hex[:8]}"
            async with rq.Queue(name, url=url, lease=0.9) as q, rq.Queue(name, url=url) as fresh:
                await q.add("k")
                assert await q.get(timeout=1) == "k"
                assert q._beat is not None
                q._beat.cancel()  # this test drives the renewals itself
                proxy.cut()
                start = time.monotonic()
                with pytest.raises(RedisUnavailable, match="did not answer renew"):
                    await q._renew()
                renew_s = time.monotonic() - start
                start = time.monotonic()
                with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}"):
                    await fresh.get(timeout=0.5)
                connect_s = time.monotonic() - start
                start = time.monotonic()
                with pytest.raises(RedisUnavailable):
                    await q.len()
                control_s = time.monotonic() - start
                proxy.restore()
                await q._renew()  # answered again (it raises if not)
                assert await q.done("k") is False
                await q.delete()
            return renew_s, connect_s, control_s

    renew_s, connect_s, control_s = asyncio.run(main())
    assert renew_s < 0.3 + bound
    assert connect_s < 0.5 + bound
    assert control_s >= 0.3 + bound


def test_one_heartbeat_task_and_none_after_aclose(redis_url: str) -> None:
    async def main() -> None:
        q = rq.Queue(f"aio-{uuid.uuid4().hex[:8]}", url=redis_url)
        await q.add_many(["a", "b"])
        assert {await q.get(timeout=5), await q.get(timeout=5)} == {"a", "b"}
        beat = q._beat
        assert beat is not None and not beat.done()
        q._ensure_heartbeat()
        assert q._beat is beat  # the second get started none
        await q.delete()
        await q.aclose()
        assert beat.done()
        q._ensure_heartbeat()  # a get whose key arrives after aclose() would call this
        assert q._beat is beat

    asyncio.run(main())
