"""Fencing and acknowledged work across a failover: tokens never repeat when a replica that missed the last writes
is promoted, ``wait_replicas`` makes every acknowledged call survive a failover (and refuses to acknowledge what the
replicas did not confirm), and a Sentinel failover under load (the primary SIGKILLed, or SIGSTOPped and resumed
after the switch) loses no acknowledged add, hands no key to two holders at once and reuses no token."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.sentinel

import keyqueue.redis
import keyqueue.redis.aio
from keyqueue import AddResult
from keyqueue.redis import LeaseLost, RedisServer, RedisUnavailable
from keyqueue.testing import eventually
from tests.redis.proxy import CuttableProxy
from tests.redis.topology import SERVICE, sentinel_setup

pytestmark = pytest.mark.redis


def _name() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, in sync."""
    with RedisServer() as primary, RedisServer(extra_args=("--replicaof", "127.0.0.1", str(primary.port))) as replica:
        with contextlib.closing(redis.Redis(port=replica.port, decode_responses=True)) as c:
            eventually(lambda: c.info("replication").get("master_link_status") == "up", timeout=20)
        try:
            yield primary, replica
        finally:
            if replica.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.pid, signal.SIGCONT)


def test_tokens_do_not_repeat_on_a_server_that_missed_the_last_ones() -> None:
    # The promoted replica's state is the primary's as of some earlier moment: here the queue's keys copied from
    # A to B after the first get, then three more gets on A that B never sees. B's next tokens are larger still.
    with RedisServer() as a, RedisServer() as b:
        name = _name()
        qa = keyqueue.redis.Queue(name, url=a.url)
        qb = keyqueue.redis.Queue(name, url=b.url)
        try:
            qa.add_many([f"k{i}" for i in range(6)])
            first = qa.get(timeout=1)
            tokens = [qa.fencing_token(first)]
            with contextlib.closing(redis.Redis(port=a.port)) as ca, contextlib.closing(redis.Redis(port=b.port)) as cb:
                for key in ca.keys(f"kq:{{{name}}}:*"):
                    cb.restore(key, 0, ca.dump(key), replace=True)
            for _ in range(3):
                tokens.append(qa.fencing_token(qa.get(timeout=1)))
            assert tokens == sorted(set(tokens))
            on_b = qb.get(timeout=1)
            assert on_b == "k1"  # B hands out again what A handed out after the copy: a repeat of the key ...
            assert qb.fencing_token(on_b) > max(tokens)  # ... never of a token
        finally:
            qa.close()
            qb.close()


def _until_served(call: Any) -> Any:
    """``call()`` again while it raises RedisUnavailable (the first call after an endpoint moved finds its
    connection closed)."""
    def attempt() -> tuple[Any]:
        try:
            return (call(),)
        except RedisUnavailable as exc:
            raise AssertionError(exc) from exc
    return eventually(attempt, timeout=20)[0]


def test_without_wait_replicas_a_promoted_replica_loses_what_it_missed_and_fences_the_old_lease() -> None:
    # What the docs say a failover without wait_replicas loses, and that nothing worse happens. The endpoint (a
    # managed Redis's primary address) moves from A to B, whose state is A's as of before a get and an add that A
    # acknowledged: the add is lost, the key is handed out again under a larger token, and the old lease's done
    # raises LeaseLost instead of touching the new holder.
    with RedisServer() as a, RedisServer() as b, CuttableProxy(a.port) as endpoint:
        name = _name()
        url = f"redis://127.0.0.1:{endpoint.port}/0"
        old, new = keyqueue.redis.Queue(name, url=url, lease=60), keyqueue.redis.Queue(name, url=url, lease=60)
        try:
            old.add_many(["k0", "k1"])
            with contextlib.closing(redis.Redis(port=a.port)) as ca, contextlib.closing(redis.Redis(port=b.port)) as cb:
                for key in ca.keys(f"kq:{{{name}}}:*"):
                    cb.restore(key, 0, ca.dump(key), replace=True)  # the replica, as of now
            held = old.get(timeout=1)
            assert held == "k0"
            token = old.fencing_token(held)
            assert old.add("late") is AddResult.QUEUED  # acknowledged by A alone
            endpoint.retarget(b.port)  # the failover: B is the primary now
            with pytest.raises(LeaseLost):
                _until_served(lambda: old.done(held))
            again = _until_served(lambda: new.get(timeout=1))
            assert again == "k0" and new.fencing_token(again) > token
            assert new.done(again) is False
            assert new.get(timeout=1) == "k1"
            assert new.done("k1") is False
            with pytest.raises(TimeoutError):
                new.get(timeout=0.2)  # "late" was never on B: lost
            assert len(new) == 0
        finally:
            old.close()
            new.close()


def test_wait_replicas_acknowledges_only_what_a_replica_has(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair
    name = _name()
    # 2 s: time enough for a replica on a loaded machine to confirm; a stopped one makes a call raise after it.
    q = keyqueue.redis.Queue(name, url=primary.url, wait_replicas=(1, 2.0))
    direct = redis.Redis(port=replica.port, decode_responses=True)
    try:
        assert q.add("a") is AddResult.QUEUED
        assert direct.lrange(f"kq:{{{name}}}:fifo", 0, -1) == ["a"]  # on the replica when add returned
        assert q.add_many(["b", "c"]) == [AddResult.QUEUED, AddResult.QUEUED]
        assert direct.llen(f"kq:{{{name}}}:fifo") == 3
        key = q.get(timeout=1)
        assert direct.hget(f"kq:{{{name}}}:state", key) == f"@{q._state.held[key]}"
        assert q.done(key) is False
        assert not direct.hexists(f"kq:{{{name}}}:state", key)
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)  # the replica stops confirming
        try:
            with pytest.raises(RedisUnavailable) as info:
                q.add("d")
            assert info.value.code == "NOREPLICAS" and info.value.operation == "add"
            assert "0 of 1 replicas confirmed it within 2 s" in str(info.value)
            with pytest.raises(RedisUnavailable):
                q.add_many(["e"])
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        assert q.add("d") is AddResult.DEDUP  # it did run on the primary; now confirmed
    finally:
        q.delete()
        q.close()
        direct.close()


def test_a_repeated_add_is_acknowledged_only_once_a_replica_has_the_first(
        pair: tuple[RedisServer, RedisServer]) -> None:
    # The first add ran on the primary but no replica confirmed it; repeated through another handle (its own
    # connections, whose calls so far wrote nothing) it finds the key queued (DEDUP) and writes nothing itself.
    # WAIT waits only for its connection's own writes: without the handle's write before it, that second add was
    # confirmed at once by a replica that never got the first (Redis 7 and later; Redis 6.2 waited anyway).
    primary, replica = pair
    name = _name()
    first = keyqueue.redis.Queue(name, url=primary.url, wait_replicas=(1, 2.0))
    again = keyqueue.redis.Queue(name, url=primary.url, wait_replicas=(1, 0.3))
    try:
        assert first.add("warm-up") is AddResult.QUEUED
        assert again.add("warm-up") is AddResult.DEDUP
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with pytest.raises(RedisUnavailable):
                first.add("k")
            with pytest.raises(RedisUnavailable) as info:
                again.add("k")
            assert info.value.code == "NOREPLICAS"
            with pytest.raises(RedisUnavailable):
                again.add_many(["k"])
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        assert again.add("k") is AddResult.DEDUP  # now confirmed
    finally:
        first.delete()
        first.close()
        again.close()


def test_wait_replicas_asyncio(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair

    async def main() -> None:
        q = keyqueue.redis.aio.Queue(_name(), url=primary.url, wait_replicas=(1, 2.0))  # as above
        try:
            assert await q.add("a") is AddResult.QUEUED
            with contextlib.closing(redis.Redis(port=replica.port)) as direct:
                assert direct.llen(f"kq:{{{q.name}}}:fifo") == 1
            assert await q.get(timeout=1) == "a"
            assert replica.pid is not None
            os.kill(replica.pid, signal.SIGSTOP)
            try:
                with pytest.raises(RedisUnavailable) as info:
                    await q.done("a")
                assert info.value.code == "NOREPLICAS" and info.value.operation == "done"
            finally:
                os.kill(replica.pid, signal.SIGCONT)
            with pytest.raises(LeaseLost):
                await q.done("a")  # the first done did finish it (unconfirmed then): the key is not held any more
            await q.delete()
        finally:
            await q.aclose()
    asyncio.run(main())


def test_wait_replicas_is_checked() -> None:
    for bad, error in (((0, 1.0), ValueError), ((1, 0), ValueError), ((1, float("nan")), ValueError),
                       ([1, 1.0], TypeError), ((True, 1.0), ValueError)):
        with pytest.raises(error, match="wait_replicas"):
            keyqueue.redis.Queue("x", url="redis://127.0.0.1:1", wait_replicas=bad)


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_sentinel_failover_under_load_keeps_the_ledger(fault: str) -> None:
    with sentinel_setup() as setup:
        old, new = setup.primary, setup.replica
        sentinel = redis.sentinel.Sentinel(setup.sentinels, socket_timeout=1)
        name = _name()
        clients = [sentinel.master_for(SERVICE, socket_timeout=1) for _ in range(3)]
        # A get whose confirmation failed leaves its key under a lease nobody renews: handed out again when it runs
        # out, so the lease is short enough for the test to see every acknowledged key handed out.
        handles = [keyqueue.redis.Queue(name, client=c, lease=4, wait_replicas=(1, 0.5)) for c in clients]
        ledger = _Ledger()
        stop = threading.Event()
        stop_adding = threading.Event()
        threads = [threading.Thread(target=ledger.guard, args=(ledger.produce, handles[0], stop_adding),
                                    name="ledger-producer")]
        threads += [threading.Thread(target=ledger.guard, args=(ledger.consume, q, stop), name=f"ledger-consumer-{i}")
                    for i, q in enumerate(handles[1:])]
        for t in threads:
            t.start()
        try:
            eventually(lambda: len(ledger.handed) >= 20, timeout=30)
            assert old.pid is not None
            if fault == "SIGKILL":
                old.kill()
            else:
                os.kill(old.pid, signal.SIGSTOP)
            setup.wait_for_failover(old, new)
            # The old primary comes back: restarted after the crash, empty, as a replica of the new one that cannot
            # be promoted before its first sync (see rejoin_empty); or resumed still believing it is the master, until
            # the Sentinels turn it into a replica. Until it has synced nothing can be confirmed.
            if fault == "SIGKILL":
                setup.rejoin_empty(old, new)
            else:
                os.kill(old.pid, signal.SIGCONT)
            seen = len(ledger.handed)
            eventually(lambda: len(ledger.handed) >= seen + 20, timeout=60)
            stop_adding.set()
            eventually(lambda: ledger.all_handed(setup, name), timeout=30)  # every acknowledged add comes out
        finally:
            stop_adding.set()
            stop.set()
            for t in threads:
                t.join(60)
        try:
            assert not ledger.failures, ledger.failures
            assert not ledger.overlaps, ledger.overlaps
            tokens = ledger.tokens
            assert len(tokens) == len(set(tokens)), "a fencing token was handed out twice"
            assert ledger.acked <= ledger.handed, sorted(ledger.acked - ledger.handed)[:10]
        finally:
            for q in handles:
                q.close()
            for c in clients:
                c.close()


class _Ledger:
    """What the workers of the failover test saw: acknowledged adds, keys handed out, tokens, overlaps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.handed: set[str] = set()
        self.holding: set[str] = set()
        self.tokens: list[int] = []
        self.overlaps: list[str] = []
        self.failures: list[BaseException] = []

    def all_handed(self, setup: Any, name: str) -> bool:
        """Every acknowledged key was handed out; else AssertionError with where the first missing ones are."""
        with self.lock:
            missing = sorted(self.acked - self.handed)[:5]
        if not missing:
            return True
        host, port = setup.master_address()
        prefix = f"kq:{{{name}}}:"
        with contextlib.closing(redis.Redis(host=host, port=port, decode_responses=True, socket_timeout=2)) as c:
            where = {key: (c.hget(prefix + "state", key), c.zscore(prefix + "proc", key),
                           c.lpos(prefix + "fifo", key)) for key in missing}
            shape = (c.llen(prefix + "fifo"), c.zcard(prefix + "proc"), c.get(prefix + "due"), c.time(),
                     [t.is_alive() for t in threading.enumerate() if t.name.startswith("ledger-")])
        raise AssertionError(f"not handed out (state, proc score, fifo index) on the primary {host}:{port} (was "
                             f"{setup.primary.port}, then {setup.replica.port}): {where}; fifo, proc, due, time, "
                             f"workers alive: {shape}; failures: {self.failures!r}")

    def guard(self, fn: Any, q: Any, stop: threading.Event) -> None:
        try:
            fn(q, stop)
        except BaseException as exc:  # reported by the test
            self.failures.append(exc)

    def produce(self, q: Any, stop: threading.Event) -> None:
        i = 0
        while not stop.is_set():
            key = f"k{i}"
            try:
                q.add(key)
            except RedisUnavailable:
                continue  # not acknowledged: the same key again (an add is safe to repeat)
            with self.lock:
                self.acked.add(key)
            i += 1

    def consume(self, q: Any, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                key = q.get(timeout=0.2)
            except (TimeoutError, RedisUnavailable):
                continue
            with self.lock:
                if key in self.holding:
                    self.overlaps.append(key)
                self.holding.add(key)
                self.handed.add(key)
                self.tokens.append(q.fencing_token(key))
            with self.lock:
                self.holding.discard(key)
            while not stop.is_set():
                try:
                    q.done(key)
                    break
                except LeaseLost:
                    break  # finished by an earlier attempt whose reply was lost, or the lease ran out
                except RedisUnavailable:
                    continue
