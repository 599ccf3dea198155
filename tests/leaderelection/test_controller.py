"""Controllers gated by leader election, against an in-process test API server (real clock, short durations).

Two replicas (a controller + an elector each) get the same keys, as two informers would feed them. Only the
leader reconciles; an API server outage longer than the renew deadline stops all reconciling until it is back.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue import Controller
from keyqueue.aio import Controller as AioController
from keyqueue.apiserver import TestAPIServer
from keyqueue.leaderelection import Interval, LeaderElector, find_overlaps
from keyqueue.leaderelection import aio as le_aio

prometheus_client = pytest.importorskip("prometheus_client")

LD, RD, RP = 2.0, 1.5, 0.5
WAIT = 10.0


@pytest.fixture(scope="module")
def apiserver() -> Iterator[TestAPIServer]:
    with TestAPIServer("memory") as s:  # private: the outage test stops its HTTP server
        yield s


class Reconciles:
    """Every reconcile as (replica, key, start, end) on time.monotonic(); waitable."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.done: list[tuple[str, str, float, float]] = []

    def func(self, who: str) -> Any:
        def reconcile(key: str) -> None:
            t0 = time.monotonic()
            time.sleep(0.005)  # the work (holds the key for a moment, so overlaps would be visible)
            with self.cond:
                self.done.append((who, key, t0, time.monotonic()))
                self.cond.notify_all()
        return reconcile

    def keys(self, who: str | None = None, after: float = 0.0) -> set[str]:
        with self.cond:
            return {k for w, k, s, _ in self.done if (who is None or w == who) and s > after}

    def wait_keys(self, keys: set[str], after: float = 0.0) -> str:
        """Wait until every key was reconciled (by anyone) after ``after``; returns the replica that did it."""
        with self.cond:
            assert self.cond.wait_for(lambda: keys <= self.keys(after=after), WAIT), (keys, self.done[-5:])
            return {w for w, k, s, _ in self.done if k in keys and s > after}.pop()

    def intervals(self) -> list[Interval]:
        with self.cond:
            return [Interval(w, s, e) for w, _, s, e in self.done]


def _replica(apiserver: TestAPIServer, lease: str, who: str, rec: Reconciles, registry: Any = None,
             stopped: threading.Event | None = None,
             started: threading.Event | None = None) -> tuple[Controller[str], Any]:
    api_client = apiserver.api_client()
    elector = LeaderElector(api_client, name=lease, namespace="default", identity=who, lease_duration=LD,
                            renew_deadline=RD, retry_period=RP,
                            on_started_leading=started.set if started is not None else None,
                            on_stopped_leading=stopped.set if stopped is not None else None)
    c: Controller[str] = Controller(rec.func(who), name=f"ctl-{who}", workers=2, leader_election=elector,
                                    registry=registry, stop_timeout=WAIT)
    return c, api_client


def test_only_the_leader_reconciles_and_a_release_hands_over_the_warm_backlog(apiserver: TestAPIServer) -> None:
    lease, rec = f"ctl-{uuid.uuid4().hex[:6]}", Reconciles()
    registry = prometheus_client.CollectorRegistry()
    a_leads = threading.Event()
    a, ca = _replica(apiserver, lease, "a", rec, registry, started=a_leads)
    b, cb = _replica(apiserver, lease, "b", rec)
    try:
        a.start()
        assert a_leads.wait(WAIT)
        b.start()
        first = {f"k{i}" for i in range(20)}
        for k in sorted(first):
            a.queue.add(k)
            b.queue.add(k)
        assert rec.wait_keys(first) == "a"
        assert rec.keys("b") == set()
        assert len(b.queue) == 20  # the standby's queue is warm: every key waits there
        assert registry.get_sample_value("leader_election_master_status", {"name": lease}) == 1
        released = time.monotonic()
        assert a.stop(WAIT)
        assert rec.wait_keys(first, after=released) == "b"  # b takes over at once (release) with its backlog
        assert not rec.keys("a", after=released)
        assert registry.get_sample_value("leader_election_master_status", {"name": lease}) == 0
    finally:
        a.stop(WAIT)
        b.stop(WAIT)
        ca.close()
        cb.close()
    assert find_overlaps(rec.intervals()) == []


def test_apiserver_outage_stops_all_reconciles_until_it_is_back(apiserver: TestAPIServer) -> None:
    lease, rec = f"ctl-{uuid.uuid4().hex[:6]}", Reconciles()
    stepped_down, a_leads = threading.Event(), threading.Event()
    a, ca = _replica(apiserver, lease, "a", rec, stopped=stepped_down, started=a_leads)
    b, cb = _replica(apiserver, lease, "b", rec)
    try:
        a.start()
        assert a_leads.wait(WAIT)
        b.start()
        for k in ("x1", "x2"):
            a.queue.add(k)
            b.queue.add(k)
        rec.wait_keys({"x1", "x2"})
        apiserver.stop_server()
        down_at = time.monotonic()
        try:
            assert stepped_down.wait(RD + 1.0)
            assert time.monotonic() - down_at <= RD + 0.5
            lost_at = time.monotonic()
            outage = {f"o{i}" for i in range(10)}
            for k in sorted(outage):
                a.queue.add(k)
                b.queue.add(k)
            with rec.cond:  # nobody reconciles for the rest of the outage (wakes at once if anyone does)
                leaked = rec.cond.wait_for(lambda: bool(rec.keys(after=lost_at)), RD)
            assert not leaked, rec.done[-5:]
        finally:
            apiserver.start_server()
        assert rec.wait_keys(outage) in ("a", "b")  # leadership resumes; the keys queued meanwhile are done
    finally:
        a.stop(WAIT)
        b.stop(WAIT)
        ca.close()
        cb.close()
    assert find_overlaps(rec.intervals()) == []


def test_asyncio_controller_reconciles_only_while_leading(apiserver: TestAPIServer) -> None:
    lease, seen = f"ctl-{uuid.uuid4().hex[:6]}", []
    api_client = apiserver.api_client()

    progress = asyncio.Event()

    async def reconcile(key: str) -> None:
        assert elector.is_leader()
        seen.append(key)
        progress.set()

    elector = le_aio.LeaderElector(api_client, name=lease, namespace="default", identity="aio",
                                   lease_duration=LD, renew_deadline=RD, retry_period=RP)

    async def main() -> None:
        c: AioController[str] = AioController(reconcile, leader_election=elector, stop_timeout=WAIT)
        c.queue.add("before")  # queued before the controller leads: waits for the term
        c.start()
        assert elector.started
        await asyncio.wait_for(progress.wait(), WAIT)
        progress.clear()
        c.queue.add("during")
        await asyncio.wait_for(progress.wait(), WAIT)
        assert await c.stop(WAIT)
        assert not elector.is_leader() and elector.leader() == ""  # released

    try:
        asyncio.run(main())
    finally:
        api_client.close()
    assert seen == ["before", "during"]


def test_leader_election_argument_types(apiserver: TestAPIServer) -> None:
    api_client = apiserver.api_client()
    try:
        threaded = LeaderElector(api_client, name="x", namespace="default", identity="i")
        asyncio_one = le_aio.LeaderElector(api_client, name="x", namespace="default", identity="i")
        with pytest.raises(TypeError, match="leader_election"):
            Controller(lambda k: None, leader_election=asyncio_one)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="leader_election"):
            AioController(lambda k: None, leader_election=threaded)  # type: ignore[arg-type]
    finally:
        api_client.close()


def test_asyncio_controller_pauses_through_an_outage(apiserver: TestAPIServer) -> None:
    lease, seen = f"ctl-{uuid.uuid4().hex[:6]}", []
    api_client = apiserver.api_client()

    async def main() -> None:
        progress, stopped = asyncio.Event(), asyncio.Event()

        async def reconcile(key: str) -> None:
            seen.append(key)
            progress.set()

        elector = le_aio.LeaderElector(api_client, name=lease, namespace="default", identity="aio",
                                       lease_duration=LD, renew_deadline=RD, retry_period=RP,
                                       on_stopped_leading=stopped.set)
        c: AioController[str] = AioController(reconcile, leader_election=elector, stop_timeout=WAIT)
        c.start()
        c.queue.add("k1")
        await asyncio.wait_for(progress.wait(), WAIT)
        await asyncio.to_thread(apiserver.stop_server)
        try:
            await asyncio.wait_for(stopped.wait(), RD + 1.0)
            progress.clear()
            c.queue.add("k2")
            with pytest.raises(TimeoutError):  # nobody reconciles while the Lease cannot be renewed
                await asyncio.wait_for(progress.wait(), RD)
            assert seen == ["k1"]
        finally:
            await asyncio.to_thread(apiserver.start_server)
        await asyncio.wait_for(progress.wait(), WAIT)  # leads again: the key queued meanwhile is reconciled
        assert await c.stop(WAIT)

    try:
        asyncio.run(main())
    finally:
        api_client.close()
    assert seen == ["k1", "k2"]
