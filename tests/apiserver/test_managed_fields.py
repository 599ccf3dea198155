"""managedFields for create, update and patch: the manager from fieldManager or the User-Agent, kube's FieldsV1
format, fields moving to the manager that changed them; kubectl --show-managed-fields."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.managedfields import manager_from

from .conftest import Kubectl, raw_request, unique


def _entries(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"].get("managedFields") or ()}


def test_create_update_and_patch_record_their_managers(server: TestAPIServer, ns: str) -> None:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    code, created = raw_request(server, base + "?fieldManager=creator", "POST", {
        "metadata": {"name": "mf", "labels": {"app": "x"}, "finalizers": ["example.com/f"]},
        "data": {"a": "1", "b": "2"}})
    assert code == 201, created
    (entry,) = created["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "manager": "creator", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:a": {}, "f:b": {}},
                     "f:metadata": {"f:finalizers": {".": {}, 'v:"example.com/f"': {}},
                                    "f:labels": {".": {}, "f:app": {}}}}}
    assert entry["time"] == created["metadata"]["creationTimestamp"]
    # a patch by another manager takes the field it changes, and adds the ones it adds
    with server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        api.patch_namespaced_config_map("mf", ns, {"data": {"a": "changed", "c": "3"}}, field_manager="patcher")
        obj = api_client.sanitize_for_serialization(api.read_namespaced_config_map("mf", ns))
        entries = _entries(obj)
        assert entries["patcher"]["fieldsV1"] == {"f:data": {"f:a": {}, "f:c": {}}}
        assert entries["creator"]["fieldsV1"]["f:data"] == {".": {}, "f:b": {}}
        # a no-op write changes nothing, not even the times
        rv = obj["metadata"]["resourceVersion"]
        again = api.patch_namespaced_config_map("mf", ns, {"data": {"a": "changed"}}, field_manager="other")
        assert again.metadata.resource_version == rv
        # removed fields leave every manager; a manager left with nothing is dropped
        body = {**obj, "data": {"b": "2"}}
        replaced = api_client.sanitize_for_serialization(api.replace_namespaced_config_map("mf", ns, body))
        entries = _entries(replaced)
        assert set(entries) == {"creator"}, entries  # the replace only removed: its manager owns nothing
        assert entries["creator"]["fieldsV1"]["f:data"] == {".": {}, "f:b": {}}
        # without fieldManager the manager is the User-Agent's product name
        api.patch_namespaced_config_map("mf", ns, {"data": {"d": "4"}})
        obj = api_client.sanitize_for_serialization(api.read_namespaced_config_map("mf", ns))
        agent = api_client.user_agent.split("/")[0]
        assert _entries(obj)[agent]["fieldsV1"] == {"f:data": {"f:d": {}}}
        api.patch_namespaced_config_map("mf", ns, {"metadata": {"finalizers": None}})


def test_manager_from_user_agent_and_limits() -> None:
    assert manager_from("", "kubectl/v1.37.0 (linux/amd64) kubernetes/abc") == "kubectl"
    assert manager_from("mine", "kubectl/v1.37.0") == "mine"
    assert manager_from("", "OpenAPI-Generator/37.0.2/python") == "OpenAPI-Generator"


def test_bad_field_manager_is_422(server: TestAPIServer, ns: str) -> None:
    code, status = raw_request(server, f"/api/v1/namespaces/{ns}/configmaps?fieldManager={'m' * 129}", "POST",
                               {"metadata": {"name": "long"}})
    assert code == 422 and status["details"]["causes"][0]["field"] == "fieldManager", status


def test_owner_references_are_keyed_by_uid_and_atomic(server: TestAPIServer, ns: str) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1"}
    owner_path = f"/api/v1/namespaces/{ns}/configmaps"
    code, owner = raw_request(server, owner_path, "POST", {"metadata": {"name": "o"}})
    ref["uid"] = owner["metadata"]["uid"]
    code, obj = raw_request(server, owner_path + "?fieldManager=m", "POST",
                            {"metadata": {"name": "d", "ownerReferences": [ref]}})
    assert code == 201, obj
    refs = obj["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:ownerReferences"]
    # OwnerReference is a +structType=atomic struct: the item is owned whole
    assert refs == {".": {}, f'k:{{"uid":"{ref["uid"]}"}}': {}}


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_show_managed_fields(kubectl: Kubectl) -> None:
    name = unique("mf")
    kubectl.run("create", "configmap", name, "--from-literal=a=1", "-n", "default")
    kubectl.run("label", "configmap", name, "app=demo", "-n", "default")
    hidden = kubectl.run("get", "configmap", name, "-n", "default", "-o", "yaml").stdout
    assert "managedFields" not in hidden
    shown = kubectl.run("get", "configmap", name, "-n", "default", "-o", "yaml", "--show-managed-fields").stdout
    assert "manager: kubectl-create" in shown and "manager: kubectl-label" in shown, shown
    assert "fieldsType: FieldsV1" in shown and "f:app: {}" in shown and "operation: Update" in shown
    kubectl.run("delete", "configmap", name, "-n", "default")


def test_custom_resources_get_managed_fields_from_their_schema(server: TestAPIServer, ns: str) -> None:
    # A CR's fields are walked through its CRD's structural schema: objects field by field, maps by key,
    # everything else (lists, preserved unknown fields) owned whole.
    from .test_crd import crd_body, widget

    group = f"g{unique('mf')[-8:]}.example.com"
    with server.api_client() as api_client:
        ext = client.ApiextensionsV1Api(api_client)
        ext.create_custom_resource_definition(crd_body(group))
        try:
            co = client.CustomObjectsApi(api_client)
            body = widget("w", group, {"size": 3, "tags": ["a"], "labels": {"x": "1"}, "nested": {"mode": "m"}})
            created = co.create_namespaced_custom_object(group, "v1", ns, "widgets", body, field_manager="op")
            (entry,) = created["metadata"]["managedFields"]
            assert entry["manager"] == "op" and entry["apiVersion"] == f"{group}/v1"
            spec = entry["fieldsV1"]["f:spec"]
            assert spec["f:size"] == {} and spec["f:tags"] == {}
            assert spec["f:labels"] == {".": {}, "f:x": {}} and spec["f:nested"]["f:mode"] == {}
            co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "w", {"spec": {"size": 4}},
                                              field_manager="scaler")
            got = co.get_namespaced_custom_object(group, "v1", ns, "widgets", "w")
            entries = _entries(got)
            assert entries["scaler"]["fieldsV1"] == {"f:spec": {"f:size": {}}}
            assert "f:size" not in entries["op"]["fieldsV1"]["f:spec"]  # the field moved to its new manager
        finally:
            ext.delete_custom_resource_definition(f"widgets.{group}")
