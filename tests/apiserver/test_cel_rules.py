"""CRD validation rules (``x-kubernetes-validations``) as kube-apiserver evaluates them: rejected objects get a 422
with kube's causes, nothing stored changes, and a CRD whose rule does not compile or costs too much is refused."""

from __future__ import annotations

import copy
import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import raw_request, unique

_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

_SPEC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "min": {"type": "integer"},
        "max": {"type": "integer"},
        "mode": {"type": "string", "maxLength": 16},
        "immutable": {"type": "string", "maxLength": 16, "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "immutable is immutable"}]},
        "size": {"type": "string", "maxLength": 32},
        "url": {"type": "string", "maxLength": 256},
        "ratio": {"type": "number"},
        "ports": {"type": "array", "maxItems": 8, "items": {"type": "integer"}},
        "limits": {"type": "object", "maxProperties": 4, "additionalProperties": {"type": "string", "maxLength": 8}},
        "children": {"type": "array", "maxItems": 4, "x-kubernetes-list-type": "map",
                     "x-kubernetes-list-map-keys": ["name"],
                     "items": {"type": "object", "required": ["name"], "properties": {
                         "name": {"type": "string", "maxLength": 16},
                         "weight": {"type": "integer", "x-kubernetes-validations": [
                             {"rule": "self >= oldSelf", "message": "weight may only grow"}]}}}},
    },
    "x-kubernetes-validations": [
        {"rule": "!has(self.min) || !has(self.max) || self.min <= self.max", "message": "min must not exceed max"},
        {"rule": "!has(self.mode) || self.mode in ['a', 'b']", "messageExpression":
            "'mode %s is not one of a, b'.format([self.mode])", "fieldPath": ".mode", "reason": "FieldValueForbidden"},
        {"rule": "!has(self.size) || (isQuantity(self.size) && quantity(self.size).isLessThan(quantity('1Gi')))",
         "message": "size must be a quantity below 1Gi", "fieldPath": ".size", "reason": "FieldValueRequired"},
        {"rule": "!has(self.url) || (isURL(self.url) && url(self.url).getScheme() == 'https')",
         "message": "url must be https"},
        {"rule": "!has(self.ratio) || self.ratio < 1.0", "message": "ratio below 1"},
        {"rule": "!has(self.ports) || self.ports.isSorted()", "message": "ports sorted"},
        {"rule": "self.?limits.orValue({}).all(k, self.limits[k].lowerAscii() == self.limits[k])",
         "message": "limits lower case"},
    ],
}


def _crd(group: str, spec_schema: dict[str, Any], plural: str = "widgets", kind: str = "Widget") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": plural, "kind": kind},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "properties": {"spec": spec_schema,
                                                  "status": {"type": "object",
                                                             "properties": {"phase": {"type": "string"}}}}}}}]},
    }


@pytest.fixture(scope="module")
def group(memory_server: TestAPIServer) -> Iterator[str]:
    name = f"{unique('cel')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(name, _SPEC))
    assert code == 201, body
    yield name
    raw_request(memory_server, f"{_CRDS}/widgets.{name}", "DELETE")


def _path(group: str, name: str = "") -> str:
    return f"/apis/{group}/v1/namespaces/default/widgets" + (f"/{name}" if name else "")


def _create(server: TestAPIServer, group: str, spec: dict[str, Any], name: str = "") -> tuple[int, Any]:
    obj = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name or unique("w")}, "spec": spec}
    return raw_request(server, _path(group), "POST", obj)


def _merge_patch(server: TestAPIServer, path: str, patch: dict[str, Any]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/merge-patch+json"}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request("PATCH", path, json.dumps(patch), headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _causes(body: Any) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def test_valid_object_passes_every_rule(memory_server: TestAPIServer, group: str) -> None:
    code, body = _create(memory_server, group, {
        "min": 1, "max": 2, "mode": "a", "size": "512Mi", "url": "https://example.com/x", "ratio": 0,
        "ports": [80, 443], "limits": {"cpu": "1", "mem": "2gi"}})
    assert code == 201, body


def test_root_rule_message_and_kind(memory_server: TestAPIServer, group: str) -> None:
    name = unique("w")
    code, body = _create(memory_server, group, {"min": 3, "max": 2}, name)
    assert code == 422, body
    assert body["reason"] == "Invalid"
    assert body["message"] == (f'Widget.{group} "{name}" is invalid: spec: Invalid value: "object": '
                               "min must not exceed max")
    assert _causes(body) == [("FieldValueInvalid", "spec", 'Invalid value: "object": min must not exceed max')]
    code, _ = raw_request(memory_server, _path(group, name))
    assert code == 404  # nothing stored


def test_message_expression_field_path_and_reason(memory_server: TestAPIServer, group: str) -> None:
    code, body = _create(memory_server, group, {"mode": "c"})
    assert code == 422, body
    assert _causes(body) == [("FieldValueForbidden", "spec.mode", "Forbidden: mode c is not one of a, b")]
    code, body = _create(memory_server, group, {"size": "2Gi"})
    assert code == 422, body
    assert _causes(body) == [("FieldValueRequired", "spec.size", "Required value: size must be a quantity below 1Gi")]


@pytest.mark.parametrize(("spec", "message"), [
    ({"url": "http://example.com"}, "url must be https"),
    ({"url": "not a url"}, "url must be https"),
    ({"ratio": 1}, "ratio below 1"),  # a whole number in a number field is a double in CEL
    ({"ports": [443, 80]}, "ports sorted"),
    ({"limits": {"a": "B"}}, "limits lower case"),
])
def test_library_rules_reject(memory_server: TestAPIServer, group: str, spec: dict[str, Any], message: str) -> None:
    code, body = _create(memory_server, group, spec)
    assert code == 422, body
    assert _causes(body) == [("FieldValueInvalid", "spec", f'Invalid value: "object": {message}')]


def test_transition_rules(memory_server: TestAPIServer, group: str) -> None:
    name = unique("w")
    code, body = _create(memory_server, group, {"immutable": "x", "children": [{"name": "a", "weight": 2}]}, name)
    assert code == 201, body  # on create, rules using oldSelf do not run
    code, current = raw_request(memory_server, _path(group, name))
    changed = copy.deepcopy(current)
    changed["spec"]["immutable"] = "y"
    changed["spec"]["children"] = [{"name": "b", "weight": 1}, {"name": "a", "weight": 1}]
    code, body = raw_request(memory_server, _path(group, name), "PUT", changed)
    assert code == 422, body
    assert _causes(body) == [
        ("FieldValueInvalid", "spec.immutable", 'Invalid value: "string": immutable is immutable'),
        ("FieldValueInvalid", "spec.children[1].weight", 'Invalid value: "integer": weight may only grow'),
    ]  # the new child "b" has no old value: its transition rule does not run
    code, after = raw_request(memory_server, _path(group, name))
    assert after == current  # nothing stored changed
    grown = copy.deepcopy(current)
    grown["spec"]["children"] = [{"name": "a", "weight": 5}]
    code, body = raw_request(memory_server, _path(group, name), "PUT", grown)
    assert code == 200, body


def test_patch_and_status_are_validated(memory_server: TestAPIServer, group: str) -> None:
    name = unique("w")
    code, body = _create(memory_server, group, {"min": 1, "max": 2}, name)
    assert code == 201, body
    code, body = _merge_patch(memory_server, _path(group, name), {"spec": {"min": 5}})
    assert code == 422, body
    assert "min must not exceed max" in body["message"]
    status = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name},
              "status": {"phase": "Ready"}}
    code, body = raw_request(memory_server, _path(group, name) + "/status", "PUT", status)
    assert code == 200, body


def test_unchanged_invalid_values_ratchet(memory_server: TestAPIServer, group: str) -> None:
    """A value stored before a rule existed (here: written through a CRD without the rule) may stay; kube calls
    it ratcheting."""
    schema = copy.deepcopy(_SPEC)
    loose = copy.deepcopy(schema)
    del loose["x-kubernetes-validations"]
    other = f"{unique('rat')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(other, loose))
    assert code == 201, body
    name = unique("w")
    code, body = _create(memory_server, other, {"min": 3, "max": 2, "mode": "z"}, name)
    assert code == 201, body
    code, crd = raw_request(memory_server, f"{_CRDS}/widgets.{other}")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = schema
    code, body = raw_request(memory_server, f"{_CRDS}/widgets.{other}", "PUT", crd)
    assert code == 200, body
    code, current = raw_request(memory_server, _path(other, name))
    current["metadata"]["labels"] = {"touched": "yes"}
    code, body = raw_request(memory_server, _path(other, name), "PUT", current)
    assert code == 200, body  # unchanged spec: its failures ratchet
    current = body
    current["spec"]["max"] = 1
    code, body = raw_request(memory_server, _path(other, name), "PUT", current)
    assert code == 422, body  # a changed spec is checked again
    assert [c[1] for c in _causes(body)] == ["spec", "spec.mode"]  # both rules are spec's, and spec changed
    raw_request(memory_server, f"{_CRDS}/widgets.{other}", "DELETE")


def test_runtime_errors_are_422_not_500(memory_server: TestAPIServer) -> None:
    other = f"{unique('rt')}.example.com"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                               "x": {"x-kubernetes-int-or-string": True}},
              "x-kubernetes-validations": [{"rule": "self.a / self.b > 0"}, {"rule": "self.x + 1 > 0"}]}
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(other, schema))
    assert code == 201, body
    code, body = _create(memory_server, other, {"a": 1, "b": 0, "x": "s"})
    assert code == 422, body
    assert _causes(body) == [
        ("FieldValueInvalid", "spec", 'Invalid value: "object": division by zero evaluating rule: self.a / self.b > 0'),
        ("FieldValueInvalid", "spec", "Invalid value: \"object\": 'no such overload': call arguments did not match a "
         "supported operator, function or macro signature for rule: self.x + 1 > 0"),
    ]
    code, body = _create(memory_server, other, {"b": 1, "x": 1})
    assert code == 422, body
    assert "no such key: a evaluating rule" in body["message"]
    code, body = _create(memory_server, other, {"a": "text"})
    assert code == 422, body  # a schema type error: the rules are not run
    assert ("FieldValueInvalid", "<nil>", 'Invalid value: "null": some validation rules were not checked because '
            "the object was invalid; correct the existing errors to complete validation") in _causes(body)
    raw_request(memory_server, f"{_CRDS}/widgets.{other}", "DELETE")


def _crd_causes(server: TestAPIServer, spec_schema: dict[str, Any]) -> list[tuple[str, str, str]]:
    group = f"{unique('bad')}.example.com"
    code, body = raw_request(server, _CRDS, "POST", _crd(group, spec_schema))
    assert code == 422, body
    code, _ = raw_request(server, f"{_CRDS}/widgets.{group}")
    assert code == 404
    return _causes(body)


_RULE_PATH = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0]"


def test_crd_with_a_rule_that_does_not_compile(memory_server: TestAPIServer) -> None:
    for rule, detail in (("self.a >", "Syntax error"), ("self.nope == 1", "undefined field 'nope'"),
                         ("slef.a == 1", "undeclared reference to 'slef'"), ("self.a", "must evaluate to a bool"),
                         ("self.a.frobnicate()", "undeclared reference to 'frobnicate'")):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}},
                  "x-kubernetes-validations": [{"rule": rule}]}
        causes = _crd_causes(memory_server, schema)
        assert len(causes) == 1, causes
        reason, where, message = causes[0]
        assert (reason, where) == ("FieldValueInvalid", f"{_RULE_PATH}.rule")
        assert message.startswith("Invalid value: apiextensions.ValidationRule{Rule:")
        assert detail in message, message


def test_crd_rule_fields_are_checked(memory_server: TestAPIServer) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "x-kubernetes-validations": [{"rule": "self.a > 0", "reason": "Nope", "fieldPath": ".b"}]}
    assert _crd_causes(memory_server, schema) == [
        ("FieldValueNotSupported", f"{_RULE_PATH}.reason", 'Unsupported value: "Nope": supported values: '
         '"FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"'),
        ("FieldValueInvalid", f"{_RULE_PATH}.fieldPath", 'Invalid value: ".b": fieldPath must be a valid path'),
    ]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "x-kubernetes-validations": [{"rule": "self.a > 0", "optionalOldSelf": True}]}
    assert _crd_causes(memory_server, schema) == [
        ("FieldValueInvalid", f"{_RULE_PATH}.optionalOldSelf",
         "Invalid value: true: may not be set if oldSelf is not used in rule")]


def test_crd_with_rules_over_the_cost_limit(memory_server: TestAPIServer) -> None:
    """An unbounded list of unbounded strings with a per-item rule: kube refuses the CRD (estimated cost)."""
    items = {"type": "object", "properties": {"name": {"type": "string"}},
             "x-kubernetes-validations": [{"rule": "self.name.matches('^[a-z]+$')"}]}
    schema = {"type": "object", "properties": {"list": {"type": "array", "items": items}}}
    causes = _crd_causes(memory_server, schema)
    where = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items"
    assert (("FieldValueForbidden", f"{where}.x-kubernetes-validations[0].rule",
             "Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, "
             "or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")
            in causes), causes
    assert causes[-1][:2] == ("FieldValueForbidden", "spec.versions[0].schema.openAPIV3Schema")
    assert "estimated rule cost total for entire OpenAPIv3 schema exceeds budget" in causes[-1][2]
    bounded = copy.deepcopy(schema)  # the same rule with bounds is accepted
    bounded["properties"]["list"]["maxItems"] = 16
    bounded["properties"]["list"]["items"]["properties"]["name"]["maxLength"] = 64
    group = f"{unique('ok')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(group, bounded))
    assert code == 201, body
    raw_request(memory_server, f"{_CRDS}/widgets.{group}", "DELETE")


def test_transition_rule_on_an_uncorrelatable_list_is_refused(memory_server: TestAPIServer) -> None:
    schema = {"type": "object", "properties": {"list": {"type": "array", "maxItems": 4, "items": {
        "type": "string", "maxLength": 8, "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}}
    causes = _crd_causes(memory_server, schema)
    assert causes == [(
        "FieldValueInvalid",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items.x-kubernetes-validations[0]"
        ".rule",
        'Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within '
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list]")]


def test_runtime_cost_limit(memory_server: TestAPIServer) -> None:
    """A rule within the static limit whose evaluation on a large value would cost more than kube's per-call limit
    (1,000,000) is an error, not an evaluation: a quadratic rule over a list bounded by ``maxItems: 1200`` (within
    the static limit) given 500 items."""
    other = f"{unique('cost')}.example.com"
    schema = {"type": "object", "properties": {"list": {"type": "array", "maxItems": 1200,
                                                        "items": {"type": "integer"}}},
              "x-kubernetes-validations": [{"rule": "self.list.all(x, self.list.exists(y, x == y))",
                                            "message": "each found"}]}
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(other, schema))
    assert code == 201, body
    code, body = _create(memory_server, other, {"list": list(range(20))})
    assert code == 201, body
    code, body = _create(memory_server, other, {"list": list(range(500))})
    assert code == 422, body
    assert _causes(body) == [("FieldValueInvalid", "spec", "Invalid value: \"object\": 'operation cancelled: actual "
                              "cost limit exceeded': no further validation rules will be run due to call cost exceeds "
                              "limit for rule: each found")]
    raw_request(memory_server, f"{_CRDS}/widgets.{other}", "DELETE")


@pytest.mark.parametrize("validations", [
    "not a list",
    [{"rule": "(" * 600 + "true" + ")" * 600}],
    [{"rule": "self.a.all(x, " * 200 + "true" + ")" * 200}],
    [{"rule": "true", "messageExpression": "'unterminated"}],
    [{"rule": "true", "fieldPath": "not.a.path"}],
    [{"rule": "\n"}],
])
def test_bad_rules_are_4xx_never_500(memory_server: TestAPIServer, validations: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}},
              "x-kubernetes-validations": validations}
    group = f"{unique('bad')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(group, schema))
    assert code == 422, body
    code, _ = raw_request(memory_server, f"{_CRDS}/widgets.{group}")
    assert code == 404


def test_rule_at_the_root_names_no_field(memory_server: TestAPIServer) -> None:
    """A rule on the resource's root sees ``metadata.name`` and is reported at kube's nil field path."""
    group = f"{unique('root')}.example.com"
    crd = _crd(group, {"type": "object", "properties": {"a": {"type": "integer"}}})
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [
        {"rule": "self.metadata.name.startsWith('ok-')", "message": "name must start with ok-"}]
    code, body = raw_request(memory_server, _CRDS, "POST", crd)
    assert code == 201, body
    assert _create(memory_server, group, {"a": 1}, "ok-1")[0] == 201
    code, body = _create(memory_server, group, {"a": 1}, "bad")
    assert code == 422, body
    assert _causes(body) == [("FieldValueInvalid", "<nil>", 'Invalid value: "object": name must start with ok-')]
    raw_request(memory_server, f"{_CRDS}/widgets.{group}", "DELETE")
