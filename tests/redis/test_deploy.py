"""keyqueue.redis on the deployments users run, with redis-py's stock clients: Sentinel (``master_for``, threads and
asyncio) through a failover, Redis Cluster (``RedisCluster``, threads and asyncio) through a slot migration under
load, and the errors a deployment answers with (each naming the operation, the server and the server's code)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

import keyqueue.redis
import keyqueue.redis.aio
from keyqueue import AddResult
from keyqueue.redis import RedisQueueError, RedisServer, RedisUnavailable
from keyqueue.testing import eventually
from tests.redis.topology import SERVICE, ClusterSetup, cluster_setup, migrate_slot, sentinel_setup

pytestmark = pytest.mark.redis


def _name() -> str:
    return f"d-{uuid.uuid4().hex[:10]}"


def _retrying(call: Any) -> Any:
    """``call()`` until it stops raising RedisUnavailable (a failover or migration under way); the value."""
    box: list[Any] = []

    def attempt() -> bool:
        try:
            box.append(call())
        except RedisUnavailable:
            return False
        return True
    eventually(attempt, timeout=30, interval=0.1)
    return box[0]


# -- Sentinel ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentinels() -> Iterator[Any]:
    with sentinel_setup() as setup:
        yield setup


def test_sentinel_master_for_reaches_the_master_and_follows_a_failover(sentinels: Any) -> None:
    # The stock client: every call goes to the master the Sentinels name (never localhost:6379), and after a
    # SIGKILL of that master the handle carries on against the promoted replica, loading its scripts there.
    setup = sentinels
    old, new = setup.primary, setup.replica
    client = redis.sentinel.Sentinel(setup.sentinels, socket_timeout=1).master_for(SERVICE, socket_timeout=1)
    name = _name()
    q = keyqueue.redis.Queue(name, client=client, lease=10)
    try:
        assert q.url == f"redis+sentinel://{SERVICE}"
        assert q.add("a") is AddResult.QUEUED
        with contextlib.closing(redis.Redis(port=old.port)) as direct:
            assert direct.llen(f"kq:{{{name}}}:fifo") == 1  # on the master itself
            assert direct.wait(1, 5000) == 1  # the replica has it too (replication is asynchronous)
        with contextlib.closing(redis.Redis(port=new.port)) as replica:
            replica.script_flush()  # the promoted server will not know the scripts: the handle must load them there
        old.kill()
        setup.wait_for_failover(old, new)
        assert _retrying(lambda: q.add("b")) is AddResult.QUEUED
        assert q.get(timeout=2) == "a"
        assert q.done("a") is False
        assert q.get(timeout=2) == "b"
        assert q.done("b") is False
        with contextlib.closing(redis.Redis(port=new.port)) as promoted:
            assert promoted.hlen(f"kq:{{{name}}}:state") == 0 and promoted.exists(f"kq:{{{name}}}:seq")
        assert setup.master_address()[1] == new.port
    finally:
        q.close()
        client.close()


def test_sentinel_master_for_asyncio(sentinels: Any) -> None:
    async def main() -> None:
        sentinel = redis.asyncio.sentinel.Sentinel(sentinels.sentinels, socket_timeout=1)
        client = sentinel.master_for(SERVICE, socket_timeout=1)
        q = keyqueue.redis.aio.Queue(_name(), client=client, lease=10)
        try:
            host, port = sentinels.master_address()
            assert await q.add("a") is AddResult.QUEUED
            assert await q.add("a") is AddResult.DEDUP
            assert await q.get(timeout=2) == "a"
            assert await q.done("a") is False
            with contextlib.closing(redis.Redis(host=host, port=port)) as direct:
                assert direct.exists(f"kq:{{{q.name}}}:seq") == 1  # the queue lives on the Sentinels' master
            await q.add("b")
            assert q._depth() == 1  # a metrics scrape's read, from a synchronous client to the same master
        finally:
            await q.aclose()
            await client.aclose()
    asyncio.run(main())


def test_sentinel_master_for_asyncio_follows_a_failover() -> None:
    with sentinel_setup() as setup:
        async def main() -> None:
            client = redis.asyncio.sentinel.Sentinel(setup.sentinels, socket_timeout=1).master_for(
                SERVICE, socket_timeout=1)
            q = keyqueue.redis.aio.Queue(_name(), client=client, lease=10)
            try:
                assert await q.add("a") is AddResult.QUEUED
                with contextlib.closing(redis.Redis(port=setup.primary.port)) as direct:
                    assert direct.wait(1, 5000) == 1
                with contextlib.closing(redis.Redis(port=setup.replica.port)) as replica:
                    replica.script_flush()
                setup.primary.kill()
                setup.wait_for_failover(setup.primary, setup.replica)
                added = None
                for _ in range(100):  # bounded: the first calls may still find the dead master's connection
                    try:
                        added = await q.add("b")
                        break
                    except RedisUnavailable:
                        await asyncio.sleep(0.1)
                assert added is AddResult.QUEUED
                assert await q.get(timeout=2) == "a"
                assert await q.get(timeout=2) == "b"
            finally:
                await q.aclose()
                await client.aclose()
        asyncio.run(main())


# -- Cluster -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterSetup]:
    with cluster_setup() as setup:
        yield setup


def _slot(name: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(f"kq:{{{name}}}:fifo".encode()))


def test_cluster_client_runs_every_operation(cluster: ClusterSetup) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=2)
    name = _name()
    q = keyqueue.redis.RateLimitingQueue(name, client=client, lease=10, stats=True)
    other = keyqueue.redis.Queue(name, client=client, lease=10)
    try:
        assert q.add_many(["a", "b", "a"]) == [AddResult.QUEUED, AddResult.QUEUED, AddResult.DEDUP]
        assert len(q) == 2
        assert q.get(timeout=2) == "a"
        assert q.add("a") is AddResult.MARKED
        assert q.done("a") is True
        assert q.add_after("c", 0.05) is AddResult.DELAYED
        assert q.add_rate_limited("d") in (AddResult.DELAYED, AddResult.QUEUED)
        assert q.num_requeues("d") == 1
        q.forget("d")
        assert q.num_requeues("d") == 0
        got = {q.get(timeout=2) for _ in range(4)}
        assert got == {"a", "b", "c", "d"}
        for key in got:
            q.done(key)
        # A blocked get (BLPOP on the queue's slot) is woken by another handle's add.
        box: list[str] = []
        waiter = threading.Thread(target=lambda: box.append(other.get(timeout=10)))
        waiter.start()
        eventually(lambda: other._state.getters == 1)
        q.add("e")
        waiter.join(10)
        assert box == ["e"]
        other.done("e")
        assert q.inspect()["dirty"] == 0
        owner = cluster.owner(_slot(name))
        with contextlib.closing(redis.Redis(port=owner.port)) as direct:
            # the queue's keys live on its slot's node
            assert direct.exists(*(f"kq:{{{name}}}:{role}" for role in ("seq", "counters", "bucket"))) == 3
    finally:
        q.delete()
        q.close()
        other.close()
        client.close()


def test_cluster_client_asyncio(cluster: ClusterSetup) -> None:
    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[1].port, socket_timeout=2)
        q = keyqueue.redis.aio.DelayingQueue(_name(), client=client, lease=10)
        try:
            assert await q.add_many(["a", "b"]) == [AddResult.QUEUED, AddResult.QUEUED]
            assert await q.get(timeout=2) == "a"
            assert await q.done("a") is False
            assert await q.add_after("c", 0.05) is AddResult.DELAYED
            assert await q.get(timeout=2) == "b"
            assert await q.get(timeout=2) == "c"  # waited in BLPOP until it fell due
            await q.done("b")
            await q.done("c")
            assert (await q.inspect())["dirty"] == 0
            await q.add("d")
            assert q._depth() == 1  # a metrics scrape's read, from a synchronous cluster client
            await q.delete()
        finally:
            await q.aclose()
            await client.aclose()
    asyncio.run(main())


def test_cluster_slot_migration_under_load(cluster: ClusterSetup) -> None:
    # A producer and two consumers on one queue while its slot moves to another node key by key: calls during the
    # move raise RedisUnavailable (TRYAGAIN/ASK: never a script against half-moved state) and are retried; no
    # acknowledged add is lost and no key is held by two consumers at once.
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=2)
    name = _name()
    handles = [keyqueue.redis.Queue(name, client=client, lease=30) for _ in range(3)]
    producer, consumers = handles[0], handles[1:]
    acked: set[str] = set()
    handed: set[str] = set()
    holding: set[str] = set()
    overlaps: list[str] = []
    codes: list[str | None] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        i = 0
        while not stop.is_set() or i < 10:
            key = f"k{i}"
            try:
                producer.add(key)
            except RedisUnavailable as exc:
                with lock:
                    codes.append(exc.code)
                    errors.append(str(exc))
                continue  # the same key again: an add is safe to repeat
            with lock:
                acked.add(key)
            i += 1

    def consume(q: Any) -> None:
        while True:
            try:
                key = q.get(timeout=0.2)
            except TimeoutError:
                if stop.is_set():
                    return
                continue
            except RedisUnavailable as exc:
                with lock:
                    codes.append(exc.code)
                    errors.append(str(exc))
                continue
            with lock:
                if key in holding:
                    overlaps.append(key)
                holding.add(key)
                handed.add(key)
            with lock:
                holding.discard(key)
            _retrying(lambda q=q, key=key: q.done(key))

    def guarded(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(produce,))]
    threads += [threading.Thread(target=guarded, args=(consume, q)) for q in consumers]
    for t in threads:
        t.start()
    try:
        eventually(lambda: len(handed) >= 20, timeout=20)
        slot = _slot(name)
        source = cluster.owner(slot)
        target = next(n for n in cluster.nodes if n is not source)
        migrate_slot(cluster, slot, target, pause=0.05)
        assert cluster.owner(slot) is target
        seen = len(handed)

        def progressed() -> None:  # the queue works on its new node; if not, say what the workers saw
            with lock:
                assert len(handed) >= seen + 20, (len(handed) - seen, failures, codes[-5:], errors[-3:],
                                                  cluster.views(slot))
            return True
        eventually(progressed, timeout=20)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    try:
        assert not failures, failures
        assert not overlaps
        assert acked <= handed | _waiting(handles[0]), sorted(acked - handed)[:10]
        assert all(code in ("TRYAGAIN", "ASK", "MOVED", "CLUSTERDOWN") for code in codes), codes
    finally:
        handles[0].delete()
        for q in handles:
            q.close()
        client.close()


def _waiting(q: Any) -> set[str]:
    return set(q._client.lrange(q._state.keys[0], 0, -1))  # type: ignore[no-any-return]


# -- errors ------------------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


def test_errors_name_the_operation_the_server_and_the_code(server: RedisServer) -> None:
    with contextlib.closing(redis.Redis(port=server.port)) as admin:
        admin.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@all", "-evalsha")
        q = keyqueue.redis.Queue(_name(), url=f"redis://ro:pw@127.0.0.1:{server.port}")
        with pytest.raises(RedisQueueError) as info:
            q.add("a")  # the handle's first call: its layout check is refused, and says so as "add"
        assert info.value.code == "NOPERM" and info.value.operation == "add"
        assert f"127.0.0.1:{server.port}" in str(info.value) and "NOPERM" in str(info.value)
        assert " add " in str(info.value) and "layout" not in str(info.value)
        assert not isinstance(info.value, RedisUnavailable)
        q.close()

        q = keyqueue.redis.Queue(_name(), url=server.url)
        q.add("a")
        admin.config_set("maxmemory", 1)
        try:
            with pytest.raises(RedisQueueError) as info:
                q.add("b")  # refused inside the script (6.2) or before it (7+): the code either way
            assert info.value.code == "OOM" and info.value.operation == "add", info.value
            assert str(info.value).startswith(f"Redis at 127.0.0.1:{server.port} answered add with error OOM")
        finally:
            admin.config_set("maxmemory", 0)
        q.delete()
        q.close()


def test_a_replica_answers_readonly_as_unavailable(server: RedisServer) -> None:
    with RedisServer(extra_args=("--replicaof", "127.0.0.1", str(server.port))) as replica:
        q = keyqueue.redis.Queue(_name(), url=replica.url)
        try:
            with pytest.raises(RedisUnavailable) as info:
                q.add("a")
            assert info.value.code == "READONLY" and info.value.operation == "add"
            assert f"127.0.0.1:{replica.port}" in str(info.value)
        finally:
            q.close()


def test_a_script_missing_on_the_server_is_loaded_on_that_connection(server: RedisServer) -> None:
    client = redis.Redis(port=server.port)
    q = keyqueue.redis.Queue(_name(), client=client)
    try:
        q.add("a")
        client.script_flush()
        assert q.add("b") is AddResult.QUEUED  # NOSCRIPT: loaded and sent once more
        assert q.get(timeout=1) == "a"
        assert q.done("a") is False
        stats = client.info("commandstats")  # "script" (6.2) or "script|load" (7+)
        assert sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_script")) >= 1
    finally:
        q.delete()
        q.close()
        client.close()


def test_connections_come_from_the_clients_pool(server: RedisServer) -> None:
    # The handle draws its connections from the client's own pool (so max_connections counts them) and gives them
    # back when closed.
    client = redis.Redis(port=server.port, max_connections=2)
    q = keyqueue.redis.Queue(_name(), client=client)
    try:
        q.add("a")
        assert len(client.connection_pool._in_use_connections) == 1
        q.close()
        assert len(client.connection_pool._in_use_connections) == 0
        assert len(client.connection_pool._available_connections) == 1
    finally:
        client.delete(*(f"kq:{{{q.name}}}:{r}" for r in ("fifo", "state", "notify")))
        client.close()


def test_a_client_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match=r"client must be a redis\.Redis"):
        keyqueue.redis.Queue("x", client=object())
