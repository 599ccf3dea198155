"""The asyncio informer (keyqueue.informer.aio) against the test API server, in-memory and etcd backends: the
threaded informer's guarantees (ordered events, 410 → relist with tombstones, a stream the server ends resumes
without relist, a server restart survived with backoff, bookmarks, resync), with no thread per watch.

The informers run on an event loop in a thread of its own; the tests wait with the threaded Recorder."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.objects import CONFIGMAPS
from keyqueue.apiserver.registry import WriteOptions
from keyqueue.informer import Backoff
from keyqueue.informer.aio import Informer, Transport
from tests.informer.conftest import WAIT, Recorder, create_cm, wait_until

pytest.importorskip("aiohttp")
T = TypeVar("T")


class Loop:
    """An event loop running in a thread; ``call(coro)`` runs a coroutine there and returns its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def make_informer(apiserver: TestAPIServer) -> Iterator[Callable[..., Informer]]:
    """``make_informer(namespace, **options)``: a started asyncio informer on the namespace's ConfigMaps (fast
    backoff), with a Recorder registered as ``informer.rec``; stopped after the test."""
    loop = Loop()
    api_client = apiserver.api_client()
    transport = Transport(api_client)
    made: list[Informer] = []

    def factory(namespace: str, **options: Any) -> Informer:
        options.setdefault("backoff", Backoff(initial=0.01, cap=0.1, jitter=0.5))
        informer = Informer(transport, f"/api/v1/namespaces/{namespace}/configmaps", **options)
        rec = Recorder()
        informer.rec = rec  # type: ignore[attr-defined]

        async def start() -> None:
            rec.register(informer)  # type: ignore[arg-type]
            informer.start()

        loop.call(start())
        made.append(informer)
        assert loop.call(informer.wait_for_cache_sync(WAIT))
        return informer

    yield factory
    for informer in made:
        loop.call(informer.stop())
    loop.call(transport.close())
    loop.close()
    api_client.close()


def test_events_arrive_in_order_and_bookmarks_advance(core: Any, ns: str, make_informer: Any) -> None:
    create_cm(core, ns, "a")
    informer = make_informer(ns)
    rec: Recorder = informer.rec
    assert [e[:2] for e in rec.events] == [("add", f"{ns}/a")]
    create_cm(core, ns, "b")
    core.patch_namespaced_config_map("a", ns, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("b", ns)
    rec.wait_for(lambda ev: len(ev) == 4)
    assert [e[:2] for e in rec.events[1:]] == [("add", f"{ns}/b"), ("update", f"{ns}/a"), ("delete", f"{ns}/b")]
    assert informer.store.list_keys() == [f"{ns}/a"]
    wait_until(lambda: informer.stats().bookmarks >= 1, what="a bookmark")  # the server sends one every 0.2 s


def test_410_after_compaction_relists_and_reports_tombstones(apiserver: TestAPIServer, core: Any, ns: str,
                                                           make_informer: Any) -> None:
    for name in ("keep", "gone"):
        create_cm(core, ns, name)
    informer = make_informer(ns)
    rec: Recorder = informer.rec
    apiserver.stop_server()
    try:
        reg = apiserver.registry
        reg.delete(CONFIGMAPS, ns, "gone", None, WriteOptions())
        reg.create(CONFIGMAPS, ns, {"metadata": {"name": "new"}}, WriteOptions())
        apiserver.compact()
    finally:
        apiserver.start_server()
    rec.wait_for(lambda ev: any(e[0] == "tombstone" for e in ev) and any(e[1].endswith("/new") for e in ev))
    assert [t[1] for t in rec.of("tombstone")] == [f"{ns}/gone"]
    stats = informer.stats()
    assert stats.gone >= 1 and stats.relists >= 1 and stats.tombstones == 1
    assert informer.store.list_keys() == [f"{ns}/keep", f"{ns}/new"]


def test_a_server_restart_is_survived_without_relist(apiserver: TestAPIServer, core: Any, ns: str,
                                                     make_informer: Any) -> None:
    informer = make_informer(ns)
    rec: Recorder = informer.rec
    apiserver.stop_server()
    try:
        apiserver.registry.create(CONFIGMAPS, ns, {"metadata": {"name": "while-down"}}, WriteOptions())
        wait_until(lambda: informer.stats().watch_errors >= 2, what="re-watches refused while down")
    finally:
        apiserver.start_server()
    create_cm(core, ns, "after")
    rec.wait_for(lambda ev: len(ev) == 2)
    assert [e[:2] for e in rec.events] == [("add", f"{ns}/while-down"), ("add", f"{ns}/after")]
    assert informer.stats().lists == 1  # resumed from its resourceVersion


def test_a_stream_ended_by_the_server_resumes_without_relist(core: Any, ns: str, make_informer: Any) -> None:
    informer = make_informer(ns, watch_timeout=1)
    wait_until(lambda: informer.stats().watch_ends >= 1, what="the server ending the watch")
    create_cm(core, ns, "after-end")
    informer.rec.wait_for(lambda ev: any(e[1].endswith("/after-end") for e in ev))
    stats = informer.stats()
    assert stats.lists == 1 and stats.watches >= 2 and stats.watch_errors == 0


def test_resync_redelivers_from_the_store(core: Any, ns: str, make_informer: Any) -> None:
    create_cm(core, ns, "r")
    informer = make_informer(ns, resync_period=0.05)
    informer.rec.wait_for(lambda ev: len([e for e in ev if e[0] == "resync"]) >= 2)


def test_no_thread_per_watch(core: Any, ns: str, make_informer: Any) -> None:
    make_informer(ns)
    before = set(threading.enumerate())
    informers = [make_informer(ns) for _ in range(8)]
    create_cm(core, ns, "seen-by-all")
    for informer in informers:
        informer.rec.wait_for(lambda ev: any(e[1].endswith("/seen-by-all") for e in ev))
    # A thread per watch would add 8; the API server of this process may start one of its own meanwhile.
    new = [t.name for t in set(threading.enumerate()) - before]
    assert len(new) < 2, new


