"""``coordination.k8s.io/v1`` Leases: the official client's ``CoordinationV1Api`` on both backends, and kubectl."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl, WatchCollector, unique
from .conftest import raw_request as _raw

ApiException = client.ApiException
MICRO = "2026-01-02T03:04:05.123456Z"


@pytest.fixture
def coord(server: TestAPIServer) -> Iterator[Any]:
    api_client = server.api_client()
    yield client.CoordinationV1Api(api_client)
    api_client.close()


def _lease(name: str, holder: str | None = "a", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                            "spec": {"leaseDurationSeconds": 15, **spec}}
    if holder is not None:
        body["spec"]["holderIdentity"] = holder
    return body


def _doc(server: TestAPIServer, path: str) -> Any:
    code, body = _raw(server, path)
    assert code == 200, body
    return body


def test_discovery_lists_the_group_and_its_resources(server: TestAPIServer) -> None:
    groups = _doc(server, "/apis")
    assert groups["kind"] == "APIGroupList"
    (coordination,) = [g for g in groups["groups"] if g["name"] == "coordination.k8s.io"]
    assert coordination["preferredVersion"] == {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}
    assert _doc(server, "/apis/coordination.k8s.io")["kind"] == "APIGroup"
    resources = _doc(server, "/apis/coordination.k8s.io/v1")
    assert resources["groupVersion"] == "coordination.k8s.io/v1"
    (lease,) = resources["resources"]
    assert (lease["name"], lease["kind"], lease["namespaced"]) == ("leases", "Lease", True)
    assert "leases" not in {r["name"] for r in _doc(server, "/api/v1")["resources"]}
    root = _doc(server, "/openapi/v3")["paths"]
    doc = _doc(server, root["apis/coordination.k8s.io/v1"]["serverRelativeURL"].split("?")[0])
    patch = doc["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "coordination.k8s.io", "version": "v1",
                                                         "kind": "Lease"}


def test_crud_and_resource_version_preconditions(server: TestAPIServer, coord: Any, ns: str) -> None:
    created = coord.create_namespaced_lease(ns, _lease("l1", acquireTime=MICRO, renewTime=MICRO, leaseTransitions=0))
    kv, _ = server.backend.get(f"/registry/leases/{ns}/l1")  # kube-apiserver's key layout
    assert kv is not None and str(kv.mod_revision) == created.metadata.resource_version
    assert json.loads(kv.value)["spec"]["holderIdentity"] == "a"
    assert created.api_version == "coordination.k8s.io/v1" and created.kind == "Lease"
    assert created.spec.holder_identity == "a" and created.spec.lease_transitions == 0
    assert created.spec.renew_time.microsecond == 123456
    got = coord.read_namespaced_lease("l1", ns)
    assert got.metadata.resource_version == created.metadata.resource_version
    # an update carrying the resourceVersion it read wins once; the second (stale) one is a 409
    body = _lease("l1", "b", leaseTransitions=1)
    body["metadata"]["resourceVersion"] = got.metadata.resource_version
    updated = coord.replace_namespaced_lease("l1", ns, body)
    assert updated.spec.holder_identity == "b"
    with pytest.raises(ApiException) as exc:
        coord.replace_namespaced_lease("l1", ns, body)
    assert exc.value.status == 409
    status = json.loads(exc.value.body)
    assert status["reason"] == "Conflict" and 'leases.coordination.k8s.io "l1"' in status["message"]
    assert coord.read_namespaced_lease("l1", ns).spec.holder_identity == "b"
    # a release keeps the empty holder (a pointer field in Go: not dropped by omitempty)
    patched = coord.patch_namespaced_lease("l1", ns, {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})
    assert patched.spec.holder_identity == "" and patched.spec.lease_duration_seconds == 1
    names = [item.metadata.name for item in coord.list_namespaced_lease(ns).items]
    assert names == ["l1"]
    coord.delete_namespaced_lease("l1", ns)
    with pytest.raises(ApiException) as exc:
        coord.read_namespaced_lease("l1", ns)
    assert exc.value.status == 404
    status = json.loads(exc.value.body)
    assert status["message"] == 'leases.coordination.k8s.io "l1" not found'
    assert status["details"] == {"name": "l1", "group": "coordination.k8s.io", "kind": "leases"}


@pytest.mark.parametrize(
    ("spec", "code", "needle"),
    [
        ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds"),
        ({"leaseTransitions": -1}, 422, "spec.leaseTransitions"),
        ({"renewTime": "yesterday"}, 400, "parsing time"),
        ({"leaseDurationSeconds": "15"}, 400, "cannot unmarshal string"),
        ({"strategy": "Newest"}, 422, "spec.strategy"),
    ],
)
def test_invalid_leases_are_rejected(server: TestAPIServer, ns: str, spec: dict[str, Any], code: int,
                                     needle: str) -> None:
    status, body = _raw(server, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", "POST", _lease("bad", **spec))
    assert status == code and needle in body["message"], body
    assert _raw(server, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/bad")[0] == 404


def test_wrong_api_version_and_core_path_are_rejected(server: TestAPIServer, coord: Any, ns: str) -> None:
    body = _lease("x")
    body["apiVersion"] = "v1"
    with pytest.raises(ApiException) as exc:
        coord.create_namespaced_lease(ns, body)
    assert exc.value.status == 400 and "coordination.k8s.io/v1" in exc.value.body
    assert _raw(server, f"/api/v1/namespaces/{ns}/leases")[0] == 404
    assert _raw(server, f"/apis/coordination.k8s.io/v2/namespaces/{ns}/leases")[0] == 404
    assert _raw(server, "/apis/nope.example.com")[0] == 404


def test_watch_and_namespace_delete(server: TestAPIServer, coord: Any,
                                    collect: Callable[..., WatchCollector]) -> None:
    api_client = server.api_client()
    core = client.CoreV1Api(api_client)
    ns = unique("ns")
    core.create_namespace({"metadata": {"name": ns}})
    try:
        rv = coord.list_namespaced_lease(ns).metadata.resource_version
        events = collect(coord.list_namespaced_lease, ns, resource_version=rv)
        coord.create_namespaced_lease(ns, _lease("w"))
        coord.patch_namespaced_lease("w", ns, {"spec": {"holderIdentity": "z"}})
        assert events.next_of({"ADDED"})["object"].spec.holder_identity == "a"
        assert events.next_of({"MODIFIED"})["object"].spec.holder_identity == "z"
        core.delete_namespace(ns)
        assert events.next_of({"DELETED"})["object"].metadata.name == "w"
    finally:
        api_client.close()


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_get_describe_apply(kubectl: Kubectl, tmp_path: Path) -> None:
    ns = unique("kns")
    kubectl.run("create", "namespace", ns)
    try:
        manifest = tmp_path / "lease.json"
        manifest.write_text(json.dumps(_lease("lk", "replica-1", renewTime=MICRO)))
        assert kubectl.run("apply", "-n", ns, "-f", str(manifest)).stdout.strip() == \
            "lease.coordination.k8s.io/lk created"
        table = kubectl.run("get", "leases", "-n", ns).stdout.splitlines()
        assert table[0].split() == ["NAME", "HOLDER", "AGE"]
        assert table[1].split()[:2] == ["lk", "replica-1"]
        described = kubectl.run("describe", "lease", "lk", "-n", ns).stdout
        assert "replica-1" in described and "Lease Duration Seconds:  15" in described
        obj = json.loads(kubectl.run("get", "lease", "lk", "-n", ns, "-o", "json").stdout)
        assert obj["spec"]["renewTime"] == MICRO
        assert "lease.coordination.k8s.io \"lk\" deleted" in kubectl.run("delete", "lease", "lk", "-n", ns).stdout
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)
