"""The threading and the asyncio elector against the in-memory test API server (real clock, short durations)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer
from keyqueue.leaderelection import LeaderElector, find_overlaps
from keyqueue.leaderelection import aio as le_aio

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

LD, RD, RP = 2.0, 1.5, 0.5
WAIT = 10.0


@pytest.fixture(scope="module")
def apiserver() -> Iterator[TestAPIServer]:
    with TestAPIServer("memory") as s:
        yield s


@pytest.fixture
def api_client(apiserver: TestAPIServer) -> Iterator[Any]:
    c = apiserver.api_client()
    yield c
    c.close()


def _lease(api_client: Any, name: str) -> Any:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(name, "default")


def eventually(predicate: Any) -> None:
    """Poll ``predicate`` (a server read) every 10 ms until it holds; fail after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


class Log:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: list[tuple[str, str, float]] = []

    def callbacks(self, who: str) -> dict[str, Any]:
        return {
            "on_started_leading": lambda: self.add(who, "started"),
            "on_stopped_leading": lambda: self.add(who, "stopped"),
            "on_new_leader": lambda leader: self.add(who, f"new:{leader}"),
        }

    def add(self, who: str, what: str) -> None:
        with self.cond:
            self.events.append((who, what, time.monotonic()))
            self.cond.notify_all()

    def wait(self, who: str, what: str) -> float:
        with self.cond:
            assert self.cond.wait_for(lambda: any(e[:2] == (who, what) for e in self.events), WAIT), self.events
            return next(t for w, x, t in self.events if (w, x) == (who, what))


def test_threaded_acquire_renew_release_handover(api_client: Any) -> None:
    name, log = f"l-{uuid.uuid4().hex[:8]}", Log()
    kw: dict[str, Any] = {"name": name, "namespace": "default", "lease_duration": LD, "renew_deadline": RD,
                          "retry_period": RP}
    a = LeaderElector(api_client, identity="a", **kw, **log.callbacks("a"))
    b = LeaderElector(api_client, identity="b", **kw, **log.callbacks("b"))
    a.start()
    log.wait("a", "started")
    b.start()
    log.wait("b", "new:a")
    first = _lease(api_client, name)
    assert first.spec.holder_identity == "a" and first.spec.lease_duration_seconds == 2
    assert a.is_leader() and not b.is_leader() and b.leader() == "a"
    # a renews every retry period: the Lease gets a later resourceVersion and renewTime, same acquireTime
    eventually(lambda: _lease(api_client, name).metadata.resource_version != first.metadata.resource_version)
    renewed = _lease(api_client, name)
    assert renewed.spec.renew_time > first.spec.renew_time and renewed.spec.acquire_time == first.spec.acquire_time
    assert a.stop(WAIT)
    stopped = log.wait("a", "stopped")
    started = log.wait("b", "started")
    assert started - stopped <= RP + 0.25
    lease = _lease(api_client, name)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    assert b.stop(WAIT)
    assert _lease(api_client, name).spec.holder_identity == ""
    with pytest.raises(RuntimeError):
        a.run()  # a stopped elector does not run again


def test_asyncio_acquire_release_handover(api_client: Any) -> None:
    name, log = f"l-{uuid.uuid4().hex[:8]}", Log()
    kw: dict[str, Any] = {"name": name, "namespace": "default", "lease_duration": LD, "renew_deadline": RD,
                          "retry_period": RP}
    seen: list[str] = []
    started_b = asyncio.Event()

    async def on_started_b() -> None:  # a coroutine callback runs as its own task
        await asyncio.sleep(0)
        seen.append("b started")
        started_b.set()

    async def main() -> None:
        a = le_aio.LeaderElector(api_client, identity="a", **kw, **log.callbacks("a"))
        b = le_aio.LeaderElector(api_client, identity="b", **kw, on_started_leading=on_started_b,
                                 on_stopped_leading=lambda: log.add("b", "stopped"))
        a.start()
        while not a.is_leader():
            await asyncio.sleep(0.01)
        b.start()
        while b.leader() != "a":
            await asyncio.sleep(0.01)
        assert not b.is_leader()
        released = time.monotonic()
        assert await a.stop(WAIT)
        while not b.is_leader():
            await asyncio.sleep(0.01)
        assert time.monotonic() - released <= RP + 0.5
        # is_leader() turns True when the attempt succeeds; the callback task is started right after, on the loop.
        await asyncio.wait_for(started_b.wait(), WAIT)
        assert seen == ["b started"]
        assert await b.stop(WAIT)
        assert not b.is_leader()

    asyncio.run(main())
    assert [e[:2] for e in log.events] == [("a", "new:a"), ("a", "started"), ("a", "stopped"), ("b", "stopped")]
    assert _lease(api_client, name).spec.holder_identity == ""
    assert find_overlaps([]) == []


def test_a_hung_server_costs_one_request_timeout_not_several(apiserver: TestAPIServer) -> None:
    """urllib3 would retry an idempotent request that timed out; the elector's client must not (a leader's
    step-down would be late by the retries). Counted by connections, not timed."""
    import socket

    from kubernetes import client as k8s

    from keyqueue.leaderelection import LeaseAPIError, LeaseClient

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and never answer
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    conf = k8s.Configuration()
    conf.host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    api_client = k8s.ApiClient(conf)
    lease_client = LeaseClient(api_client, "l", "default")
    try:
        with pytest.raises(LeaseAPIError):
            lease_client.get(0.2)
        with pytest.raises(LeaseAPIError):
            lease_client.update({"metadata": {"name": "l"}}, 0.2)
        ours = len(accepted)
        # control: the same call on the caller's own ApiClient (urllib3's default retries) connects again
        with pytest.raises(Exception):  # noqa: B017 (urllib3's error after its retries)
            k8s.CoordinationV1Api(api_client).read_namespaced_lease("l", "default", _request_timeout=0.2)
    finally:
        stop.set()
        t.join(5)
        lease_client.close()
        api_client.close()
        for s in accepted:
            s.close()
        listener.close()
    assert ours == 2
    assert len(accepted) - ours > 1
