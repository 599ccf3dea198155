"""CustomResourceDefinitions: the CRD's own validation and status, its resources served through the generic
registry path (official client and kubectl), structural-schema validation, defaults, pruning, the status
subresource, versions, discovery/OpenAPI, deletion, restarts and per-server catalogues."""

from __future__ import annotations

import copy
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import Registry, TestAPIServer

from .conftest import Kubectl, WatchCollector, raw_request, unique

_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What the widget should be.",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How big."},
        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
        "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "exclusiveMaximum": True,
                  "maximum": 1},
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
        "port": {"x-kubernetes-int-or-string": True},
        "note": {"type": "string", "nullable": True},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"inner": {"type": "object", "properties": {"n": {"type": "integer"}}}}},
        "nested": {"type": "object", "default": {},
                   "properties": {"mode": {"type": "string", "default": "auto"}}},
    },
}


def crd_body(group: str, scope: str = "Namespaced", status: bool = True) -> dict[str, Any]:
    """A CRD ``widgets.<group>`` (kind Widget) with a storage version v1 (status subresource, printer column)
    and a served v1beta1 that preserves unknown fields."""
    v1: dict[str, Any] = {
        "name": "v1", "served": True, "storage": True,
        "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                                     {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": copy.deepcopy(_SPEC_SCHEMA),
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"},
                                                        "observedGeneration": {"type": "integer"}}},
        }}},
    }
    if status:
        v1["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group, "scope": scope,
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [v1, {"name": "v1beta1", "served": True, "storage": False, "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def _group() -> str:
    return f"g{uuid.uuid4().hex[:8]}.example.com"


@pytest.fixture
def group(server: TestAPIServer) -> Iterator[str]:
    """A CRD ``widgets.<group>`` on the parametrised server, deleted afterwards."""
    name = _group()
    api = client.ApiextensionsV1Api(server.api_client())
    api.create_custom_resource_definition(crd_body(name))
    yield name
    try:
        api.delete_custom_resource_definition(f"widgets.{name}")
    except client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def co(server: TestAPIServer) -> Iterator[client.CustomObjectsApi]:
    api_client = server.api_client()
    yield client.CustomObjectsApi(api_client)
    api_client.close()


def widget(name: str, group: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name, **meta},
            "spec": {"size": 3} if spec is None else spec}


def _error(exc: pytest.ExceptionInfo[client.ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.value.body)
    return body


# ----------------------------------------------------------------------------- the CRD


def test_crd_is_established_and_served(server: TestAPIServer, group: str) -> None:
    crd = client.ApiextensionsV1Api(server.api_client()).read_custom_resource_definition(f"widgets.{group}")
    conditions = {c.type: c for c in crd.status.conditions}
    assert conditions["NamesAccepted"].status == "True" and conditions["NamesAccepted"].reason == "NoConflicts"
    assert conditions["Established"].status == "True"
    assert crd.status.accepted_names.singular == "widget" and crd.status.accepted_names.list_kind == "WidgetList"
    assert crd.status.stored_versions == ["v1"]
    assert crd.metadata.generation == 1
    _, groups = raw_request(server, "/apis")
    entry = next(g for g in groups["groups"] if g["name"] == group)
    assert [v["version"] for v in entry["versions"]] == ["v1", "v1beta1"]
    assert entry["preferredVersion"]["version"] == "v1"
    _, resources = raw_request(server, f"/apis/{group}/v1")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["widgets"]["kind"] == "Widget" and by_name["widgets"]["namespaced"] is True
    assert by_name["widgets"]["shortNames"] == ["wd"] and by_name["widgets"]["categories"] == ["all"]
    assert by_name["widgets/status"]["verbs"] == ["get", "patch", "update"]
    _, beta = raw_request(server, f"/apis/{group}/v1beta1")
    assert [r["name"] for r in beta["resources"]] == ["widgets"]  # no status subresource declared there
    _, root = raw_request(server, "/openapi/v3")
    url = root["paths"][f"apis/{group}/v1"]["serverRelativeURL"]
    _, doc = raw_request(server, url)
    schema = doc["components"]["schemas"][".".join(reversed(group.split("."))) + ".v1.Widget"]
    assert schema["properties"]["spec"]["properties"]["size"]["maximum"] == 10
    assert schema["x-kubernetes-group-version-kind"] == [{"group": group, "version": "v1", "kind": "Widget"}]


def _bad(mutate: Any) -> dict[str, Any]:
    body = crd_body("bad.example.com")
    mutate(body)
    return body


_BAD_CRDS: list[tuple[str, Any, str, str]] = [
    ("name", lambda b: b["metadata"].update(name="other.bad.example.com"), "metadata.name",
     'Invalid value: "other.bad.example.com": must be spec.names.plural+"."+spec.group'),
    ("group", lambda b: (b["spec"].update(group="nodot"), b["metadata"].update(name="widgets.nodot")),
     "spec.group", 'Invalid value: "nodot": should be a domain with at least one dot'),
    ("plural", lambda b: b["spec"]["names"].update(plural="Widgets"), "spec.names.plural",
     'Invalid value: "Widgets": a lowercase RFC 1123 label'),
    ("kind", lambda b: b["spec"]["names"].pop("kind"), "spec.names.kind", "Required value"),
    ("scope", lambda b: b["spec"].update(scope="Global"), "spec.scope",
     'Unsupported value: "Global": supported values: "Cluster", "Namespaced"'),
    ("two storage versions", lambda b: b["spec"]["versions"][1].update(storage=True), "spec.versions",
     "must have exactly one version marked as storage version"),
    ("no storage version", lambda b: b["spec"]["versions"][0].update(storage=False), "spec.versions",
     "must have exactly one version marked as storage version"),
    ("nothing served", lambda b: [v.update(served=False) for v in b["spec"]["versions"]], "spec.versions",
     "must have at least one served version"),
    ("no schema", lambda b: b["spec"]["versions"][1].pop("schema"), "spec.versions[1].schema.openAPIV3Schema",
     "Required value: schemas are required"),
    ("untyped field", lambda b: b["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
     ["properties"]["size"].pop("type"),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type",
     "Required value: must not be empty for specified object fields"),
    ("array without items", lambda b: b["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
     ["properties"]["tags"].pop("items"),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].items", "Required value"),
    ("invalid default", lambda b: b["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
     ["properties"]["color"].update(default="pink"),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[color].default",
     'Unsupported value: "pink": supported values: "red", "blue"'),
    ("conversion webhook", lambda b: b["spec"].update(conversion={"strategy": "Webhook"}),
     "spec.conversion.strategy", 'Unsupported value: "Webhook"'),
]


@pytest.mark.parametrize(("mutate", "field", "message"), [c[1:] for c in _BAD_CRDS], ids=[c[0] for c in _BAD_CRDS])
def test_invalid_crds_are_422_and_not_stored(memory_server: TestAPIServer, mutate: Any, field: str,
                                             message: str) -> None:
    body = _bad(mutate)
    code, status = raw_request(memory_server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST",
                               body)
    assert code == 422, status
    assert status["reason"] == "Invalid"
    causes = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert field in causes, causes
    assert message in causes[field]
    assert status["message"].startswith(
        f'CustomResourceDefinition.apiextensions.k8s.io "{body["metadata"]["name"]}" is invalid')
    code, _ = raw_request(memory_server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                          + body["metadata"]["name"])
    assert code == 404
    assert memory_server.registry.catalogue.resource_for("bad.example.com/v1", "widgets") is None


def test_crd_scope_is_immutable_and_stored_versions_grow(memory_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group))
    try:
        with pytest.raises(client.ApiException) as exc:
            api.patch_custom_resource_definition(f"widgets.{group}", {"spec": {"scope": "Cluster"}})
        assert exc.value.status == 422 and "spec.scope: Invalid value: \"Cluster\": field is immutable" in \
            _error(exc)["message"]
        # v1beta1 becomes the storage version: both are stored versions now, and v1's objects stay readable.
        body = api.read_custom_resource_definition(f"widgets.{group}").to_dict()
        versions = [{"name": "v1", "served": True, "storage": False, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
                    {"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]
        updated = api.patch_custom_resource_definition(f"widgets.{group}", {"spec": {"versions": versions}})
        assert updated.status.stored_versions == ["v1", "v1beta1"]
        assert updated.metadata.generation == body["metadata"]["generation"] + 1
        # Dropping v1 from spec.versions while it is a stored version is refused.
        with pytest.raises(client.ApiException) as exc:
            api.patch_custom_resource_definition(f"widgets.{group}", {"spec": {"versions": versions[1:]}})
        assert 'status.storedVersions[0]: Invalid value: "v1": must appear in spec.versions' in \
            _error(exc)["message"]
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


def test_a_name_taken_in_the_group_is_not_accepted(memory_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group))
    clash = crd_body(group)
    clash["metadata"]["name"] = f"gadgets.{group}"
    clash["spec"]["names"] = {"plural": "gadgets", "kind": "Widget"}  # the kind is Widget's already
    other = crd_body(group)  # the control: names of its own
    other["metadata"]["name"] = f"gizmos.{group}"
    other["spec"]["names"] = {"plural": "gizmos", "kind": "Gizmo"}
    try:
        refused = api.create_custom_resource_definition(clash)
        conditions = {c.type: c for c in refused.status.conditions}
        assert conditions["NamesAccepted"].status == "False"
        assert conditions["NamesAccepted"].reason == "KindConflict"
        assert conditions["NamesAccepted"].message == '"Widget" is already in use'
        assert conditions["Established"].status == "False"
        accepted = api.create_custom_resource_definition(other)
        assert {c.type: c.status for c in accepted.status.conditions} == {"NamesAccepted": "True",
                                                                          "Established": "True"}
        _, resources = raw_request(memory_server, f"/apis/{group}/v1")
        assert sorted(r["name"] for r in resources["resources"]) == ["gizmos", "gizmos/status", "widgets",
                                                                     "widgets/status"]
        assert raw_request(memory_server, f"/apis/{group}/v1/namespaces/default/gadgets")[0] == 404
    finally:
        for name in ("widgets", "gadgets", "gizmos"):
            raw_request(memory_server, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}.{group}",
                        "DELETE")


# ----------------------------------------------------------------------------- custom resources


def test_custom_resource_crud_selectors_and_patches(server: TestAPIServer, group: str, ns: str,
                                                    co: client.CustomObjectsApi) -> None:
    a = co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("a", group, labels={"app": "x"}))
    co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("b", group, {"size": 4}))
    assert a["metadata"]["generation"] == 1 and a["metadata"]["namespace"] == ns and a["metadata"]["uid"]
    got = co.get_namespaced_custom_object(group, "v1", ns, "widgets", "a")
    assert got["spec"] == {"size": 3, "color": "red", "nested": {"mode": "auto"}}  # defaults applied
    with pytest.raises(client.ApiException) as exc:
        co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("a", group))
    assert exc.value.status == 409 and _error(exc)["message"] == f'widgets.{group} "a" already exists'

    def names(**kw: Any) -> list[str]:
        items = co.list_namespaced_custom_object(group, "v1", ns, "widgets", **kw)["items"]
        return sorted(i["metadata"]["name"] for i in items)

    assert names() == ["a", "b"]
    assert names(label_selector="app=x") == ["a"]
    assert names(label_selector="app!=x") == ["b"]
    assert names(field_selector="metadata.name=b") == ["b"]
    everywhere = co.list_cluster_custom_object(group, "v1", "widgets", field_selector=f"metadata.namespace={ns}")
    assert sorted(i["metadata"]["name"] for i in everywhere["items"]) == ["a", "b"]
    assert everywhere["kind"] == "WidgetList" and everywhere["apiVersion"] == f"{group}/v1"
    with pytest.raises(client.ApiException) as exc:
        names(field_selector="spec.size=3")
    assert exc.value.status == 400
    # update (PUT) with a stale resourceVersion: 409; with the current one: done, generation bumped
    stale = copy.deepcopy(got)
    got["spec"]["size"] = 5
    updated = co.replace_namespaced_custom_object(group, "v1", ns, "widgets", "a", got)
    assert updated["spec"]["size"] == 5 and updated["metadata"]["generation"] == 2
    with pytest.raises(client.ApiException) as exc:
        co.replace_namespaced_custom_object(group, "v1", ns, "widgets", "a", stale)
    assert exc.value.status == 409
    # merge patch (the client sends a dict as merge patch to custom objects) and JSON patch
    merged = co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "a", {"spec": {"color": "blue"}})
    assert merged["spec"]["color"] == "blue" and merged["metadata"]["generation"] == 3
    code, patched = _raw_patch(server, f"/apis/{group}/v1/namespaces/{ns}/widgets/a", "application/json-patch+json",
                               [{"op": "replace", "path": "/spec/size", "value": 7}])
    assert code == 200 and patched["spec"]["size"] == 7, patched
    # metadata-only changes do not bump the generation
    labelled = co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "a", {"metadata": {"labels": {"b": "1"}}})
    assert labelled["metadata"]["generation"] == 4
    # strategic merge patch: 415, as kube answers for custom resources
    code, status = _raw_patch(server, f"/apis/{group}/v1/namespaces/{ns}/widgets/a",
                              "application/strategic-merge-patch+json", {"spec": {"size": 2}})
    assert code == 415 and status["reason"] == "UnsupportedMediaType"
    assert "application/json-patch+json, application/merge-patch+json" in status["message"]
    co.delete_namespaced_custom_object(group, "v1", ns, "widgets", "a")
    with pytest.raises(client.ApiException) as exc:
        co.get_namespaced_custom_object(group, "v1", ns, "widgets", "a")
    assert exc.value.status == 404 and _error(exc)["message"] == f'widgets.{group} "a" not found'
    # deletecollection
    code, listing = raw_request(server, f"/apis/{group}/v1/namespaces/{ns}/widgets", "DELETE")
    assert code == 200 and [i["metadata"]["name"] for i in listing["items"]] == ["b"]
    assert names() == []


def _raw_patch(server: TestAPIServer, path: str, content_type: str, body: Any) -> tuple[int, Any]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": content_type}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request("PATCH", path, json.dumps(body), headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_watch_custom_resources(server: TestAPIServer, group: str, ns: str, co: client.CustomObjectsApi) -> None:
    # from the list's resourceVersion: a watch still being opened when the create lands cannot miss it
    rv = co.list_namespaced_custom_object(group, "v1", ns, "widgets")["metadata"]["resourceVersion"]
    collector = WatchCollector(co.list_namespaced_custom_object, group, "v1", ns, "widgets",
                               allow_watch_bookmarks=False, resource_version=rv)
    try:
        co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("w", group))
        co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "w", {"spec": {"size": 9}})
        co.delete_namespaced_custom_object(group, "v1", ns, "widgets", "w")
        seen = [collector.next(10) for _ in range(3)]
        assert [e["type"] for e in seen] == ["ADDED", "MODIFIED", "DELETED"]
        assert seen[1]["object"]["spec"]["size"] == 9
    finally:
        collector.stop()


_INVALID_SPECS: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("type", {"size": "three"},
     [("spec.size", 'Invalid value: "string": spec.size in body must be of type integer: "string"')]),
    ("integer, not number", {"size": 2.5},
     [("spec.size", 'Invalid value: "number": spec.size in body must be of type integer: "number"')]),
    ("required", {"color": "red"}, [("spec.size", "Required value")]),
    ("enum", {"size": 1, "color": "pink"},
     [("spec.color", 'Unsupported value: "pink": supported values: "red", "blue"')]),
    ("minimum", {"size": 0}, [("spec.size", "Invalid value: 0: spec.size in body should be greater than or equal "
                                            "to 1")]),
    ("maximum", {"size": 11}, [("spec.size", "Invalid value: 11: spec.size in body should be less than or equal "
                                             "to 10")]),
    ("exclusive minimum", {"size": 1, "ratio": 0},
     [("spec.ratio", "Invalid value: 0: spec.ratio in body should be greater than 0")]),
    ("exclusive maximum", {"size": 1, "ratio": 1},
     [("spec.ratio", "Invalid value: 1: spec.ratio in body should be less than 1")]),
    ("minLength", {"size": 1, "name": "a"},
     [("spec.name", 'Invalid value: "a": spec.name in body should be at least 2 chars long')]),
    ("maxLength", {"size": 1, "name": "abcdef"}, [("spec.name", "Too long: may not be more than 5 bytes")]),
    ("pattern", {"size": 1, "name": "AB"},
     [("spec.name", "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'")]),
    ("minItems", {"size": 1, "tags": []},
     [("spec.tags", "Invalid value: 0: spec.tags in body should have at least 1 items")]),
    ("maxItems", {"size": 1, "tags": ["a", "b", "c"]}, [("spec.tags", "Too many: 3: must have at most 2 items")]),
    ("item type", {"size": 1, "tags": [1]},
     [("spec.tags[0]", 'Invalid value: "integer": spec.tags[0] in body must be of type string: "integer"')]),
    ("map value type", {"size": 1, "labels": {"k": 1}},
     [("spec.labels[k]", 'Invalid value: "integer": spec.labels[k] in body must be of type string: "integer"')]),
    ("int-or-string", {"size": 1, "port": True},
     [("spec.port", 'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"')]),
    ("nested under preserve-unknown-fields", {"size": 1, "free": {"inner": {"n": "x"}}},
     [("spec.free.inner.n", 'Invalid value: "string": spec.free.inner.n in body must be of type integer: '
                            '"string"')]),
    ("several at once", {"size": 99, "color": "green"},
     [("spec.size", "should be less than or equal to 10"), ("spec.color", 'Unsupported value: "green"')]),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in _INVALID_SPECS], ids=[c[0] for c in _INVALID_SPECS])
def test_schema_validation_messages(memory_server: TestAPIServer, memory_group: str, spec: dict[str, Any],
                                    expected: list[tuple[str, str]]) -> None:
    path = f"/apis/{memory_group}/v1/namespaces/default/widgets"
    code, status = raw_request(memory_server, path, "POST", widget("bad", memory_group, spec))
    assert code == 422, status
    assert status["message"].startswith(f'Widget.{memory_group} "bad" is invalid: ')
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    for field, message in expected:
        assert any(f == field and message in m for f, m in causes), causes
    assert raw_request(memory_server, f"{path}/bad")[0] == 404  # nothing stored


@pytest.fixture(scope="module")
def memory_group(memory_server: TestAPIServer) -> Iterator[str]:
    name = _group()
    code, body = raw_request(memory_server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST",
                             crd_body(name))
    assert code == 201, body
    yield name
    raw_request(memory_server, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{name}", "DELETE")


def test_valid_values_pass(memory_server: TestAPIServer, memory_group: str) -> None:
    """The control of the table above: values at the edges are accepted."""
    spec = {"size": 10, "ratio": 0.5, "name": "ab", "tags": ["x", "y"], "port": "http", "note": None,
            "labels": {"k": "v"}, "free": {"inner": {"n": 1}, "anything": [1, {"b": None}]}}
    path = f"/apis/{memory_group}/v1/namespaces/default/widgets"
    code, created = raw_request(memory_server, path, "POST", widget(unique("ok"), memory_group, spec))
    assert code == 201, created
    assert created["spec"]["note"] is None  # nullable: null kept
    assert created["spec"]["free"]["anything"] == [1, {"b": None}]  # preserved as sent
    code, created = raw_request(memory_server, path, "POST", widget(unique("ok"), memory_group, {"size": 1,
                                                                                                   "port": 8080}))
    assert code == 201, created


def test_pruning_and_field_validation(memory_server: TestAPIServer, memory_group: str) -> None:
    path = f"/apis/{memory_group}/v1/namespaces/default/widgets"
    body = widget(unique("p"), memory_group, {"size": 2, "junk": 1, "color": None,
                                              "free": {"kept": {"deep": 1}, "inner": {"n": 1, "gone": 2}}})
    body["metadata"]["bogus"] = "x"
    body["extra"] = {"a": 1}
    code, created = raw_request(memory_server, path, "POST", body)
    assert code == 201, created
    assert "junk" not in created["spec"] and "extra" not in created and "bogus" not in created["metadata"]
    assert created["spec"]["color"] == "red"  # null where not nullable is pruned, then defaulted
    assert created["spec"]["free"] == {"kept": {"deep": 1}, "inner": {"n": 1}}  # pruned below preserve too
    code, status = raw_request(memory_server, path + "?fieldValidation=Strict", "POST",
                               {**body, "metadata": {"name": unique("p")}})
    assert code == 400, status
    assert 'unknown field "spec.junk"' in status["message"] and 'unknown field "extra"' in status["message"]


@pytest.mark.parametrize("body", [[], "x", {"metadata": "x"}, {"metadata": {"labels": {"a": 1}}},
                                  {"kind": "Gadget"}, {"apiVersion": "other.example.com/v1"}])
def test_malformed_bodies_are_400(memory_server: TestAPIServer, memory_group: str, body: Any) -> None:
    path = f"/apis/{memory_group}/v1/namespaces/default/widgets"
    code, status = raw_request(memory_server, path, "POST", body)
    assert code == 400 and status["kind"] == "Status" and status["reason"] == "BadRequest", status
    _, listing = raw_request(memory_server, path)
    assert all(isinstance(i.get("spec"), dict) for i in listing["items"])  # what is stored stays readable


def test_defaults_apply_on_read(memory_server: TestAPIServer) -> None:
    """A default added to the schema later shows on objects stored before (kube defaults on every read)."""
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group))
    co = client.CustomObjectsApi(memory_server.api_client())
    try:
        co.create_namespaced_custom_object(group, "v1", "default", "widgets", widget("old", group))
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}"
        code, crd = raw_request(memory_server, path)
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["shape"] = {
            "type": "string", "default": "round"}
        code, body = raw_request(memory_server, path, "PUT", crd)
        assert code == 200, body
        got = co.get_namespaced_custom_object(group, "v1", "default", "widgets", "old")
        assert got["spec"]["shape"] == "round"
        raw = memory_server.backend.get(f"/registry/{group}/widgets/default/old")[0]
        assert raw is not None and "shape" not in json.loads(raw.value)["spec"]  # not written back
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


def test_status_subresource_and_generation(server: TestAPIServer, group: str, ns: str,
                                           co: client.CustomObjectsApi) -> None:
    created = co.create_namespaced_custom_object(group, "v1", ns, "widgets",
                                                 {**widget("s", group), "status": {"ready": True}})
    assert "status" not in created and created["metadata"]["generation"] == 1  # status ignored on create
    # /status: only the status is taken
    after = co.patch_namespaced_custom_object_status(group, "v1", ns, "widgets", "s",
                                                     {"status": {"ready": True}, "spec": {"size": 9},
                                                      "metadata": {"labels": {"x": "y"}}})
    assert after["status"] == {"ready": True} and after["spec"]["size"] == 3
    assert "labels" not in after["metadata"] and after["metadata"]["generation"] == 1
    # the main endpoint ignores status; a spec change bumps the generation
    main = co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "s",
                                             {"status": {"ready": False}, "spec": {"size": 4}})
    assert main["status"] == {"ready": True} and main["spec"]["size"] == 4 and main["metadata"]["generation"] == 2
    got = co.get_namespaced_custom_object_status(group, "v1", ns, "widgets", "s")
    got["status"]["observedGeneration"] = 2
    replaced = co.replace_namespaced_custom_object_status(group, "v1", ns, "widgets", "s", got)
    assert replaced["status"]["observedGeneration"] == 2 and replaced["metadata"]["generation"] == 2
    with pytest.raises(client.ApiException) as exc:  # status is validated against the schema too
        co.patch_namespaced_custom_object_status(group, "v1", ns, "widgets", "s", {"status": {"ready": "yes"}})
    assert exc.value.status == 422
    # no status subresource on v1beta1; scale is not served
    assert raw_request(server, f"/apis/{group}/v1beta1/namespaces/{ns}/widgets/s/status")[0] == 404
    assert raw_request(server, f"/apis/{group}/v1/namespaces/{ns}/widgets/s/scale")[0] == 404
    assert raw_request(server, f"/apis/{group}/v1/namespaces/{ns}/widgets/s/status", "DELETE")[0] == 405


def test_without_status_subresource_status_is_ordinary(memory_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group, status=False))
    co = client.CustomObjectsApi(memory_server.api_client())
    try:
        created = co.create_namespaced_custom_object(group, "v1", "default", "widgets",
                                                     {**widget("n", group), "status": {"ready": True}})
        assert created["status"] == {"ready": True}
        changed = co.patch_namespaced_custom_object(group, "v1", "default", "widgets", "n",
                                                    {"status": {"ready": False}})
        assert changed["status"] == {"ready": False} and changed["metadata"]["generation"] == 2
        assert raw_request(memory_server, f"/apis/{group}/v1/namespaces/default/widgets/n/status")[0] == 404
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


def test_versions_share_the_storage_version(server: TestAPIServer, group: str, ns: str,
                                            co: client.CustomObjectsApi) -> None:
    co.create_namespaced_custom_object(group, "v1beta1", ns, "widgets",
                                       {"apiVersion": f"{group}/v1beta1", "kind": "Widget",
                                        "metadata": {"name": "b1"}, "spec": {"size": 2, "anything": 1}})
    raw = server.backend.get(f"/registry/{group}/widgets/{ns}/b1")[0]
    assert raw is not None and json.loads(raw.value)["apiVersion"] == f"{group}/v1"  # stored as v1
    as_v1 = co.get_namespaced_custom_object(group, "v1", ns, "widgets", "b1")
    assert as_v1["apiVersion"] == f"{group}/v1" and "anything" not in as_v1["spec"]  # pruned to v1's schema
    assert as_v1["spec"]["color"] == "red"  # v1's defaults apply when read as v1
    as_beta = co.get_namespaced_custom_object(group, "v1beta1", ns, "widgets", "b1")
    assert as_beta["apiVersion"] == f"{group}/v1beta1" and as_beta["spec"]["anything"] == 1
    with pytest.raises(client.ApiException) as exc:  # the body's apiVersion must be the URL's
        co.create_namespaced_custom_object(group, "v1", ns, "widgets", {**widget("x", group),
                                                                         "apiVersion": f"{group}/v1beta1"})
    assert exc.value.status == 400


def test_cluster_scoped_custom_resources(memory_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group, scope="Cluster"))
    co = client.CustomObjectsApi(memory_server.api_client())
    try:
        created = co.create_cluster_custom_object(group, "v1", "widgets", widget("c", group))
        assert "namespace" not in created["metadata"]
        assert [i["metadata"]["name"] for i in co.list_cluster_custom_object(group, "v1", "widgets")["items"]] == \
            ["c"]
        assert raw_request(memory_server, f"/apis/{group}/v1/namespaces/default/widgets")[0] == 404
        co.delete_cluster_custom_object(group, "v1", "widgets", "c")
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


def test_finalizers_on_custom_resources(server: TestAPIServer, group: str, ns: str,
                                        co: client.CustomObjectsApi) -> None:
    co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("f", group, finalizers=["x/y"]))
    marked = co.delete_namespaced_custom_object(group, "v1", ns, "widgets", "f")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["deletionGracePeriodSeconds"] == 0
    co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "f", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as exc:
        co.get_namespaced_custom_object(group, "v1", ns, "widgets", "f")
    assert exc.value.status == 404


def test_namespace_deletion_deletes_custom_resources(server: TestAPIServer, group: str,
                                                     co: client.CustomObjectsApi) -> None:
    core = client.CoreV1Api(server.api_client())
    name = unique("ns")
    core.create_namespace({"metadata": {"name": name}})
    co.create_namespaced_custom_object(group, "v1", name, "widgets", widget("in-ns", group))
    core.delete_namespace(name)
    with pytest.raises(client.ApiException) as exc:
        co.get_namespaced_custom_object(group, "v1", name, "widgets", "in-ns")
    assert exc.value.status == 404


# ----------------------------------------------------------------------------- lifecycle of the CRD


def test_deleting_the_crd_removes_its_resources(server: TestAPIServer, ns: str) -> None:
    """As kube's CRD finalizer: the CRD is marked, creates are refused, its objects deleted (one with a finalizer
    waits for it), then the CRD goes, its watches end and nothing of it is served or stored."""
    group = _group()
    api = client.ApiextensionsV1Api(server.api_client())
    created = api.create_custom_resource_definition(crd_body(group))
    assert created.metadata.finalizers == ["customresourcecleanup.apiextensions.k8s.io"]
    co = client.CustomObjectsApi(server.api_client())
    co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("d1", group))
    co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("d2", group, finalizers=["x/y"]))
    # timeout_seconds: the client then does not re-open a watch that the server ended
    collector = WatchCollector(co.list_namespaced_custom_object, group, "v1", ns, "widgets", timeout_seconds=120)
    try:
        assert {collector.next(10)["type"] for _ in range(2)} == {"ADDED"}
        api.delete_custom_resource_definition(f"widgets.{group}")
        terminating = api.read_custom_resource_definition(f"widgets.{group}")
        assert terminating.metadata.deletion_timestamp is not None
        with pytest.raises(client.ApiException) as exc:
            co.get_namespaced_custom_object(group, "v1", ns, "widgets", "d1")
        assert exc.value.status == 404
        marked = co.get_namespaced_custom_object(group, "v1", ns, "widgets", "d2")  # waits for its finalizer
        assert marked["metadata"]["deletionTimestamp"]
        with pytest.raises(client.ApiException) as exc:
            co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("late", group))
        assert exc.value.status == 405 and "terminating" in _error(exc)["message"]
        assert not collector.done.is_set()  # still served: the watch goes on
        co.patch_namespaced_custom_object(group, "v1", ns, "widgets", "d2", {"metadata": {"finalizers": None}})
        assert collector.done.wait(10), "the watch on the deleted resource did not end"
    finally:
        collector.stop()
    with pytest.raises(client.ApiException) as exc:
        api.read_custom_resource_definition(f"widgets.{group}")
    assert exc.value.status == 404
    code, status = raw_request(server, f"/apis/{group}/v1/namespaces/{ns}/widgets/d1")
    assert code == 404 and status["kind"] == "Status"
    assert server.backend.range(f"/registry/{group}/")[0] == []  # nothing left in storage
    _, groups = raw_request(server, "/apis")
    assert group not in [g["name"] for g in groups["groups"]]
    assert raw_request(server, f"/apis/{group}/v1")[0] == 404
    _, root = raw_request(server, "/openapi/v3")
    assert f"apis/{group}/v1" not in root["paths"]
    # created again: served again, empty
    api.create_custom_resource_definition(crd_body(group))
    try:
        assert co.list_namespaced_custom_object(group, "v1", ns, "widgets")["items"] == []
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


def test_crds_are_per_server(memory_server: TestAPIServer, etcd_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(memory_server.api_client())
    api.create_custom_resource_definition(crd_body(group))
    try:
        assert raw_request(memory_server, f"/apis/{group}/v1")[0] == 200
        assert raw_request(etcd_server, f"/apis/{group}/v1")[0] == 404  # the control: another server
        assert raw_request(etcd_server, f"/apis/{group}/v1/namespaces/default/widgets")[0] == 404
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


@pytest.mark.etcd
def test_restart_on_the_same_etcd_serves_the_crds(etcd_server: TestAPIServer) -> None:
    group = _group()
    api = client.ApiextensionsV1Api(etcd_server.api_client())
    api.create_custom_resource_definition(crd_body(group))
    co = client.CustomObjectsApi(etcd_server.api_client())
    try:
        co.create_namespaced_custom_object(group, "v1", "default", "widgets", widget("r", group))
        fresh = Registry(etcd_server.backend, etcd_server.prefix)  # what a restarted server starts from
        assert fresh.catalogue.resource_for(f"{group}/v1", "widgets") is None
        assert fresh.serve_stored_crds() >= 1
        rt = fresh.catalogue.resource_for(f"{group}/v1", "widgets")
        assert rt is not None
        assert fresh.get(rt, "default", "r")["spec"]["size"] == 3
        etcd_server.stop_server()
        etcd_server.start_server()
        assert co.get_namespaced_custom_object(group, "v1", "default", "widgets", "r")["spec"]["size"] == 3
    finally:
        api.delete_custom_resource_definition(f"widgets.{group}")


# ----------------------------------------------------------------------------- kubectl

_CR_YAML = """
apiVersion: {group}/v1
kind: Widget
metadata: {{name: k1, namespace: default}}
spec: {{size: {size}}}
"""


def test_kubectl_apply_get_explain(kubectl_path: str, memory_server: TestAPIServer, tmp_path: Path) -> None:
    kubectl = Kubectl(kubectl_path, memory_server.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
    group = _group()
    crd_yaml = json.dumps(crd_body(group))  # JSON is YAML
    assert "created" in kubectl.run("apply", "-f", "-", input=crd_yaml).stdout
    try:
        out = kubectl.run("apply", "-f", "-", input=_CR_YAML.format(group=group, size=3)).stdout
        assert f"widget.{group}/k1 created" in out
        table = kubectl.run("get", f"widgets.{group}").stdout.splitlines()
        assert table[0].split() == ["NAME", "SIZE", "AGE"] and table[1].split()[:2] == ["k1", "3"]
        out = kubectl.run("apply", "-f", "-", input=_CR_YAML.format(group=group, size=4)).stdout
        assert f"widget.{group}/k1 configured" in out
        got = json.loads(kubectl.run("get", f"widgets.{group}", "k1", "-o", "json").stdout)
        assert got["spec"] == {"size": 4, "color": "red", "nested": {"mode": "auto"}}
        err = kubectl.fail("apply", "-f", "-", input=_CR_YAML.format(group=group, size=40))
        assert 'The Widget "k1" is invalid: spec.size: Invalid value: 40: spec.size in body should be less ' \
               "than or equal to 10" in err
        err = kubectl.fail("apply", "-f", "-", input=_CR_YAML.format(group=group, size=4).replace(
            "spec: {", "spec: {junk: 1, "))
        assert 'strict decoding error: unknown field "spec.junk"' in err  # kubectl asks for Strict
        err = kubectl.fail("patch", f"widgets.{group}", "k1", "-p", '{"spec":{"size":5}}')
        assert "application/strategic-merge-patch+json is not supported" in err
        kubectl.run("patch", f"widgets.{group}", "k1", "--type=merge", "-p", '{"spec":{"size":5}}')
        assert kubectl.run("get", "crd", f"widgets.{group}").stdout.split()[:4] == ["NAME", "CREATED", "AT",
                                                                                  f"widgets.{group}"]
        explain = kubectl.run("explain", f"widgets.{group}.spec").stdout
        assert "What the widget should be." in explain and "size\t<integer> -required-" in explain
        assert "How big." in explain
    finally:
        kubectl.run("delete", "crd", f"widgets.{group}")
    err = kubectl.fail("get", f"widgets.{group}")
    assert "the server doesn't have a resource type" in err or "NotFound" in err


def test_kubectl_crd_without_columns_shows_name_and_age(kubectl_path: str, memory_server: TestAPIServer,
                                                        tmp_path: Path) -> None:
    kubectl = Kubectl(kubectl_path, memory_server.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
    group = _group()
    body = crd_body(group)
    del body["spec"]["versions"][0]["additionalPrinterColumns"]
    kubectl.run("apply", "-f", "-", input=json.dumps(body))
    try:
        kubectl.run("apply", "-f", "-", input=textwrap.dedent(_CR_YAML.format(group=group, size=1)))
        assert kubectl.run("get", f"widgets.{group}").stdout.splitlines()[0].split() == ["NAME", "AGE"]
    finally:
        kubectl.run("delete", "crd", f"widgets.{group}")


# ----------------------------------------------------------------------------- the informer


def test_informer_on_custom_resources(server: TestAPIServer, group: str, ns: str,
                                      co: client.CustomObjectsApi) -> None:
    import queue as queue_module

    from keyqueue.informer import Informer

    events: queue_module.Queue[tuple[str, str, Any]] = queue_module.Queue()
    co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("before", group))
    with server.api_client() as api_client:
        informer = Informer.for_custom_objects(api_client, group, "v1", "widgets", ns, watch_timeout=30)
        informer.add_event_handler(
            on_add=lambda o: events.put(("add", o["metadata"]["name"], o)),
            on_update=lambda old, new: events.put(("update", new["metadata"]["name"], new)),
            on_delete=lambda o: events.put(("delete", o["metadata"]["name"], o)))
        with informer:
            assert informer.wait_for_cache_sync(10)
            kind, name, obj = events.get(timeout=10)
            assert (kind, name) == ("add", "before") and obj["kind"] == "Widget"
            assert obj["apiVersion"] == f"{group}/v1"
            co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("after", group))
            assert events.get(timeout=10)[:2] == ("add", "after")
            co.patch_namespaced_custom_object_status(group, "v1", ns, "widgets", "after", {"status": {"ready": True}})
            kind, name, obj = events.get(timeout=10)
            assert (kind, name) == ("update", "after") and obj["status"] == {"ready": True}
            co.delete_namespaced_custom_object(group, "v1", ns, "widgets", "before")
            assert events.get(timeout=10)[:2] == ("delete", "before")
            assert sorted(informer.store.list_keys()) == [f"{ns}/after"]
    with pytest.raises(ValueError, match="plural must be a non-empty str"):
        Informer.for_custom_objects(object(), group, "v1", "")
