"""Server-side apply (``application/apply-patch+yaml``): create by apply, merge and prune, shared ownership,
conflicts (409 with kube's causes) and ``force``, ``/status`` and ``/scale``, dry run, bad input; the official
client's and lightkube's apply; managedFields after a sequence of Update and Apply writes, written out from
structured-merge-diff's rules (see docs/apiserver.md, "Server-side apply")."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.apply import ApplyRequest
from keyqueue.apiserver.objects import CONFIGMAPS

from .conftest import raw_request, unique

APPLY = "application/apply-patch+yaml"


def call(server: TestAPIServer, method: str, path: str, body: Any = None,
         content_type: str = APPLY) -> tuple[int, Any]:
    """One request with ``body`` sent as it is (a str) or as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": content_type}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    try:
        conn.request(method, path, data, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.fixture
def mns(memory_server: TestAPIServer) -> Iterator[str]:
    """A fresh namespace on the memory server (for the tests that need one backend only)."""
    name = unique("ns")
    assert raw_request(memory_server, "/api/v1/namespaces", "POST", {"metadata": {"name": name}})[0] == 201
    yield name
    raw_request(memory_server, f"/api/v1/namespaces/{name}", "DELETE")


def fields(obj: dict[str, Any]) -> dict[tuple[str, str, str], Any]:
    """The managedFields entries by (manager, operation, subresource) -> fieldsV1."""
    return {(e["manager"], e["operation"], e.get("subresource", "")): e["fieldsV1"]
            for e in obj["metadata"].get("managedFields") or ()}


def configmap(name: str, data: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        obj["data"] = data
    return obj


def deployment(name: str, replicas: int | None = 2, image: str = "nginx:1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "web", "image": image,
                                              "ports": [{"containerPort": 80}]}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}


def test_managed_fields_after_update_apply_apply_update(server: TestAPIServer, ns: str) -> None:
    """Create (Update) by creator, apply by alice (a shared field and a new one), apply by bob (other fields),
    Update by carol (changes a field two managers share, removes one): each manager's set as structured-merge-diff
    computes it, then alice's conflict with carol, alice's prune, bob's prune."""
    base = f"/api/v1/namespaces/{ns}/configmaps"
    code, _ = raw_request(server, base + "?fieldManager=creator", "POST",
                          {"metadata": {"name": "seq", "labels": {"x": "1"}}, "data": {"a": "1", "b": "2"}})
    assert code == 201
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=alice", configmap("seq", {"a": "1", "c": "3"}))
    assert code == 200, obj
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=bob",
                     configmap("seq", {"d": "4"}, labels={"y": "2"}))
    assert code == 200, obj
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=carol", {"data": {"a": "9", "b": None}},
                     "application/merge-patch+json")
    assert code == 200, obj
    assert obj["data"] == {"a": "9", "c": "3", "d": "4"}
    entries = obj["metadata"]["managedFields"]
    # Apply entries first, then Update entries, each by time then manager (kube's order)
    assert entries == sorted(entries, key=lambda e: (e["operation"], e["time"], e["manager"]))
    assert [e["operation"] for e in entries] == ["Apply", "Apply", "Update", "Update"]
    assert all(e["apiVersion"] == "v1" and e["fieldsType"] == "FieldsV1" and "subresource" not in e
               for e in entries)
    assert fields(obj) == {
        # alice shared data.a with creator (same value: no conflict); carol's Update took it from both
        ("alice", "Apply", ""): {"f:data": {"f:c": {}}},
        ("bob", "Apply", ""): {"f:data": {"f:d": {}}, "f:metadata": {"f:labels": {"f:y": {}}}},
        # the creator keeps the data map itself and its label; b was removed, a taken
        ("creator", "Update", ""): {"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}},
        ("carol", "Update", ""): {"f:data": {"f:a": {}}},
    }
    # alice applying her old value of data.a conflicts with carol, an updater
    code, status = call(server, "PATCH", base + "/seq?fieldManager=alice", configmap("seq", {"a": "1", "c": "3"}))
    assert code == 409, status
    assert status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "carol" using v1: .data.a'
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "carol" using v1', "field": ".data.a"}]
    # alice applying without data.c: she was its only owner, so it is pruned, and her entry (now empty) dropped
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=alice", configmap("seq"))
    assert code == 200, obj
    assert obj["data"] == {"a": "9", "d": "4"}
    assert ("alice", "Apply", "") not in fields(obj)
    # bob dropping his label: pruned; the creator's label stays
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=bob", configmap("seq", {"d": "4"}))
    assert code == 200, obj
    assert obj["metadata"]["labels"] == {"x": "1"}
    assert fields(obj)[("bob", "Apply", "")] == {"f:data": {"f:d": {}}}
    # a field another manager also owns is not pruned: it just leaves the applier
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=dave", configmap("seq", {"d": "4"}))
    assert code == 200 and fields(obj)[("dave", "Apply", "")] == {"f:data": {"f:d": {}}}
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=bob", configmap("seq", {}))
    assert code == 200 and obj["data"] == {"a": "9", "d": "4"}, obj
    assert fields(obj)[("bob", "Apply", "")] == {"f:data": {}}  # an empty map applied: the map itself is owned
    code, obj = call(server, "PATCH", base + "/seq?fieldManager=bob", configmap("seq"))
    assert code == 200 and ("bob", "Apply", "") not in fields(obj)
    assert obj["data"] == {"a": "9", "d": "4"}  # the map bob had owned is not empty: it stays


def test_service_ports_by_port_and_protocol_and_an_atomic_selector(memory_server: TestAPIServer, mns: str) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"selector": {"app": "a"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    code, obj = call(memory_server, "PATCH", f"/api/v1/namespaces/{mns}/services/s?fieldManager=m", svc)
    assert code == 201, obj
    assert obj["spec"]["clusterIP"]  # set by the server: nobody's
    assert fields(obj)[("m", "Apply", "")] == {"f:spec": {
        "f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}, "f:targetPort": {}}},
        "f:selector": {}}}


def test_prune_keeps_a_map_that_holds_what_others_own() -> None:
    """An applier that owned a map itself (it applied ``data: {}``) and no longer applies it: the map goes only
    if nothing in it is someone else's (structured-merge-diff removes the merged object's leaves and items, never
    a non-empty map)."""
    live = {**configmap("m", {"k": "v"}), "metadata": {"name": "m", "namespace": "n", "managedFields": [
        {"manager": "erin", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:data": {}}},
        {"manager": "frank", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:data": {"f:k": {}}}}]}}
    request = ApplyRequest(CONFIGMAPS, "m", configmap("m"), "erin")
    request.check()
    request.normalize(configmap("m"))
    assert request.merged(live)["data"] == {"k": "v"}
    alone = {**live, "metadata": {**live["metadata"], "managedFields": live["metadata"]["managedFields"][:1]}}
    alone["data"] = {}
    assert "data" not in request.merged(alone)  # an empty map only erin owned is pruned


def test_apply_creates_conflicts_and_force(server: TestAPIServer, ns: str) -> None:
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    code, obj = call(server, "PATCH", base + "/web?fieldManager=deployer", deployment("web"))
    assert code == 201, obj  # apply creates
    (entry,) = obj["metadata"]["managedFields"]
    assert entry["manager"] == "deployer" and entry["operation"] == "Apply" and entry["apiVersion"] == "apps/v1"
    assert entry["time"] == obj["metadata"]["creationTimestamp"]
    assert entry["fieldsV1"] == {"f:spec": {
        "f:replicas": {}, "f:selector": {},  # LabelSelector is an atomic struct
        "f:template": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {
            'k:{"name":"web"}': {".": {}, "f:image": {}, "f:name": {}, "f:ports": {
                # ports are keyed by containerPort and protocol; protocol takes its default
                'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}}}}}}}
    assert obj["spec"]["revisionHistoryLimit"] == 10  # defaulted, and owned by nobody
    # the same values from another manager: no conflict, both own them
    code, obj = call(server, "PATCH", base + "/web?fieldManager=other", deployment("web"))
    assert code == 200, obj
    # a different replicas and image: 409 naming both fields, nothing stored changed
    rv = obj["metadata"]["resourceVersion"]
    code, status = call(server, "PATCH", base + "/web?fieldManager=other", deployment("web", 5, "nginx:2"))
    assert code == 409, status
    assert status["message"] == ('Apply failed with 2 conflicts: conflicts with "deployer":\n'
                                 "- .spec.replicas\n"
                                 '- .spec.template.spec.containers[name="web"].image')
    assert [c["field"] for c in status["details"]["causes"]] == [
        ".spec.replicas", '.spec.template.spec.containers[name="web"].image']
    assert {c["reason"] for c in status["details"]["causes"]} == {"FieldManagerConflict"}
    code, same = raw_request(server, base + "/web")
    assert same["metadata"]["resourceVersion"] == rv and same["spec"]["replicas"] == 2
    # force takes the fields
    code, obj = call(server, "PATCH", base + "/web?fieldManager=other&force=true", deployment("web", 5, "nginx:2"))
    assert code == 200, obj
    assert obj["spec"]["replicas"] == 5
    assert obj["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    deployer = fields(obj)[("deployer", "Apply", "")]
    assert "f:replicas" not in deployer["f:spec"]
    assert "f:image" not in deployer["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"web"}']
    # an Update manager is named with its apiVersion
    code, obj = call(server, "PATCH", base + "/web?fieldManager=scaler", {"spec": {"replicas": 7}},
                     "application/merge-patch+json")
    assert code == 200
    code, status = call(server, "PATCH", base + "/web?fieldManager=other", deployment("web", 5, "nginx:2"))
    assert code == 409
    assert status["message"] == ('Apply failed with 1 conflict: conflict with "scaler" using apps/v1: '
                                 ".spec.replicas")
    # forced, the applier takes it from the updater, whose entry (left empty) goes
    code, obj = call(server, "PATCH", base + "/web?fieldManager=other&force=true", deployment("web", 5, "nginx:2"))
    assert code == 200 and obj["spec"]["replicas"] == 5
    assert ("scaler", "Update", "") not in fields(obj)
    assert fields(obj)[("other", "Apply", "")]["f:spec"]["f:replicas"] == {}


def test_list_items_merge_by_key_and_prune(memory_server: TestAPIServer, mns: str) -> None:
    """Containers are merged by name: a second manager's container is added beside the first one's; the first
    one dropping its container removes only that one."""
    base = f"/apis/apps/v1/namespaces/{mns}/deployments"
    assert call(memory_server, "PATCH", base + "/two?fieldManager=a", deployment("two"))[0] == 201
    sidecar = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "two"},
               "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}}}
    code, obj = call(memory_server, "PATCH", base + "/two?fieldManager=b", sidecar)
    assert code == 200, obj
    assert [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]] == ["web", "sidecar"]
    # a adds an env var and a second port to its container: merged into the item, b's container untouched
    mine = deployment("two")
    web = mine["spec"]["template"]["spec"]["containers"][0]
    web["env"] = [{"name": "MODE", "value": "x"}]
    web["ports"].append({"containerPort": 53, "protocol": "UDP"})
    code, obj = call(memory_server, "PATCH", base + "/two?fieldManager=a", mine)
    assert code == 200, obj
    containers = {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}
    assert [(p["containerPort"], p["protocol"]) for p in containers["web"]["ports"]] == [(80, "TCP"), (53, "UDP")]
    assert containers["sidecar"]["image"] == "busybox"
    # b drops its container: removed, a's stays
    code, obj = call(memory_server, "PATCH", base + "/two?fieldManager=b",
                     {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "two"}})
    assert code == 200, obj
    assert [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]] == ["web"]
    assert ("b", "Apply", "") not in fields(obj)


def test_apply_on_status_and_scale(memory_server: TestAPIServer, mns: str) -> None:
    base = f"/apis/apps/v1/namespaces/{mns}/deployments"
    assert call(memory_server, "PATCH", base + "/st?fieldManager=deployer", deployment("st"))[0] == 201
    status_config = {**deployment("st", 9), "status": {"observedGeneration": 1, "replicas": 2}}
    code, obj = call(memory_server, "PATCH", base + "/st/status?fieldManager=ctrl", status_config)
    assert code == 200, obj
    assert obj["status"]["replicas"] == 2 and obj["spec"]["replicas"] == 2  # /status takes status only
    assert fields(obj)[("ctrl", "Apply", "status")] == {"f:status": {"f:observedGeneration": {}, "f:replicas": {}}}
    # an apply through the main endpoint ignores status
    code, obj = call(memory_server, "PATCH", base + "/st?fieldManager=deployer",
                     {**deployment("st"), "status": {"replicas": 7}})
    assert code == 200 and obj["status"]["replicas"] == 2
    assert "f:status" not in fields(obj)[("deployer", "Apply", "")]
    # /scale: the Scale's replicas are applied to the workload's spec.replicas
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "st"}, "spec": {"replicas": 4}}
    code, status = call(memory_server, "PATCH", base + "/st/scale?fieldManager=hpa", scale)
    assert code == 409, status  # deployer owns spec.replicas
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "deployer": .spec.replicas'
    code, got = call(memory_server, "PATCH", base + "/st/scale?fieldManager=hpa&force=true", scale)
    assert code == 200 and got["kind"] == "Scale" and got["spec"]["replicas"] == 4, got
    code, obj = raw_request(memory_server, base + "/st")
    assert obj["spec"]["replicas"] == 4
    assert fields(obj)[("hpa", "Apply", "scale")] == {"f:spec": {"f:replicas": {}}}
    # apply through a subresource does not create
    code, status = call(memory_server, "PATCH", base + "/nope/status?fieldManager=ctrl",
                        {**deployment("nope"), "status": {"replicas": 1}})
    assert code == 404, status


def test_dry_run_stores_nothing(memory_server: TestAPIServer, mns: str) -> None:
    base = f"/api/v1/namespaces/{mns}/configmaps"
    code, obj = call(memory_server, "PATCH", base + "/dry?fieldManager=m&dryRun=All", configmap("dry", {"a": "1"}))
    assert code == 201 and obj["data"] == {"a": "1"}, obj
    assert raw_request(memory_server, base + "/dry")[0] == 404
    assert call(memory_server, "PATCH", base + "/dry?fieldManager=m", configmap("dry", {"a": "1"}))[0] == 201
    code, obj = call(memory_server, "PATCH", base + "/dry?fieldManager=m&dryRun=All", configmap("dry", {"a": "2"}))
    assert code == 200 and obj["data"] == {"a": "2"}
    assert raw_request(memory_server, base + "/dry")[1]["data"] == {"a": "1"}


@pytest.mark.parametrize(("query", "body", "code", "message"), [
    ("?fieldManager=m", "a: [", 400, "error decoding YAML: "),
    ("?fieldManager=m", "[1, 2]", 400, "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: "
                                       "cannot unmarshal array into Go value of type map[string]interface {}"),
    ("?fieldManager=m", "just a string", 400, "cannot unmarshal string into Go value"),
    ("?fieldManager=m", json.dumps(configmap("bad") | {"apiVersion": "v2"}), 400,
     "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1"),
    ("?fieldManager=m", json.dumps(configmap("bad") | {"kind": "Secret"}), 400,
     "failed to create typed patch object (v1, Kind=Secret): no corresponding type for v1, Kind=Secret"),
    ("?fieldManager=m", json.dumps(configmap("other")), 400,
     "the name of the object (other) does not match the name on the URL (bad)"),
    ("?fieldManager=m", json.dumps({**configmap("bad"), "metadata": {"name": "bad", "managedFields": []}}), 400,
     "metadata.managedFields must be nil"),
    ("?fieldManager=m", json.dumps({**configmap("bad"), "data": {"a": 1}}), 400, ""),
    ("", json.dumps(configmap("bad")), 422,
     'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'),
    ("?fieldManager=m&force=maybe", json.dumps(configmap("bad")), 400, 'parsing "maybe": invalid syntax'),
])
def test_bad_apply_input_is_4xx_and_changes_nothing(memory_server: TestAPIServer, mns: str, query: str, body: str,
                                                     code: int, message: str) -> None:
    base = f"/api/v1/namespaces/{mns}/configmaps"
    assert call(memory_server, "PATCH", base + "/bad?fieldManager=m", configmap("bad", {"a": "1"}))[0] == 201
    before = raw_request(memory_server, base + "/bad")[1]
    got, status = call(memory_server, "PATCH", base + "/bad" + query, body)
    assert got == code and status["kind"] == "Status" and message in status["message"], status
    assert raw_request(memory_server, base + "/bad")[1] == before


def test_bad_list_items_and_force_on_other_patches(memory_server: TestAPIServer, mns: str) -> None:
    base = f"/apis/apps/v1/namespaces/{mns}/deployments"
    twice = deployment("dup")
    containers = twice["spec"]["template"]["spec"]["containers"]
    containers.append(dict(containers[0]))
    code, status = call(memory_server, "PATCH", base + "/dup?fieldManager=m", twice)
    assert code == 400 and 'duplicate entries for key {"name":"web"}' in status["message"], status
    nameless = deployment("dup")
    del nameless["spec"]["template"]["spec"]["containers"][0]["name"]
    code, status = call(memory_server, "PATCH", base + "/dup?fieldManager=m", nameless)
    assert code == 400 and 'omits key field "name"' in status["message"], status
    assert raw_request(memory_server, base + "/dup")[0] == 404
    assert call(memory_server, "PATCH", base + "/dup?fieldManager=m", deployment("dup"))[0] == 201
    code, status = call(memory_server, "PATCH", base + "/dup?force=true", {"spec": {"replicas": 1}},
                        "application/merge-patch+json")
    assert code == 422 and status["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch')
    code, status = call(memory_server, "PATCH", base + "/dup?fieldManager=m", deployment("dup"), "text/plain")
    assert code == 415 and APPLY in status["message"]


def test_yaml_body_and_custom_resource_list_types(memory_server: TestAPIServer, mns: str) -> None:
    """A YAML body; a custom resource's ``x-kubernetes-list-type: map`` list keyed by its keys, a ``set`` list by
    value, an atomic list owned whole; a ``/status`` apply on a CR with the status subresource."""
    group = f"g{unique('ssa')[-8:]}.example.com"
    item = {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "servers": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": item},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "args": {"type": "array", "items": {"type": "string"}},
            "size": {"type": "integer", "default": 1}}},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gadgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": schema}}]}}
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    code, created = call(memory_server, "PATCH", f"{crd_path}/gadgets.{group}?fieldManager=installer", crd)
    assert code == 201, created
    try:
        base = f"/apis/{group}/v1/namespaces/{mns}/gadgets"
        body = f"""apiVersion: {group}/v1
kind: Gadget
metadata:
  name: g
spec:
  servers:
  - name: a
    port: 1
  tags: [x, y]
  args: ["--v"]
"""
        for _ in range(50):  # the CRD's resource is served once the registry saw it
            code, obj = call(memory_server, "PATCH", base + "/g?fieldManager=one", body)
            if code != 404:
                break
        assert code == 201, obj
        assert obj["spec"]["size"] == 1  # defaulted, not owned
        assert fields(obj)[("one", "Apply", "")] == {"f:spec": {
            "f:args": {}, "f:servers": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:tags": {'v:"x"': {}, 'v:"y"': {}}}}
        two = {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g"},
               "spec": {"servers": [{"name": "b", "port": 2}], "tags": ["z"]}}
        code, obj = call(memory_server, "PATCH", base + "/g?fieldManager=two", two)
        assert code == 200, obj
        assert obj["spec"]["servers"] == [{"name": "a", "port": 1}, {"name": "b", "port": 2}]
        assert obj["spec"]["tags"] == ["x", "y", "z"]
        code, obj = call(memory_server, "PATCH", base + "/g/status?fieldManager=ctrl",
                         {**two, "status": {"ready": True}})
        assert code == 200 and obj["status"] == {"ready": True}, obj
        assert fields(obj)[("ctrl", "Apply", "status")] == {"f:status": {"f:ready": {}}}
        # a stored list-type map whose item lacks its key (writes do not validate that): updates still work (the
        # list is then owned whole), an apply onto it is a 400
        keyless = {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "k"},
                   "spec": {"servers": [{"port": 3}]}}
        assert raw_request(memory_server, base + "?fieldManager=c", "POST", keyless)[0] == 201
        code, obj = call(memory_server, "PATCH", base + "/k?fieldManager=p",
                         {"spec": {"servers": [{"port": 4}]}}, "application/merge-patch+json")
        assert code == 200 and fields(obj)[("p", "Update", "")] == {"f:spec": {"f:servers": {}}}, obj
        code, status = call(memory_server, "PATCH", base + "/k?fieldManager=one",
                            {**two, "metadata": {"name": "k"}})
        assert code == 400 and 'omits key field "name"' in status["message"], status
    finally:
        raw_request(memory_server, f"{crd_path}/gadgets.{group}", "DELETE")


def test_official_client_apply(server: TestAPIServer, ns: str) -> None:
    with server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        body = configmap("client", {"k": "v"})
        created = api.patch_namespaced_config_map("client", ns, body, field_manager="py",
                                                  _content_type=APPLY)
        assert created.data == {"k": "v"}
        assert [(e.manager, e.operation) for e in created.metadata.managed_fields] == [("py", "Apply")]
        updated = api.patch_namespaced_config_map("client", ns, configmap("client", {"k": "w"}), field_manager="py",
                                                  _content_type=APPLY)
        assert updated.data == {"k": "w"}
        with pytest.raises(client.ApiException) as info:
            api.patch_namespaced_config_map("client", ns, configmap("client", {"k": "x"}), field_manager="other",
                                            _content_type=APPLY)
        assert info.value.status == 409
        assert json.loads(info.value.body)["message"] == (
            'Apply failed with 1 conflict: conflict with "py": .data.k')
        forced = api.patch_namespaced_config_map("client", ns, configmap("client", {"k": "x"}),
                                                 field_manager="other", force=True, _content_type=APPLY)
        assert forced.data == {"k": "x"}


def test_lightkube_apply(memory_server: TestAPIServer, mns: str, tmp_path: Any) -> None:
    lightkube = pytest.importorskip("lightkube")
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    config = KubeConfig.from_file(str(memory_server.write_kubeconfig(tmp_path / "kubeconfig")))
    kube = lightkube.Client(config=config, field_manager="lk")
    applied = kube.apply(ConfigMap(metadata=ObjectMeta(name="lk", namespace=mns), data={"a": "1"}))
    assert applied.data == {"a": "1"}
    assert applied.metadata is not None and applied.metadata.managedFields is not None
    assert [(e.manager, e.operation) for e in applied.metadata.managedFields] == [("lk", "Apply")]
    again = kube.apply(ConfigMap(metadata=ObjectMeta(name="lk", namespace=mns), data={"b": "2"}))
    assert again.data == {"b": "2"}  # a was applied by lk before and is no longer: pruned
    with pytest.raises(lightkube.ApiError) as info:
        kube.apply(ConfigMap(metadata=ObjectMeta(name="lk", namespace=mns), data={"b": "3"}), field_manager="rival")
    assert info.value.status.code == 409
    forced = kube.apply(ConfigMap(metadata=ObjectMeta(name="lk", namespace=mns), data={"b": "3"}),
                        field_manager="rival", force=True)
    assert forced.data == {"b": "3"}
