"""Faults: a worker SIGKILLed while holding keys, Redis restarted (AOF), a worker cut off from Redis."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
import redis
import redis.exceptions

from keyqueue import AddResult
from keyqueue.redis import LeaseLost, Queue, RedisServer, RedisUnavailable
from tests.redis.proxy import CuttableProxy, redis_port

# A worker process: takes two keys under a 1 s lease, says which, then hangs until it is killed.
_WORKER = """
import sys, threading
from keyqueue.redis import Queue
q = Queue(sys.argv[1], url=sys.argv[2], lease=1.0)
held = [q.get(timeout=10), q.get(timeout=10)]
print(" ".join(held), flush=True)
threading.Event().wait()
"""


def test_keys_of_a_sigkilled_worker_come_back_after_the_lease(new_queue: Any, redis_url: str) -> None:
    q = new_queue()
    for k in ("a", "b", "c"):
        q.add(k)
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, q.name, redis_url], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        held = worker.stdout.readline().split()
        assert sorted(held) == ["a", "b"]
        q.add("a")  # re-added while the worker holds it: marked, not queued
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    # "c" is ready now; "a" and "b" come back once the dead worker's leases run out (the wait is bounded by the
    # lease deadline, no polling), each exactly once.
    got = [q.get(timeout=15) for _ in range(3)]
    assert sorted(got) == ["a", "b", "c"]
    assert q.inspect()["expired"] == 2
    for k in got:
        assert q.done(k) is False
    with pytest.raises(TimeoutError):
        q.get(timeout=0.05)  # nothing lost, nothing twice


def test_state_survives_a_redis_restart_with_aof_and_clients_reconnect() -> None:
    with RedisServer(appendonly=True, appendfsync="always") as server:
        q = Queue(f"aof-{uuid.uuid4().hex[:8]}", url=server.url)
        for k in ("a", "b", "c"):
            q.add(k)
        held = q.get(timeout=1)
        q.add(held)  # marked while processing
        server.kill()  # a crash: SIGKILL
        with pytest.raises(RedisUnavailable, match=str(server.port)):
            q.add("d")
        server.start()  # same port and directory: the AOF is replayed
        assert q.inspect() == {"dirty": 3, "queued": 2, "processing": 1, "delayed": 0, "expired": 0, "redelivered": 0}
        assert q.done(held) is True  # the lease survived too; the re-add is honoured
        assert [q.get(timeout=1) for _ in range(3)] == ["b", "c", "a"]
        q.close()


def test_a_cut_off_worker_loses_its_lease_and_done_raises_lease_lost(new_queue: Any, redis_url: str) -> None:
    with CuttableProxy(redis_port(redis_url)) as proxy:
        name = f"cut-{uuid.uuid4().hex[:8]}"
        cut_off = new_queue(name=name, url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=0.5", lease=1.0)
        other = new_queue(name=name, lease=1.0)
        cut_off.add("k")
        assert cut_off.get(timeout=1) == "k"
        token = cut_off.fencing_token("k")
        proxy.cut()  # its heartbeat can no longer renew the lease
        assert other.get(timeout=15) == "k"  # handed out again once the lease ran out
        assert other.fencing_token("k") > token
        proxy.restore()
        with pytest.raises(LeaseLost) as lost:
            cut_off.done("k")
        assert lost.value.key == "k" and lost.value.token == token
        assert other.inspect()["processing"] == 1  # the new holder's lease is untouched
        assert other.done("k") is False
        assert cut_off.inspect()["processing"] == 0


def test_control_a_worker_that_is_not_cut_off_keeps_its_lease(new_queue: Any) -> None:
    # Control for the test above: with the heartbeat reaching Redis, the key is not handed out again.
    holder = new_queue(name="kept", lease=1.0)
    other = new_queue(name="kept", lease=1.0)
    holder.add("k")
    assert holder.get(timeout=1) == "k"
    with pytest.raises(TimeoutError):
        other.get(timeout=2.5)  # 2.5 lease lengths: only the renewals keep the key from being handed out
    assert holder.done("k") is False


# -- a dead connection (black-holed: open, nothing answers): bounded by the timeout given, not the socket timeout --

_DEAD_BOUND = 2.0  # generous slack over get's documented GET_MARGIN (0.5 s): a loaded machine, not a tight timing


def test_get_on_a_dead_connection_raises_within_its_timeout(new_queue: Any, redis_url: str) -> None:
    with CuttableProxy(redis_port(redis_url)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3"
        q = new_queue(url=url)
        with pytest.raises(TimeoutError):
            q.get(timeout=0.05)  # the pool now has an open, answering connection
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}.*did not answer"):
            q.get(timeout=0.5)
        assert time.monotonic() - start < 0.5 + _DEAD_BOUND
        proxy.restore()  # the dropped connection is replaced; nothing was half-applied
        assert q.add("k") == AddResult.QUEUED
        assert q.get(timeout=1) == "k"
        assert q.done("k") is False


def test_control_a_plain_blpop_on_a_dead_connection_hangs_for_the_socket_timeout(redis_url: str) -> None:
    # Control for the test above: redis-py reads a blocking command's reply with the socket timeout (3 s), so the
    # same 0.5 s wait on the same dead connection takes past the bound the queue's get keeps.
    with CuttableProxy(redis_port(redis_url)) as proxy:
        client = redis.Redis.from_url(f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3")  # from_url: no retries
        assert client.ping()
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.blpop(["nothing"], timeout=0.5)
        assert time.monotonic() - start >= 0.5 + _DEAD_BOUND
        client.close()


def test_add_on_a_dead_connection_raises_after_one_socket_timeout(new_queue: Any, redis_url: str) -> None:
    with CuttableProxy(redis_port(redis_url)) as proxy:
        q = new_queue(url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=0.3")
        assert len(q) == 0
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}"):
            q.add("k")
        assert time.monotonic() - start < 0.3 + 1.5  # one socket timeout: the client built from a URL never retries
        proxy.restore()
        assert q.inspect()["dirty"] == 0  # the black hole ate the request: nothing was applied
        assert q.add("k") == AddResult.QUEUED


def test_control_redis_py_default_retries_multiply_the_socket_timeout(redis_url: str) -> None:
    # Control for the test above: a client built as redis.Redis(host=...) retries a timed-out call 10 times with
    # backoff, so one call on a dead connection takes at least 11 socket timeouts (3.3 s here).
    with CuttableProxy(redis_port(redis_url)) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.3)
        assert client.ping()
        proxy.cut()
        start = time.monotonic()
        with pytest.raises((redis.exceptions.TimeoutError, redis.exceptions.ConnectionError)):
            client.ping()
        assert time.monotonic() - start >= 0.3 + 1.5
        client.close()


def test_get_that_must_open_a_connection_during_a_cut_raises_within_its_timeout(new_queue: Any, redis_url: str) -> None:
    # A fresh handle has no connection yet: its get opens one, and the cut proxy accepts it and then swallows the
    # handshake. The connect is bounded by the get's deadline, not by the socket timeout (3 s).
    with CuttableProxy(redis_port(redis_url)) as proxy:
        q = new_queue(url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3")
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}"):
            q.get(timeout=0.5)
        assert time.monotonic() - start < 0.5 + _DEAD_BOUND
        proxy.restore()
        assert q.add("k") == AddResult.QUEUED
        assert q.get(timeout=1) == "k"
        assert q.done("k") is False


def test_control_opening_a_connection_during_a_cut_hangs_for_the_socket_timeout(redis_url: str) -> None:
    # Control for the test above: redis-py's own connect (TCP accepted, handshake swallowed) waits the socket timeout.
    with CuttableProxy(redis_port(redis_url)) as proxy:
        client = redis.Redis.from_url(f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3")
        proxy.cut()
        start = time.monotonic()
        with pytest.raises((redis.exceptions.TimeoutError, redis.exceptions.ConnectionError)):
            client.ping()
        assert time.monotonic() - start >= 0.5 + _DEAD_BOUND
        client.close()


_CALLS = {  # the calls bounded by the socket timeout, and what each changes (nothing, on a black hole)
    "add_many": lambda q: q.add_many(["a", "b"]),
    "len": lambda q: len(q),
    "inspect": lambda q: q.inspect(),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_calls_on_a_dead_connection_raise_after_one_socket_timeout(call: str, new_queue: Any, redis_url: str) -> None:
    with CuttableProxy(redis_port(redis_url)) as proxy:
        q = new_queue(url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=0.3")
        assert q.inspect()["dirty"] == 0 and q.add_many(["warm"]) == [AddResult.QUEUED]  # connections open
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{proxy.port}"):
            _CALLS[call](q)
        assert time.monotonic() - start < 0.3 + 1.2  # one socket timeout: the client built from a URL never retries
        proxy.restore()
        assert q.inspect()["dirty"] == 1  # nothing was applied
        assert _CALLS[call](q) is not None


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_control_a_retrying_client_multiplies_the_socket_timeout(call: str, new_queue: Any, redis_url: str) -> None:
    # Control for the test above: a client= whose retry policy resends on timeouts (6 retries here) takes past the
    # bound, as the docstrings say (socket timeout x (1 + retries)).
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    with CuttableProxy(redis_port(redis_url)) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 6))
        q = new_queue(client=client, url=None)
        assert q.inspect()["dirty"] == 0 and q.add_many(["warm"]) == [AddResult.QUEUED]
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable):
            _CALLS[call](q)
        assert time.monotonic() - start >= 0.3 + 1.2
        client.close()


def test_a_renewal_on_a_dead_connection_gives_up_at_the_beat_interval(new_queue: Any, redis_url: str) -> None:
    # The heartbeat renews every lease / 3 (0.3 s here) and waits for a renewal's reply that long, not the socket
    # timeout (3 s): a renewal stuck on a dead connection does not delay the next beat's attempt.
    with CuttableProxy(redis_port(redis_url)) as proxy:
        q = new_queue(url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3", lease=0.9)
        q.add("k")
        assert q.get(timeout=1) == "k"
        q._stop.set()  # this test drives the renewals itself
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable, match="did not answer renew"):
            q._renew()
        assert time.monotonic() - start < 0.3 + _DEAD_BOUND
        proxy.restore()
        q._renew()  # renewed on another connection (it raises if not)
        assert q.done("k") is False


def test_control_a_call_bounded_by_the_socket_timeout_waits_it_out(new_queue: Any, redis_url: str) -> None:
    # Control for the test above: on the same dead connection, len() (bounded by the socket timeout) takes 3 s.
    with CuttableProxy(redis_port(redis_url)) as proxy:
        q = new_queue(url=f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=3", lease=0.9)
        assert len(q) == 0
        proxy.cut()
        start = time.monotonic()
        with pytest.raises(RedisUnavailable):
            len(q)
        assert time.monotonic() - start >= 0.3 + _DEAD_BOUND
