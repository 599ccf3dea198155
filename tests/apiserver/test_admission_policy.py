"""ValidatingAdmissionPolicy and its bindings: served, checked when written, and evaluated on writes with kube's
denials (403/422 by ``reason``), ``Warn`` as a Warning header, params, match conditions, variables, selectors and
``failurePolicy``; gateway-api's own safe-upgrades policy applied with kubectl."""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl, raw_request, unique

_ADM = "/apis/admissionregistration.k8s.io/v1"
_POLICIES = f"{_ADM}/validatingadmissionpolicies"
_BINDINGS = f"{_ADM}/validatingadmissionpolicybindings"
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def server() -> Iterator[TestAPIServer]:
    """A server of this module's own: its policies apply to every write it serves."""
    with TestAPIServer("memory") as s:
        yield s


def _request(server: TestAPIServer, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any, list[str]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp.headers.get_all("Warning") or []
    finally:
        conn.close()


def _policy(name: str, validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE", "UPDATE"],
                                                             "resources": ["configmaps"]}]},
                     "validations": validations, **spec}}


def _binding(name: str, policy: str, actions: list[str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": {"policyName": policy, "validationActions": actions, **spec}}


@pytest.fixture
def namespace(server: TestAPIServer) -> Iterator[str]:
    """A namespace labelled ``policy-test: <its name>``, which every policy here selects."""
    name = unique("ns")
    code, body = raw_request(server, "/api/v1/namespaces", "POST",
                             {"metadata": {"name": name, "labels": {"policy-test": name}}})
    assert code == 201, body
    yield name


@pytest.fixture
def install(server: TestAPIServer) -> Iterator[Any]:
    made: list[str] = []

    def add(policy: dict[str, Any], binding: dict[str, Any]) -> None:
        for path, obj in ((_POLICIES, policy), (_BINDINGS, binding)):
            code, body = raw_request(server, path, "POST", obj)
            assert code == 201, body
            made.append(f"{path}/{obj['metadata']['name']}")

    yield add
    for path in reversed(made):
        raw_request(server, path, "DELETE")


def _selects(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"policy-test": namespace}}}


def _configmap(server: TestAPIServer, namespace: str, data: dict[str, str], name: str = "",
               labels: dict[str, str] | None = None) -> tuple[int, Any, list[str]]:
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name or unique("cm"), "labels": labels or {}}, "data": data}
    return _request(server, f"/api/v1/namespaces/{namespace}/configmaps", "POST", obj)


def test_policy_kinds_are_served(server: TestAPIServer) -> None:
    code, body = raw_request(server, _ADM)
    assert code == 200, body
    names = {r["name"] for r in body["resources"]}
    assert {"validatingadmissionpolicies", "validatingadmissionpolicybindings",
            "validatingadmissionpolicies/status"} <= names


def test_deny_with_kubes_message_and_nothing_stored(server: TestAPIServer, namespace: str, install: Any) -> None:
    name = unique("p")
    install(_policy(name, [{"expression": "!has(object.data) || !('forbidden' in object.data)",
                            "message": "no forbidden key"}], matchConstraints={
                                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                   "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
                                **_selects(namespace)}),
            _binding(name, name, ["Deny"]))
    code, body, _ = _configmap(server, namespace, {"ok": "1"}, "fine")
    assert code == 201, body
    code, body, _ = _configmap(server, namespace, {"forbidden": "1"}, "bad")
    assert code == 422, body
    text = f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: no forbidden key"
    assert body["reason"] == "Invalid"
    assert body["message"] == f'configmaps "bad" is forbidden: {text}'
    assert body["details"] == {"name": "bad", "kind": "configmaps", "causes": [{"message": text}]}
    code, _, _ = _request(server, f"/api/v1/namespaces/{namespace}/configmaps/bad")
    assert code == 404
    code, current, _ = _request(server, f"/api/v1/namespaces/{namespace}/configmaps/fine")
    current["data"] = {"forbidden": "x"}
    code, body, _ = _request(server, f"/api/v1/namespaces/{namespace}/configmaps/fine", "PUT", current)
    assert code == 422, body
    code, after, _ = _request(server, f"/api/v1/namespaces/{namespace}/configmaps/fine")
    assert after["data"] == {"ok": "1"}
    other = unique("ns")  # a namespace the selector does not match
    raw_request(server, "/api/v1/namespaces", "POST", {"metadata": {"name": other}})
    code, body, _ = _configmap(server, other, {"forbidden": "1"})
    assert code == 201, body


def test_reason_message_expression_variables_and_warn(server: TestAPIServer, namespace: str, install: Any) -> None:
    name = unique("p")
    install(_policy(name, [{"expression": "variables.count <= 2", "reason": "Forbidden",
                            "messageExpression": "'%d keys, at most 2'.format([variables.count])"}],
                    variables=[{"name": "count", "expression": "has(object.data) ? size(object.data) : 0"}],
                    matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}],
                                      **_selects(namespace)}),
            _binding(name, name, ["Deny"]))
    code, body, _ = _configmap(server, namespace, {"a": "1", "b": "2", "c": "3"})
    assert code == 403, body
    assert body["reason"] == "Forbidden"
    assert body["message"].endswith(f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
                                    "3 keys, at most 2")
    warn = unique("w")
    install(_policy(warn, [{"expression": "object.metadata.name.startsWith('w-')", "message": "name w-*"}],
                    matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}],
                                      **_selects(namespace)}),
            _binding(warn, warn, ["Warn"]))
    code, body, warnings = _configmap(server, namespace, {"a": "1"}, "x-named")
    assert code == 201, body
    assert warnings == [f'299 - "Validation failed for ValidatingAdmissionPolicy \'{warn}\' with binding \'{warn}\': '
                        'name w-*"']


def test_match_conditions_object_selector_and_exclusions(server: TestAPIServer, namespace: str,
                                                          install: Any) -> None:
    name = unique("p")
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}]
    install(_policy(name, [{"expression": "false", "message": "denied"}],
                    matchConditions=[{"name": "has-data", "expression": "has(object.data)"}],
                    matchConstraints={"resourceRules": rules, **_selects(namespace),
                                      "objectSelector": {"matchExpressions": [
                                          {"key": "guarded", "operator": "Exists"}]},
                                      "excludeResourceRules": [{**rules[0], "resourceNames": ["spared"]}]}),
            _binding(name, name, ["Deny"]))
    assert _configmap(server, namespace, {"a": "1"}, labels={"guarded": "1"})[0] == 422
    assert _configmap(server, namespace, {}, labels={"guarded": "1"})[0] == 201  # matchCondition false
    assert _configmap(server, namespace, {"a": "1"})[0] == 201  # objectSelector does not match
    assert _configmap(server, namespace, {"a": "1"}, "spared", labels={"guarded": "1"})[0] == 201  # excluded


def test_params_by_name_and_parameter_not_found(server: TestAPIServer, namespace: str, install: Any) -> None:
    code, body = raw_request(server, f"/api/v1/namespaces/{namespace}/configmaps", "POST",
                             {"metadata": {"name": "limits"}, "data": {"max": "2"}})
    assert code == 201, body
    name = unique("p")
    install(_policy(name, [{"expression": "!has(object.data) || size(object.data) <= int(params.data.max)",
                            "messageExpression": "'at most ' + params.data.max + ' keys'"}],
                    paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
                    matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}],
                                      **_selects(namespace),
                                      "objectSelector": {"matchLabels": {"checked": "yes"}}}),
            _binding(name, name, ["Deny"], paramRef={"name": "limits", "namespace": namespace,
                                                     "parameterNotFoundAction": "Deny"}))
    checked = {"checked": "yes"}
    assert _configmap(server, namespace, {"a": "1", "b": "2"}, labels=checked)[0] == 201
    code, body, _ = _configmap(server, namespace, {"a": "1", "b": "2", "c": "3"}, labels=checked)
    assert code == 422, body
    assert body["message"].endswith("denied request: at most 2 keys")
    raw_request(server, f"/api/v1/namespaces/{namespace}/configmaps/limits", "DELETE")
    code, body, _ = _configmap(server, namespace, {"a": "1"}, labels=checked)
    assert code == 422, body
    assert body["message"].endswith("denied request: failed to configure binding: no params found for policy "
                                    "binding with `Deny` parameterNotFoundAction")


@pytest.mark.parametrize(("failure_policy", "code"), [("Fail", 422), ("Ignore", 201)])
def test_failure_policy_on_an_expression_error(server: TestAPIServer, namespace: str, install: Any,
                                               failure_policy: str, code: int) -> None:
    name = unique("p")
    install(_policy(name, [{"expression": "object.data.missing == 'x'"}], failurePolicy=failure_policy,
                    matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}],
                                      **_selects(namespace)}),
            _binding(name, name, ["Deny"]))
    got, body, _ = _configmap(server, namespace, {"a": "1"})
    assert got == code, body
    if code == 422:
        assert body["message"].endswith("denied request: expression 'object.data.missing == 'x'' resulted in "
                                        "error: no such key: missing")


def test_bad_policies_are_refused(server: TestAPIServer) -> None:
    code, body = raw_request(server, _POLICIES, "POST", _policy(unique("p"), [{"expression": "object.data ==="}]))
    assert code == 422, body
    cause = body["details"]["causes"][0]
    assert cause["field"] == "spec.validations[0].expression"
    assert cause["message"].startswith('Invalid value: "object.data ===": compilation failed: ERROR: <input>:')
    code, body = raw_request(server, _BINDINGS, "POST", _binding(unique("b"), "x", ["Deny", "Warn"]))
    assert code == 422, body
    assert body["details"]["causes"][0]["field"] == "spec.validationActions"
    code, body = raw_request(server, _POLICIES, "POST", {"apiVersion": "admissionregistration.k8s.io/v1",
                                                         "kind": "ValidatingAdmissionPolicy",
                                                         "metadata": {"name": unique("p")}, "spec": "nonsense"})
    assert 400 <= code < 500, body


def _crd_yaml(work: Path, version: str, channel: str = "standard") -> Path:
    """gateway-api's GatewayClass CRD (vendored) with ``bundle-version`` ``version``."""
    text = gzip.decompress((DATA / "crds" / "gateway-api.yaml.gz").read_bytes()).decode()
    doc = next(d for d in text.split("\n---\n") if "name: gatewayclasses.gateway.networking.k8s.io" in d)
    doc = doc.replace("bundle-version: v0.0.0-dev", f"bundle-version: {version}")
    doc = doc.replace("channel: standard", f"channel: {channel}")
    path = work / f"gatewayclass-{version}-{channel}.yaml"
    path.write_text(doc)
    return path


def test_gateway_api_safe_upgrades_policy_with_kubectl(kubectl_path: str, tmp_path: Path) -> None:
    with TestAPIServer("memory") as own:
        kc = Kubectl(kubectl_path, own.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
        out = kc.run("apply", "-f", str(DATA / "policies" / "gateway-api-safe-upgrades.yaml")).stdout
        assert "validatingadmissionpolicy.admissionregistration.k8s.io/safe-upgrades" in out
        assert "validatingadmissionpolicybinding.admissionregistration.k8s.io/safe-upgrades" in out
        err = kc.fail("apply", "-f", str(_crd_yaml(tmp_path, "v0.0.0-dev")))
        assert ("ValidatingAdmissionPolicy 'safe-upgrades.gateway.networking.k8s.io' with binding "
                "'safe-upgrades.gateway.networking.k8s.io' denied request: Installing CRDs with version before "
                "v1.5.0 is prohibited by default.") in err, err
        assert kc.run("get", "crd", "-o", "name").stdout.strip() == ""  # nothing stored
        kc.run("apply", "-f", str(_crd_yaml(tmp_path, "v1.6.0")))
        err = kc.fail("apply", "-f", str(_crd_yaml(tmp_path, "v1.6.0", "experimental")))
        assert "Installing experimental CRDs on top of standard channel CRDs is prohibited" in err, err
        assert kc.run("get", "validatingadmissionpolicies", "-o", "name").stdout.split() == [
            "validatingadmissionpolicy.admissionregistration.k8s.io/safe-upgrades.gateway.networking.k8s.io"]


def test_delete_is_admitted_with_old_object(server: TestAPIServer, namespace: str, install: Any) -> None:
    name = unique("p")
    install(_policy(name, [{"expression": "object == null && !has(oldObject.metadata.labels.protected)",
                            "message": "protected", "reason": "Forbidden"}],
                    matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["DELETE"], "resources": ["configmaps"]}],
                                      **_selects(namespace)}),
            _binding(name, name, ["Deny"]))
    assert _configmap(server, namespace, {}, "keep", labels={"protected": "yes"})[0] == 201
    assert _configmap(server, namespace, {}, "drop")[0] == 201
    code, body, _ = _request(server, f"/api/v1/namespaces/{namespace}/configmaps/keep", "DELETE")
    assert code == 403, body
    assert body["message"].endswith("denied request: protected")
    assert _request(server, f"/api/v1/namespaces/{namespace}/configmaps/keep")[0] == 200
    assert _request(server, f"/api/v1/namespaces/{namespace}/configmaps/drop", "DELETE")[0] == 200
