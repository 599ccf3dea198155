"""keyqueue.events against the test server through the official client: counts, series, the bounded buffer,
both Controllers, and ``kubectl describe`` showing what a recorder wrote."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import keyqueue
from keyqueue import FakeClock, aio
from keyqueue.apiserver import TestAPIServer
from keyqueue.events import EventBroadcaster, object_reference
from keyqueue.events.correlator import COMBINED_PREFIX

from .conftest import Kubectl, unique


@pytest.fixture
def api_client(server: TestAPIServer) -> Iterator[Any]:
    c = server.api_client()
    yield c
    c.close()


def _config_map(api: Any, ns: str) -> dict[str, Any]:
    created = api.create_namespaced_config_map(ns, {"metadata": {"name": unique("cm")}})
    return client.ApiClient().sanitize_for_serialization(created)  # type: ignore[no-any-return]


def _events_about(api: Any, ns: str, name: str) -> list[Any]:
    return list(api.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items)


def test_repeats_are_counted_on_one_event(api: Any, api_client: Any, ns: str) -> None:
    cm = _config_map(api, ns)
    with EventBroadcaster(api_client) as broadcaster:
        recorder = broadcaster.recorder_for("cm-controller")
        for _ in range(3):
            assert recorder.event(cm, "Normal", "Synced", "ConfigMap synced")
        recorder.eventf(cm, "Warning", "Failed", "sync failed: %s", "boom")
        assert broadcaster.flush(30)
        events = {e.reason: e for e in _events_about(api, ns, cm["metadata"]["name"])}
        assert set(events) == {"Synced", "Failed"}
        synced = events["Synced"]
        assert synced.count == 3 and synced.message == "ConfigMap synced" and synced.type == "Normal"
        assert synced.source.component == "cm-controller" and synced.reporting_component == "cm-controller"
        assert synced.involved_object.uid == cm["metadata"]["uid"] and synced.involved_object.kind == "ConfigMap"
        assert synced.first_timestamp <= synced.last_timestamp
        assert events["Failed"].message == "sync failed: boom" and events["Failed"].count == 1
        assert (broadcaster.recorded, broadcaster.written, broadcaster.dropped, broadcaster.failed) == (4, 4, 0, 0)


def test_similar_events_are_combined(api: Any, api_client: Any, ns: str) -> None:
    cm = _config_map(api, ns)
    with EventBroadcaster(api_client) as broadcaster:
        recorder = broadcaster.recorder_for("op")
        for i in range(12):
            recorder.event(cm, "Warning", "Failed", f"attempt {i} failed")
        assert broadcaster.flush(30)
    messages = sorted((e.message, e.count) for e in _events_about(api, ns, cm["metadata"]["name"]))
    assert len(messages) == 10  # nine single ones, then one combined event counting the rest
    assert (COMBINED_PREFIX + "attempt 11 failed", 3) in messages


def test_events_k8s_io_series_and_final_count_at_close(server: TestAPIServer, api: Any, api_client: Any,
                                                       ns: str) -> None:
    cm = _config_map(api, ns)
    events_api = client.EventsV1Api(api_client)
    broadcaster = EventBroadcaster(api_client, api="events.k8s.io/v1", clock=FakeClock())
    recorder = broadcaster.recorder_for("op", host="node-1")
    for _ in range(4):
        recorder.event(cm, "Warning", "Failed", "could not sync", action="Sync")
    assert broadcaster.flush(30)
    (event,) = events_api.list_namespaced_event(ns, field_selector=f"regarding.name={cm['metadata']['name']}").items
    assert event.series.count == 2  # written on the second occurrence; later ones wait for refresh/finish
    assert event.reporting_controller == "op" and event.reporting_instance == "op-node-1"
    assert event.action == "Sync" and event.note == "could not sync" and event.event_time is not None
    assert broadcaster.close(30)
    (event,) = events_api.list_namespaced_event(ns, field_selector=f"regarding.name={cm['metadata']['name']}").items
    assert event.series.count == 4


def test_full_buffer_drops_and_counts_and_close_gives_up(memory_server: TestAPIServer) -> None:
    from keyqueue._procs import free_port

    conf = memory_server.configuration()
    conf.host = f"http://127.0.0.1:{free_port()}"  # nothing listens: every write waits for a retry
    dead = client.ApiClient(conf)
    broadcaster = EventBroadcaster(dead, clock=FakeClock(), max_queued=2)
    recorder = broadcaster.recorder_for("op")
    obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "namespace": "default"}}
    accepted = [recorder.event(obj, "Normal", "R", f"m{i}") for i in range(6)]
    assert accepted.count(False) >= 3 and broadcaster.dropped == accepted.count(False)  # at most 1 sent + 2 queued
    assert broadcaster.close(10)  # the retry waiting on the fake clock is given up, the rest too
    assert broadcaster.failed == broadcaster.recorded == accepted.count(True) and broadcaster.written == 0
    assert not recorder.event(obj, "Normal", "R", "after close") and broadcaster.dropped == accepted.count(False) + 1
    dead.close()


def test_an_event_the_server_refuses_is_not_retried(api: Any, api_client: Any, ns: str) -> None:
    cm = _config_map(api, ns)
    with EventBroadcaster(api_client, api="events.k8s.io/v1", clock=FakeClock()) as broadcaster:
        broadcaster.recorder_for("op").event(cm, "Normal", "R" * 129, "reason too long for kube")  # 422
        assert broadcaster.flush(30)
        assert (broadcaster.written, broadcaster.failed) == (0, 1)  # no retry wait: flush returned at once


def test_bad_input_is_refused_at_the_recorder(api_client: Any) -> None:
    with EventBroadcaster(api_client) as broadcaster:
        recorder = broadcaster.recorder_for("op")
        obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "namespace": "default"}}
        with pytest.raises(ValueError, match="Normal"):
            recorder.event(obj, "Info", "R", "m")
        with pytest.raises(ValueError, match="apiVersion"):
            recorder.event({"kind": "ConfigMap", "metadata": {"name": "x"}}, "Normal", "R", "m")
        with pytest.raises(TypeError, match="message"):
            recorder.event(obj, "Normal", "R", 3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="component"):
            broadcaster.recorder_for("")
        assert broadcaster.recorded == 0
    with pytest.raises(ValueError, match="api"):
        EventBroadcaster(api_client, api="v2")  # type: ignore[arg-type]
    assert object_reference({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "n", "uid": "u"}}) == {
        "kind": "Namespace", "name": "n", "uid": "u", "apiVersion": "v1"}


def test_threaded_and_asyncio_controllers_record(api: Any, api_client: Any, ns: str) -> None:
    cm = _config_map(api, ns)
    with EventBroadcaster(api_client) as broadcaster:
        threaded_recorder = broadcaster.recorder_for("threaded-controller")
        done = threading.Event()

        def reconcile(key: str) -> None:
            threaded_recorder.event(cm, "Normal", "Reconciled", f"reconciled {key}")
            done.set()

        with keyqueue.Controller(reconcile, name="threaded-controller") as controller:
            controller.queue.add("k")
            assert done.wait(30)

        async_recorder = broadcaster.recorder_for("async-controller")

        async def main() -> None:
            finished = asyncio.Event()

            async def reconcile(key: str) -> None:
                async_recorder.event(cm, "Normal", "Reconciled", f"reconciled {key}")  # does not block the loop
                finished.set()

            async with aio.Controller(reconcile, name="async-controller") as controller:
                controller.queue.add("k")
                await asyncio.wait_for(finished.wait(), 30)

        asyncio.run(main())
        assert broadcaster.flush(30)
    sources = sorted(e.source.component for e in _events_about(api, ns, cm["metadata"]["name"]))
    assert sources == ["async-controller", "threaded-controller"]


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_describe_shows_recorded_events(kubectl: Kubectl, etcd_server: TestAPIServer) -> None:
    with etcd_server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        cm = _config_map(api, "default")
        name = cm["metadata"]["name"]
        with EventBroadcaster(api_client) as broadcaster:
            recorder = broadcaster.recorder_for("describe-controller")
            for _ in range(2):
                recorder.event(cm, "Warning", "SyncFailed", "upstream unreachable")
            assert broadcaster.flush(30)
        out = kubectl.run("describe", "configmap", name, "-n", "default").stdout
        events = out[out.index("Events:"):]
        assert "SyncFailed" in events and "upstream unreachable" in events and "describe-controller" in events
        assert "(x2 over" in events, events
        api.delete_namespaced_config_map(name, "default")
