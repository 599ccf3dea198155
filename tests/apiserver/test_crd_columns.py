"""A CRD's ``additionalPrinterColumns`` in the Table form: kubectl's JSONPath per column, each cell the first value
selected and typed as kube-apiserver types it, and kube's checks of the columns when the CRD is written."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import raw_request, unique

_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
COLUMNS: list[dict[str, Any]] = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type == "Ready")].status'},
    {"name": "First", "type": "integer", "jsonPath": ".spec.ports[*]"},
    {"name": "Last", "type": "integer", "jsonPath": ".spec.ports[-1:]"},
    {"name": "Issuer", "type": "string", "jsonPath": ".metadata.annotations.cert-manager\\.io/issuer"},
    {"name": "Key", "type": "string", "jsonPath": ".metadata.labels['tier']"},
    {"name": "Trunc", "type": "integer", "jsonPath": ".spec.ratio"},
    {"name": "Ratio", "type": "number", "jsonPath": ".spec.count"},
    {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
    {"name": "NotBool", "type": "boolean", "jsonPath": ".spec.count"},
    {"name": "Object", "type": "string", "jsonPath": ".spec.extra"},
    {"name": "Null", "type": "string", "jsonPath": ".spec.nothing"},
    {"name": "Missing", "type": "string", "jsonPath": ".spec.missing"},
    {"name": "OutOfRange", "type": "integer", "jsonPath": ".spec.ports[7]"},
    {"name": "Bad date", "type": "date", "jsonPath": ".spec.when"},
    {"name": "No date", "type": "date", "jsonPath": ".spec.empty"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "how old"},
]
SPEC = {"ports": [80, 443, 8443], "ratio": 2.9, "count": 3, "on": True, "extra": {"z": 1, "a": [1.0, "<"]},
        "nothing": None, "when": "yesterday", "empty": ""}
CELLS = ["True", 80, 8443, "ca", "front", 2, 3.0, True, None, '{"a":[1,"\\u003c"],"z":1}', "<no value>", None,
         None, "<invalid>", "<unknown>"]  # and Age


def _crd(group: str, columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "things", "kind": "Thing"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "additionalPrinterColumns": columns,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _table(server: TestAPIServer, path: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Accept": _TABLE})
        resp = conn.getresponse()
        body: dict[str, Any] = json.loads(resp.read())
        assert resp.status == 200, body
        return body
    finally:
        conn.close()


@pytest.fixture(scope="module")
def group(memory_server: TestAPIServer) -> Iterator[str]:
    name = f"{unique('cols')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(name, COLUMNS))
    assert code == 201, body
    yield name
    raw_request(memory_server, f"{_CRDS}/things.{name}", "DELETE")


def _thing(server: TestAPIServer, group: str) -> str:
    name = unique("t")
    obj = {"apiVersion": f"{group}/v1", "kind": "Thing",
           "metadata": {"name": name, "annotations": {"cert-manager.io/issuer": "ca"}, "labels": {"tier": "front"}},
           "spec": SPEC}
    code, body = raw_request(server, f"/apis/{group}/v1/namespaces/default/things", "POST", obj)
    assert code == 201, body
    body["status"] = {"conditions": [{"type": "Issuing", "status": "False"}, {"type": "Ready", "status": "True"}]}
    code, body = raw_request(server, f"/apis/{group}/v1/namespaces/default/things/{name}/status", "PUT", body)
    assert code == 200, body
    return name


def test_columns_and_cells(memory_server: TestAPIServer, group: str) -> None:
    name = _thing(memory_server, group)
    table = _table(memory_server, f"/apis/{group}/v1/namespaces/default/things/{name}")
    definitions = table["columnDefinitions"]
    assert [d["name"] for d in definitions] == ["Name"] + [c["name"] for c in COLUMNS]
    assert definitions[1]["description"] == ('Custom resource definition column (in JSONPath format): '
                                             '.status.conditions[?(@.type == "Ready")].status')
    assert definitions[-1]["description"] == "how old"
    cells = table["rows"][0]["cells"]
    assert cells[0] == name
    names = [c["name"] for c in COLUMNS[:-1]]
    assert dict(zip(names, cells[1:-1], strict=True)) == dict(zip(names, CELLS, strict=True))
    assert re.fullmatch(r"\d+s", cells[-1]), cells[-1]  # the age, from the object's creationTimestamp


def test_a_path_that_does_not_parse_ends_the_columns_as_in_kube(memory_server: TestAPIServer) -> None:
    group = f"{unique('cols')}.example.com"
    columns = [{"name": "Ok", "type": "string", "jsonPath": ".spec.on"},
               {"name": "Broken", "type": "string", "jsonPath": ".spec.ports[x]"},
               {"name": "After", "type": "string", "jsonPath": ".spec.on"}]
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(group, columns))
    assert code == 201, body  # kube checks only that a jsonPath starts with "."
    try:
        name = _thing(memory_server, group)
        table = _table(memory_server, f"/apis/{group}/v1/namespaces/default/things/{name}")
        assert [d["name"] for d in table["columnDefinitions"]] == ["Name", "Ok"]
        assert table["rows"][0]["cells"] == [name, "true"]
    finally:
        raw_request(memory_server, f"{_CRDS}/things.{group}", "DELETE")


@pytest.mark.parametrize(("column", "cause"), [
    ({"name": "X", "type": "string", "jsonPath": "status.x"},
     ("FieldValueInvalid", "JSONPath", 'Invalid value: "status.x": must be a simple json path starting with .')),
    ({"name": "X", "type": "string"}, ("FieldValueRequired", "JSONPath", "Required value")),
    ({"type": "string", "jsonPath": ".a"}, ("FieldValueRequired", "name", "Required value")),
    ({"name": "X", "jsonPath": ".a"},
     ("FieldValueRequired", "type", "Required value: must be one of boolean,date,integer,number,string")),
    ({"name": "X", "type": "text", "jsonPath": ".a"},
     ("FieldValueInvalid", "type", 'Invalid value: "text": must be one of boolean,date,integer,number,string')),
    ({"name": "X", "type": "string", "format": "uuid", "jsonPath": ".a"},
     ("FieldValueInvalid", "format", 'Invalid value: "uuid": must be one of byte,date,date-time,double,float,'
                                     "int32,int64,password")),
])
def test_bad_columns_refuse_the_crd(memory_server: TestAPIServer, column: dict[str, Any],
                                    cause: tuple[str, str, str]) -> None:
    group = f"{unique('bad')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(group, [column]))
    assert code == 422, body
    reason, field, message = cause
    assert [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]] == [
        (reason, f"spec.versions[0].additionalPrinterColumns[0].{field}", message)]
    assert raw_request(memory_server, f"{_CRDS}/things.{group}")[0] == 404
