"""The informer against the test API server, in-memory and etcd backends."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.objects import CONFIGMAPS
from keyqueue.apiserver.registry import WriteOptions
from keyqueue.informer import Backoff, DeletedFinalStateUnknown, Informer, meta_namespace_key
from tests.informer.conftest import WAIT, Recorder, create_cm, wait_until


def test_initial_list_fires_adds_then_synced(core: Any, ns: str, make_informer: Any) -> None:
    for name in ("a", "b", "c"):
        create_cm(core, ns, name)
    rec = Recorder()
    informer = make_informer(ns)
    rec.register(informer)
    assert not informer.has_synced()
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    # has_synced is set after the initial adds were dispatched: they are all there already
    assert sorted(e[1] for e in rec.of("add")) == [f"{ns}/a", f"{ns}/b", f"{ns}/c"]
    assert informer.store.list_keys() == [f"{ns}/a", f"{ns}/b", f"{ns}/c"]
    obj = informer.store.get_by_key(f"{ns}/b")
    assert obj is not None and obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"  # filled in from the list
    assert [meta_namespace_key(o) for o in informer.store.by_index("namespace", ns)] == informer.store.list_keys()
    stats = informer.stats()
    assert stats.lists == 1 and stats.relists == 0
    assert int(informer.last_sync_resource_version()) >= int(max(e[2] for e in rec.of("add")))


def test_updates_and_deletes_arrive_in_order(core: Any, ns: str, make_informer: Any) -> None:
    rec = Recorder()
    informer = make_informer(ns)
    rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("x", ns, {"data": {"v": "2"}})
    core.patch_namespaced_config_map("x", ns, {"data": {"v": "3"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "y"}})
    core.delete_namespaced_config_map("x", ns)
    rec.wait_for(lambda ev: any(e[0] == "delete" for e in ev) and any(e[1].endswith("/y") for e in ev))
    kinds = [(e[0], e[1].split("/")[1]) for e in rec.events]
    assert kinds == [("add", "x"), ("update", "x"), ("update", "x"), ("add", "y"), ("delete", "x")]
    rvs = [int(e[-1]) for e in rec.events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    # each update's old object is the previous state
    assert rec.events[1][2] == rec.events[0][2] and rec.events[2][2] == rec.events[1][3]
    assert informer.store.list_keys() == [f"{ns}/y"]
    assert informer.store.get_by_key(f"{ns}/x") is None
    assert informer.stats().events == 5


def test_410_after_compaction_relists_and_reports_tombstones(
    apiserver: TestAPIServer, core: Any, ns: str, make_informer: Any
) -> None:
    for name in ("keep", "gone", "changed"):
        create_cm(core, ns, name)
    rec = Recorder()
    informer = make_informer(ns)
    rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    apiserver.stop_server()  # the watch stream ends; re-watches are refused meanwhile
    try:
        reg = apiserver.registry  # writes that bypass HTTP, like another API server instance
        reg.delete(CONFIGMAPS, ns, "gone", None, WriteOptions())
        reg.patch(CONFIGMAPS, ns, "changed", "application/merge-patch+json", {"data": {"v": "9"}}, WriteOptions())
        reg.create(CONFIGMAPS, ns, {"metadata": {"name": "new"}}, WriteOptions())
        apiserver.compact()  # the informer's resourceVersion is now too old: 410 on re-watch
    finally:
        apiserver.start_server()
    rec.wait_for(lambda ev: any(e[0] == "tombstone" for e in ev) and any(e[1].endswith("/new") for e in ev))
    tombstones = rec.of("tombstone")
    assert [t[1] for t in tombstones] == [f"{ns}/gone"]
    stats = informer.stats()
    assert stats.gone >= 1 and stats.relists >= 1 and stats.tombstones == 1
    assert informer.store.list_keys() == [f"{ns}/changed", f"{ns}/keep", f"{ns}/new"]
    changed = informer.store.get_by_key(f"{ns}/changed")
    assert changed is not None and changed["data"] == {"v": "9"}
    # the relist reported the survivors as updates (client-go's Replace semantics), the newcomer as an add
    assert {e[1] for e in rec.of("update")} >= {f"{ns}/keep", f"{ns}/changed"}


def test_tombstone_carries_last_known_state(apiserver: TestAPIServer, core: Any, ns: str,
                                            make_informer: Any) -> None:
    create_cm(core, ns, "doomed", v="last")
    got: list[Any] = []
    done = threading.Event()

    def on_delete(obj: Any) -> None:
        got.append(obj)
        done.set()

    informer = make_informer(ns)
    informer.add_event_handler(on_delete=on_delete)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    apiserver.stop_server()
    try:
        apiserver.registry.delete(CONFIGMAPS, ns, "doomed", None, WriteOptions())
        # one more write, so that the compaction revision is past the deletion: the informer's resourceVersion + 1
        # (where its re-watch starts) is then compacted away, and the re-watch gets 410
        apiserver.registry.create(CONFIGMAPS, ns, {"metadata": {"name": "other"}}, WriteOptions())
        apiserver.compact()
    finally:
        apiserver.start_server()
    assert done.wait(WAIT)
    (tomb,) = got
    assert isinstance(tomb, DeletedFinalStateUnknown)
    assert tomb.key == f"{ns}/doomed" and meta_namespace_key(tomb) == tomb.key
    assert tomb.obj["data"] == {"v": "last"}


def test_stream_ended_by_server_is_resumed_without_relist(core: Any, ns: str, make_informer: Any) -> None:
    rec = Recorder()
    informer = make_informer(ns, watch_timeout=1)  # the server ends each watch after timeoutSeconds=1
    rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    wait_until(lambda: informer.stats().watch_ends >= 1, what="the server ending the watch")
    core.create_namespaced_config_map(ns, {"metadata": {"name": "after-end"}})
    rec.wait_for(lambda ev: any(e[1].endswith("/after-end") for e in ev))
    stats = informer.stats()
    assert stats.lists == 1, "a normally ended stream must be re-opened from the last resourceVersion, not relisted"
    assert stats.watches >= 2 and stats.watch_errors == 0 and stats.gone == 0


def test_server_restart_mid_watch_is_survived(apiserver: TestAPIServer, core: Any, ns: str,
                                             make_informer: Any) -> None:
    rec = Recorder()
    informer = make_informer(ns)
    rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    create_cm(core, ns, "before")
    rec.wait_for(lambda ev: len(ev) == 1)
    apiserver.stop_server()
    try:
        apiserver.registry.create(CONFIGMAPS, ns, {"metadata": {"name": "while-down"}}, WriteOptions())
    finally:
        apiserver.start_server()
    create_cm(core, ns, "after")
    rec.wait_for(lambda ev: len(ev) == 3)
    assert [e[1].split("/")[1] for e in rec.events] == ["before", "while-down", "after"]
    assert all(e[0] == "add" for e in rec.events)
    stats = informer.stats()
    assert stats.lists == 1, "no relist needed: the watch resumed from its resourceVersion"
    assert stats.watches >= 2


def test_resync_redelivers_from_the_store(core: Any, ns: str, make_informer: Any) -> None:
    create_cm(core, ns, "r1")
    create_cm(core, ns, "r2")
    rec = Recorder()
    informer = make_informer(ns, resync_period=0.02)
    rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    rec.wait_for(lambda ev: sum(1 for e in ev if e[0] == "resync") >= 4)
    resyncs = rec.of("resync")
    assert {e[1] for e in resyncs} == {f"{ns}/r1", f"{ns}/r2"}
    assert all(e[2] == e[3] for e in resyncs)  # on_update(obj, obj): the same object, same resourceVersion
    stats = informer.stats()
    assert stats.resyncs >= 2 and stats.lists == 1  # from the cache, not a relist


def test_stop_leaves_no_thread_behind(apiserver: TestAPIServer, ns: str, make_informer: Any) -> None:
    before = set(threading.enumerate())
    informer = make_informer(ns, resync_period=0.05)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    wait_until(lambda: informer.stats().watches >= 1, what="watch opened")
    assert informer.stop(timeout=WAIT)  # the watch is blocked in a read: stop shuts its socket
    assert informer.stopped
    leftover = [t for t in set(threading.enumerate()) - before if t.name.startswith("informer")]
    assert leftover == []
    assert informer.stop(timeout=1)  # idempotent
    with pytest.raises(RuntimeError, match="already started"):
        informer.start()


def test_stop_while_backing_off_against_a_stopped_server(apiserver: TestAPIServer, ns: str,
                                                        make_informer: Any) -> None:
    from keyqueue.informer import Backoff

    informer = make_informer(ns, backoff=Backoff(initial=5.0, cap=5.0, jitter=0))
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    # A stream that ends before delivering anything is re-opened only after a backoff (no spinning); wait for a
    # bookmark, so that the stream the server's stop ends has delivered a line and is re-opened at once (refused).
    wait_until(lambda: informer.stats().bookmarks >= 1, what="a bookmark on the open watch")
    apiserver.stop_server()
    try:
        wait_until(lambda: informer.stats().watch_errors >= 1, what="a refused re-watch")
        assert informer.stop(timeout=1.0), "stop must interrupt the 5 s backoff"
    finally:
        apiserver.start_server()


def test_several_handlers_all_receive_and_a_raising_one_is_contained(core: Any, ns: str,
                                                                    make_informer: Any) -> None:
    create_cm(core, ns, "pre")
    first, second, late = Recorder(), Recorder(), Recorder()
    informer = make_informer(ns)
    first.register(informer)

    def boom(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer.add_event_handler(on_add=boom)
    second.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    late.register(informer)  # registered after sync: gets adds for what is cached, at once
    assert [e[1] for e in late.events] == [f"{ns}/pre"]
    create_cm(core, ns, "post")
    for rec in (first, second, late):
        rec.wait_for(lambda ev: any(e[1].endswith("/post") for e in ev))
    assert [e[1] for e in first.events] == [e[1] for e in second.events] == [f"{ns}/pre", f"{ns}/post"]
    assert informer.stats().handler_errors == 2  # boom raised for both adds; the watch went on


def test_removed_handler_is_not_called(core: Any, ns: str, make_informer: Any) -> None:
    kept, removed = Recorder(), Recorder()
    informer = make_informer(ns)
    kept.register(informer)
    reg = informer.add_event_handler(on_add=removed.on_add)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    informer.remove_event_handler(reg)
    create_cm(core, ns, "z")
    kept.wait_for(lambda ev: len(ev) == 1)
    assert removed.events == []


def test_feeds_the_asyncio_queue_from_the_informer_thread(core: Any, ns: str, make_informer: Any) -> None:
    import keyqueue.aio

    queue: keyqueue.aio.Queue[str] = keyqueue.aio.Queue()
    informer = make_informer(ns)
    informer.add_event_handler(on_add=lambda obj: queue.add(meta_namespace_key(obj)),
                               on_update=lambda old, new: queue.add(meta_namespace_key(new)))

    async def consume() -> list[str]:
        got: list[str] = []
        while len(got) < 3:
            key = await queue.get(timeout=WAIT)
            got.append(key)
            queue.done(key)
        return got

    async def main() -> list[str]:
        task = asyncio.create_task(consume())
        informer.start()
        await asyncio.to_thread(informer.wait_for_cache_sync, WAIT)
        for name in ("q1", "q2", "q3"):
            await asyncio.to_thread(create_cm, core, ns, name)
        return await task

    got = asyncio.run(main())
    assert sorted(got) == [f"{ns}/q1", f"{ns}/q2", f"{ns}/q3"]
    queue.shut_down()


def test_for_config_maps_all_namespaces(apiserver: TestAPIServer, core: Any, ns: str) -> None:
    create_cm(core, ns, "everywhere")
    api_client = apiserver.api_client()
    informer = Informer.for_config_maps(api_client, None, label_selector="none-such=1")
    try:
        informer.start()
        assert informer.wait_for_cache_sync(WAIT)
        assert informer.store.list_keys() == []  # the selector was passed through
    finally:
        assert informer.stop(WAIT)
        api_client.close()
    api_client = apiserver.api_client()
    informer = Informer.for_config_maps(api_client, None)
    try:
        informer.start()
        assert informer.wait_for_cache_sync(WAIT)
        assert f"{ns}/everywhere" in informer.store.list_keys()
        assert informer.store.index_keys("namespace", ns) == [f"{ns}/everywhere"]
    finally:
        assert informer.stop(WAIT)
        api_client.close()


def test_informer_recovers_after_the_server_ends_its_watch_for_falling_behind() -> None:
    """A handler that blocks stops the informer reading its watch; the server ends that watch
    once its bounded buffer is full; the informer re-watches from its last resourceVersion and catches up."""
    with TestAPIServer("memory", watch_buffer=20) as s:
        reg = s.registry
        reg.create(CONFIGMAPS, "default", {"metadata": {"name": "big"}, "data": {"v": "start"}}, WriteOptions())
        release = threading.Event()
        blocked = threading.Event()

        def on_update(old: Any, new: Any) -> None:
            if not release.is_set():
                blocked.set()
                release.wait(WAIT * 4)

        api_client = s.api_client()
        informer = Informer.for_config_maps(api_client, "default", backoff=Backoff(initial=0.01, cap=0.1, jitter=0))
        informer.add_event_handler(on_update=on_update)
        informer.start()
        try:
            assert informer.wait_for_cache_sync(WAIT)
            wait_until(lambda: len(reg._watches) == 1, what="the informer's watch")
            pad = "x" * 4096
            reg.update(CONFIGMAPS, "default", "big", {"metadata": {"name": "big"}, "data": {"v": f"0{pad}"}},
                       WriteOptions())
            assert blocked.wait(WAIT)
            last = ""
            for i in range(1, 3000):
                last = f"{i}{pad}"
                reg.update(CONFIGMAPS, "default", "big", {"metadata": {"name": "big"}, "data": {"v": last}},
                           WriteOptions())
                if not reg._watches:
                    break
            wait_until(lambda: not reg._watches, what="the server ending the watch of the stuck informer")
            release.set()

            def caught_up() -> bool:
                obj = informer.store.get_by_key("default/big")
                return obj is not None and obj["data"]["v"] == last

            wait_until(caught_up, timeout=WAIT * 2, what="the informer catching up after its re-watch")
            stats = informer.stats()
            assert stats.watches >= 2 and stats.watch_errors + stats.watch_ends >= 1
        finally:
            release.set()
            assert informer.stop(WAIT)
            api_client.close()
