"""Events: core ``v1`` and ``events.k8s.io/v1`` are two views of one storage (fields renamed), through the same
generic registry path as every other type."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl, WatchCollector, raw_request, unique


@pytest.fixture
def events_api(server: TestAPIServer) -> Iterator[Any]:
    api_client = server.api_client()
    yield client.EventsV1Api(api_client)
    api_client.close()


def _core_event(name: str, ns: str, target: str, **extra: Any) -> dict[str, Any]:
    """A core Event.  With ``eventTime`` set: the official client cannot read an events.k8s.io Event without one
    (its model requires it; against kube-apiserver too), which legacy core Events lack."""
    return {
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "metadata": {"name": name},
        "involvedObject": {"kind": "ConfigMap", "apiVersion": "v1", "name": target, "namespace": ns},
        "reason": "Synced", "message": "synced ok", "type": "Normal", "source": {"component": "op"},
        "reportingComponent": "op", "reportingInstance": "op-1", "action": "Sync",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z", "count": 2,
        **extra,
    }


def test_one_storage_two_versions(api: Any, events_api: Any, ns: str) -> None:
    api.create_namespaced_event(ns, _core_event("a.1", ns, "cm-a"))
    new = events_api.read_namespaced_event("a.1", ns)
    assert new.regarding.name == "cm-a" and new.note == "synced ok" and new.deprecated_count == 2
    assert new.deprecated_source.component == "op" and new.reason == "Synced"

    created = events_api.create_namespaced_event(ns, {
        "metadata": {"name": "b.1"}, "eventTime": "2026-01-01T00:00:00.000001Z", "reportingController": "op",
        "reportingInstance": "op-1", "action": "Reconcile", "reason": "Failed", "type": "Warning",
        "regarding": {"kind": "ConfigMap", "name": "cm-b", "namespace": ns}, "note": "it broke",
        "series": {"count": 4, "lastObservedTime": "2026-01-01T00:05:00.000000Z"},
    })
    old = api.read_namespaced_event("b.1", ns)
    assert old.involved_object.name == "cm-b" and old.message == "it broke" and old.reporting_component == "op"
    assert old.series.count == 4 and old.metadata.resource_version == created.metadata.resource_version

    both = {e.metadata.name for e in api.list_namespaced_event(ns).items}
    assert both == {e.metadata.name for e in events_api.list_namespaced_event(ns).items} == {"a.1", "b.1"}
    # each version's field selectors use its own field names
    assert [e.metadata.name for e in api.list_namespaced_event(
        ns, field_selector="involvedObject.name=cm-b,type=Warning").items] == ["b.1"]
    assert [e.metadata.name for e in events_api.list_namespaced_event(
        ns, field_selector="regarding.name=cm-a").items] == ["a.1"]
    assert [e.metadata.name for e in api.list_namespaced_event(ns, field_selector="source=op").items] == ["a.1"]
    with pytest.raises(client.ApiException) as info:
        events_api.list_namespaced_event(ns, field_selector="involvedObject.name=cm-a")
    assert info.value.status == 400

    api.patch_namespaced_event("a.1", ns, {"message": "patched"})  # core v1: legacy rules, message may change
    assert events_api.read_namespaced_event("a.1", ns).note == "patched"
    with pytest.raises(client.ApiException) as info:  # events.k8s.io/v1: an Event's description is immutable
        events_api.patch_namespaced_event("a.1", ns, {"note": "changed"})
    assert info.value.status == 422 and "field is immutable" in info.value.body
    # a no-op through the other version writes nothing
    rv = api.read_namespaced_event("a.1", ns).metadata.resource_version
    assert events_api.patch_namespaced_event("a.1", ns, {"note": "patched"}).metadata.resource_version == rv


def test_strict_decoding_follows_each_version(server: TestAPIServer, ns: str) -> None:
    path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events?fieldValidation=Strict"
    code, status = raw_request(server, path, "POST", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "s.1"}, "message": "core name"})
    assert code == 400 and 'unknown field "message"' in status["message"], status
    code, status = raw_request(server, f"/api/v1/namespaces/{ns}/events?fieldValidation=Strict", "POST",
                               {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "s.1"}, "note": "x"})
    assert code == 400 and 'unknown field "note"' in status["message"], status


def test_watch_sees_writes_of_the_other_version(api: Any, events_api: Any, ns: str,
                                                collect: Callable[..., WatchCollector]) -> None:
    watcher = collect(events_api.list_namespaced_event, ns)
    api.create_namespaced_event(ns, _core_event("w.1", ns, "cm-w"))
    event = watcher.next_of({"ADDED"})
    assert event["object"].regarding.name == "cm-w" and event["object"].note == "synced ok"
    api.delete_namespaced_event("w.1", ns)
    gone = watcher.next_of({"DELETED"})
    assert gone["object"].metadata.name == "w.1" and gone["object"].regarding.name == "cm-w"


def test_events_go_with_their_namespace(server: TestAPIServer, api: Any) -> None:
    name = unique("evns")
    api.create_namespace({"metadata": {"name": name}})
    api.create_namespaced_event(name, _core_event("x.1", name, "cm"))
    api.delete_namespace(name)
    kvs, _ = server.backend.range(f"/registry/events/{name}/", 0)
    assert kvs == []


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_describe_get_and_events(kubectl: Kubectl, etcd_server: TestAPIServer) -> None:
    ns = unique("kev")
    kubectl.run("create", "namespace", ns)
    try:
        kubectl.run("create", "configmap", "watched", "-n", ns, "--from-literal=a=1")
        uid = kubectl.run("get", "cm", "watched", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout
        with etcd_server.api_client() as api_client:
            event = _core_event("watched.1", ns, "watched", reason="Reconciled", message="all good")
            event["involvedObject"]["uid"] = uid
            client.CoreV1Api(api_client).create_namespaced_event(ns, event)
        described = kubectl.run("describe", "configmap", "watched", "-n", ns).stdout
        events_section = described.split("Events:", 1)[1].split()
        assert events_section[:5] == ["Type", "Reason", "Age", "From", "Message"]
        assert "Reconciled" in events_section and "op" in events_section and "good" in events_section
        table = kubectl.run("get", "events", "-n", ns).stdout.splitlines()
        assert table[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert table[1].split()[1:4] == ["Normal", "Reconciled", "configmap/watched"]
        listed = kubectl.run("events", "-n", ns, "--for", "configmap/watched").stdout.splitlines()
        assert listed[0].split()[:3] == ["LAST", "SEEN", "TYPE"]
        assert "Reconciled" in listed[1] and "ConfigMap/watched" in listed[1] and "(x2 over" in listed[1]
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


def test_times_are_written_back_in_kube_form(server: TestAPIServer, ns: str) -> None:
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "t.1"},
            "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": ns},
            "lastTimestamp": "2026-01-01T01:01:00.9+01:00", "eventTime": "2026-01-01T02:00:00.1234567+02:00",
            "reportingComponent": "op", "reportingInstance": "op-1", "action": "Sync", "reason": "Synced"}
    code, obj = raw_request(server, f"/api/v1/namespaces/{ns}/events", "POST", body)
    assert code == 201, obj
    assert obj["lastTimestamp"] == "2026-01-01T00:01:00Z"
    assert obj["eventTime"] == "2026-01-01T00:00:00.123456Z"
    code, status = raw_request(server, f"/api/v1/namespaces/{ns}/events", "POST",
                               {**body, "metadata": {"name": "t.2"}, "lastTimestamp": "yesterday"})
    assert code == 400 and 'parsing time "yesterday"' in status["message"]
