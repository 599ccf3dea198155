"""The shells' lean client path (keyqueue.redis._wire): connections of the handle's own, checked before reuse."""

from __future__ import annotations

import asyncio
import os
import select
import uuid
from typing import Any

import pytest
import redis
import redis.exceptions

import keyqueue.redis.aio as rq
from keyqueue import AddResult
from keyqueue.redis._wire import Packer


def _kill(rclient: redis.Redis, sockets: list[Any]) -> int:
    # CLIENT KILL the server side of these client sockets: the server closes them, as a restart would.
    killed = 0
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        killed += int(rclient.client_kill_filter(addr=f"{host}:{port}"))
    return killed


def _sockets(q: Any) -> list[Any]:
    return [h.conn._sock for h in q._wire._idle if h.conn._sock is not None]


def test_a_connection_the_server_closed_is_reconnected_before_use(new_queue: Any, rclient: redis.Redis) -> None:
    # The queue's client (built from a URL) never retries: only the readiness check before reuse keeps the next call
    # from failing on the closed connection.
    q = new_queue()
    assert q.add("a") == AddResult.QUEUED
    assert _kill(rclient, _sockets(q)) == 1
    assert q.add("b") == AddResult.QUEUED
    assert q.get(timeout=1) == "a"
    assert q.done("a") is False


def test_control_a_held_connection_the_server_closed_fails_without_the_check(redis_url: str,
                                                                           rclient: redis.Redis) -> None:
    # Control for the test above: the same send + read on a held connection, without looking first, fails.
    client = redis.Redis.from_url(redis_url)
    conn = client.connection_pool.get_connection()
    conn.send_command("PING")
    assert conn.read_response() in (b"PONG", "PONG")
    assert _kill(rclient, [conn._sock]) == 1
    with pytest.raises(redis.exceptions.ConnectionError):
        conn.send_command("PING")
        conn.read_response()
    client.connection_pool.release(conn)
    client.close()


def test_a_forked_child_opens_connections_of_its_own(new_queue: Any) -> None:
    q = new_queue()
    assert q.add("parent") == AddResult.QUEUED  # a connection now sits on the handle's stack
    assert q._wire._idle
    pid = os.fork()
    if pid == 0:  # the child: the parent's connections are gone from the handle, a new one is opened
        ok = not q._wire._idle and not q._wire._all and q.add("child") == AddResult.QUEUED
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert q.add("parent-again") == AddResult.QUEUED  # the parent's connection was not disturbed
    assert q.inspect()["queued"] == 3


def test_an_asyncio_connection_the_server_closed_is_reconnected_before_use(redis_url: str,
                                                                          rclient: redis.Redis) -> None:
    async def main() -> None:
        async with rq.Queue(f"wire-{uuid.uuid4().hex[:8]}", url=redis_url) as q:
            assert await q.add("a") == AddResult.QUEUED
            conns = [c for c in q._wire._idle if c.is_connected]
            socks = [c._writer.get_extra_info("socket") for c in conns]
            assert _kill(rclient, socks) == 1
            # Wait until the loop has read the server's end of stream into the connection's reader: from then on
            # the connection is known to be closed before it is used (a parser raises on it, it is not a reply).
            readable, _, _ = select.select(socks, [], [], 30)
            assert readable, "the server did not close the connection"
            async with asyncio.timeout(30):
                while not all(c._reader.at_eof() for c in conns):
                    await asyncio.sleep(0)
            assert await q.add("b") == AddResult.QUEUED
            assert await q.len() == 2
            await q.delete()

    asyncio.run(main())


def test_packer_matches_redis_py_packing() -> None:
    import redis.connection

    ref = redis.connection.PythonRespSerializer(1 << 20, redis.connection.Encoder("utf-8", "strict", False).encode)
    keys = [f"kq:{{näme}}:{role}" for role in ("fifo", "state", "seq")]
    p = Packer(keys)
    sha = "a" * 40
    for args in ([], [""], ["", "k"], ["123", "x y", "ünï"]):
        assert p.evalsha(sha, args) == b"".join(ref.pack("EVALSHA", sha, 3, *keys, *args))
    assert p.command("BLPOP", "a", "b", 0.25) == b"".join(ref.pack("BLPOP", "a", "b", 0.25))
