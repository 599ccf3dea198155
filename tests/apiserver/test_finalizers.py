"""Finalizers and graceful deletion, on every stored type through the same registry path; delete preconditions
and propagationPolicy; namespace deletion waiting for its objects' finalizers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl, WatchCollector, raw_request, unique

FINALIZER = "example.com/cleanup"

# (collection path under a namespace, a minimal body): three types, one code path
_TYPES = {
    "configmaps": ("/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                          "data": {"a": "1"}}),
    "leases": ("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
               {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"holderIdentity": "x"}}),
    "events": ("/apis/events.k8s.io/v1/namespaces/{ns}/events",
               {"apiVersion": "events.k8s.io/v1", "kind": "Event", "reason": "R", "note": "n", "type": "Normal",
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "op", "reportingInstance": "op-1",
                "action": "Sync", "regarding": {"kind": "ConfigMap", "name": "x"}}),
}


def _create(server: TestAPIServer, kind: str, ns: str, name: str, finalizers: list[str]) -> tuple[str, Any]:
    base, body = _TYPES[kind]
    base = base.format(ns=ns)
    if "regarding" in body:  # an Event about an object of its own namespace
        body = {**body, "regarding": {**body["regarding"], "namespace": ns}}
    code, obj = raw_request(server, base, "POST", {**body, "metadata": {"name": name, "finalizers": finalizers}})
    assert code == 201, obj
    return f"{base}/{name}", obj


@pytest.mark.parametrize("kind", sorted(_TYPES))
def test_delete_waits_for_finalizers(server: TestAPIServer, ns: str, kind: str) -> None:
    path, created = _create(server, kind, ns, "f1", [FINALIZER, "example.com/other"])
    code, marked = raw_request(server, path, "DELETE", {"propagationPolicy": "Background"})
    assert code == 200, marked
    meta = marked["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    assert int(meta["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    code, again = raw_request(server, path, "DELETE")  # deleting again changes nothing
    assert code == 200 and again["metadata"] == meta
    code, still = raw_request(server, path)
    assert code == 200 and still["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    # no new finalizers while being deleted; removing one keeps the object, removing the last deletes it
    new = {**still, "metadata": {**still["metadata"], "finalizers": [FINALIZER, "example.com/other", "late"]}}
    code, status = raw_request(server, path, "PUT", new)
    assert code == 422, status
    assert 'no new finalizers can be added if the object is being deleted, found new finalizers []string{"late"}' \
        in status["message"]
    one = {**still, "metadata": {**still["metadata"], "finalizers": [FINALIZER]}}
    code, kept = raw_request(server, path, "PUT", one)
    assert code == 200 and kept["metadata"]["finalizers"] == [FINALIZER]
    code, last = raw_request(server, path, "PUT", {**kept, "metadata": {**kept["metadata"], "finalizers": []}})
    assert code == 200, last
    code, status = raw_request(server, path)
    assert code == 404, status


def test_watch_sees_modified_then_deleted(api: Any, ns: str, collect: Callable[..., WatchCollector]) -> None:
    api.create_namespaced_config_map(ns, {"metadata": {"name": "w", "finalizers": [FINALIZER]}})
    watcher = collect(api.list_namespaced_config_map, ns, resource_version=api.read_namespaced_config_map(
        "w", ns).metadata.resource_version)
    api.delete_namespaced_config_map("w", ns)
    modified = watcher.next_of({"MODIFIED", "DELETED"})
    assert modified["type"] == "MODIFIED" and modified["object"].metadata.deletion_timestamp is not None
    assert modified["object"].metadata.deletion_grace_period_seconds == 0
    api.patch_namespaced_config_map("w", ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    deleted = watcher.next_of({"MODIFIED", "DELETED"})
    assert deleted["type"] == "DELETED" and deleted["object"].metadata.name == "w"
    with pytest.raises(client.ApiException) as info:
        api.read_namespaced_config_map("w", ns)
    assert info.value.status == 404


def test_object_without_finalizers_goes_at_once(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, {"metadata": {"name": "plain"}})
    status = api.delete_namespaced_config_map("plain", ns)
    assert (status["status"] if isinstance(status, dict) else status.status) == "Success"
    with pytest.raises(client.ApiException):
        api.read_namespaced_config_map("plain", ns)


def test_delete_preconditions(api: Any, ns: str) -> None:
    cm = api.create_namespaced_config_map(ns, {"metadata": {"name": "p"}})
    for pre, label in (({"uid": "wrong"}, "UID"), ({"resourceVersion": "1"}, "ResourceVersion")):
        with pytest.raises(client.ApiException) as info:
            api.delete_namespaced_config_map("p", ns, body={"preconditions": pre})
        assert info.value.status == 409 and f"Precondition failed: {label} in precondition" in info.value.body
    api.delete_namespaced_config_map("p", ns, body={"preconditions": {
        "uid": cm.metadata.uid, "resourceVersion": cm.metadata.resource_version}})
    with pytest.raises(client.ApiException):
        api.read_namespaced_config_map("p", ns)


def test_propagation_policy_is_checked(server: TestAPIServer, ns: str) -> None:
    path, _ = _create(server, "configmaps", ns, "pp", [])
    code, status = raw_request(server, path, "DELETE", {"propagationPolicy": "Sideways"})
    assert code == 422 and 'Unsupported value: "Sideways"' in status["message"], status
    code, marked = raw_request(server, path, "DELETE", {"propagationPolicy": "Foreground"})
    # kube's answer: the object, marked, with the garbage collector's finalizer (tests/apiserver/test_gc.py)
    assert code == 200 and marked["metadata"]["finalizers"] == ["foregroundDeletion"], marked
    assert marked["metadata"]["deletionTimestamp"]


def test_namespace_deletion_waits_for_finalizers(server: TestAPIServer, api: Any) -> None:
    name = unique("fns")
    api.create_namespace({"metadata": {"name": name}})
    held, _ = _create(server, "leases", name, "held", [FINALIZER])
    _create(server, "configmaps", name, "free", [])
    api.delete_namespace(name)
    status = api.read_namespace(name).status
    assert status.phase == "Terminating"
    conditions = {c.type: c.message for c in status.conditions}
    assert conditions == {
        "NamespaceContentRemaining": "Some resources are remaining: leases.coordination.k8s.io has 1 resource "
                                     "instances",
        "NamespaceFinalizersRemaining": f"Some content in the namespace has finalizers remaining: {FINALIZER} in "
                                        "1 resource instances",
    }
    code, lease = raw_request(server, held)
    assert code == 200 and lease["metadata"]["deletionTimestamp"]
    code, _ = raw_request(server, f"/api/v1/namespaces/{name}/configmaps/free")
    assert code == 404
    code, status = raw_request(server, f"/api/v1/namespaces/{name}/configmaps", "POST",
                               {"metadata": {"name": "late"}})
    assert code == 403 and status["reason"] == "Forbidden"
    code, _ = raw_request(server, held, "PUT", {**lease, "metadata": {**lease["metadata"], "finalizers": []}})
    assert code == 200
    with pytest.raises(client.ApiException) as info:
        api.read_namespace(name)
    assert info.value.status == 404


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_delete_and_finalizer_removal(kubectl: Kubectl) -> None:
    ns = unique("kfin")
    kubectl.run("create", "namespace", ns)
    try:
        manifest = ('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"guarded","finalizers":["'
                    + FINALIZER + '"]}}')
        kubectl.run("create", "-n", ns, "-f", "-", input=manifest)
        out = kubectl.run("delete", "configmap", "guarded", "-n", ns, "--wait=false").stdout
        assert out.startswith('configmap "guarded" deleted')
        when = kubectl.run("get", "cm", "guarded", "-n", ns, "-o", "jsonpath={.metadata.deletionTimestamp}").stdout
        assert when.endswith("Z")
        err = kubectl.fail("patch", "cm", "guarded", "-n", ns, "--type=json",
                           "-p", '[{"op":"add","path":"/metadata/finalizers/-","value":"late"}]')
        assert "no new finalizers can be added" in err
        kubectl.run("patch", "cm", "guarded", "-n", ns, "--type=json",
                    "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
        assert "NotFound" in kubectl.fail("get", "cm", "guarded", "-n", ns)
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)
