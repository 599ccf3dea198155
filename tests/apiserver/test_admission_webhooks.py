"""Admission webhooks: Validating- and MutatingWebhookConfigurations served with kube's defaults and validation, and
the webhooks they name called over HTTPS (:mod:`keyqueue.apiserver.admission`) by a server of this module's own
(so that its configurations reach no other test), against the small webhook of ``webhook_server.py``."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.objects import VALIDATING_WEBHOOK_CONFIGURATIONS
from keyqueue.apiserver.tls import openssl_available
from keyqueue.testing import eventually

from .webhook_server import WebhookServer, json_patch, review_answer

pytestmark = pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the certificates")

ADM = "/apis/admissionregistration.k8s.io/v1"
VWC, MWC = f"{ADM}/validatingwebhookconfigurations", f"{ADM}/mutatingwebhookconfigurations"
NS = "wh"
CM_RULE = {"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
           "resources": ["configmaps"]}


@pytest.fixture(scope="module", params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def kube(request: pytest.FixtureRequest) -> Iterator[TestAPIServer]:
    """A server of this module's own: in memory, and on the session's etcd under a prefix of its own."""
    if request.param == "etcd":
        unstarted = TestAPIServer("etcd", etcd=request.getfixturevalue("etcd_proc"), prefix="/admission-webhooks")
    else:
        unstarted = TestAPIServer("memory")
    with unstarted as server:
        for name in (NS, f"{NS}-other"):
            status, _, body = raw(server, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})
            assert status == 201, body
        yield server


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    server = WebhookServer(tmp_path_factory.mktemp("webhook"), dns_names=("localhost", "hook.wh.svc"))
    yield server
    server.close()


@pytest.fixture(autouse=True)
def clean(kube: TestAPIServer, hooks: WebhookServer) -> Iterator[None]:
    yield
    for path in (VWC, MWC):
        _, _, listed = raw(kube, "GET", path)
        for item in listed["items"]:
            raw(kube, "DELETE", f"{path}/{item['metadata']['name']}")
    hooks.release.set()
    with hooks.lock:
        hooks.handlers.clear()
        hooks.calls.clear()
    hooks.release.clear()
    for name in ("hook", "other"):
        kube.registry.admission.set_service_address(NS, name, 443, None)


def raw(server: TestAPIServer, method: str, path: str, body: Any = None,
        content_type: str = "application/json") -> tuple[int, http.client.HTTPMessage, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, resp.headers, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def webhook(hooks: WebhookServer, name: str, path: str, **fields: Any) -> dict[str, Any]:
    """A webhook entry calling ``path`` of the test webhook (configmaps' create, update, delete unless ``rules``)."""
    return {"name": f"{name}.test.keyqueue.dev",
            "clientConfig": {"url": hooks.url(path), "caBundle": hooks.ca_bundle},
            "rules": [CM_RULE], "sideEffects": "None", "admissionReviewVersions": ["v1"], **fields}


def configure(kube: TestAPIServer, path: str, name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    status, _, body = raw(kube, "POST", path, {"metadata": {"name": name}, "webhooks": list(webhooks)})
    assert status == 201, body
    return body  # type: ignore[no-any-return]


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


def cm_path(name: str = "", namespace: str = NS) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")


def stored(kube: TestAPIServer, name: str, namespace: str = NS) -> dict[str, Any] | None:
    status, _, body = raw(kube, "GET", cm_path(name, namespace))
    return body if status == 200 else None


# ---------------------------------------------------------------------------------------------- the configurations
def test_configurations_are_served_with_kube_defaults(kube: TestAPIServer, hooks: WebhookServer) -> None:
    status, _, listed = raw(kube, "GET", ADM)
    assert status == 200
    names = {r["name"]: r for r in listed["resources"]}
    assert names["validatingwebhookconfigurations"]["namespaced"] is False
    assert names["mutatingwebhookconfigurations"]["kind"] == "MutatingWebhookConfiguration"
    svc = {"name": "defaults.test.keyqueue.dev", "clientConfig": {"service": {"namespace": NS, "name": "hook"}},
           "rules": [{**CM_RULE}], "sideEffects": "None", "admissionReviewVersions": ["v1"]}
    created = configure(kube, MWC, "defaults", svc)
    hook = created["webhooks"][0]
    assert created["metadata"]["generation"] == 1
    assert hook["failurePolicy"] == "Fail" and hook["matchPolicy"] == "Equivalent"
    assert hook["timeoutSeconds"] == 10 and hook["reinvocationPolicy"] == "Never"
    assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {}
    assert hook["rules"][0]["scope"] == "*" and hook["clientConfig"]["service"]["port"] == 443


def test_invalid_configurations_are_refused(kube: TestAPIServer, hooks: WebhookServer) -> None:
    bad = {"name": "short.name", "clientConfig": {"url": "http://127.0.0.1/x?q=1"},
           "rules": [{"operations": ["*", "CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                      "resources": ["configmaps"], "scope": "Everywhere"}],
           "timeoutSeconds": 31, "failurePolicy": "Sometimes",
           "matchConditions": [{"name": "c", "expression": "object.("}]}
    status, _, body = raw(kube, "POST", VWC, {"metadata": {"name": "bad"}, "webhooks": [bad, dict(bad)]})
    assert status == 422, body
    fields = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    at = "webhooks[0]."
    assert (at + "name", 'Invalid value: "short.name": should be a domain with at least three segments separated '
            "by dots") in fields
    assert (at + "sideEffects", "Required value") in fields
    assert (at + "admissionReviewVersions", "Required value: must specify one of v1, v1beta1") in fields
    assert (at + "timeoutSeconds", "Invalid value: 31: the timeout value must be between 1 and 30 seconds") in fields
    assert (at + "failurePolicy", 'Unsupported value: "Sometimes": supported values: "Fail", "Ignore"') in fields
    assert (at + "rules[0].scope",
            'Unsupported value: "Everywhere": supported values: "*", "Cluster", "Namespaced"') in fields
    assert (at + "clientConfig.url", 'Invalid value: "http://127.0.0.1/x?q=1": \'https\' is the only allowed URL '
            "scheme") in fields
    assert (at + "clientConfig.url", 'Invalid value: "http://127.0.0.1/x?q=1": query parameters are not permitted '
            "in the URL") in fields
    assert any(f == at + "matchConditions[0].expression" and "compilation failed" in m for f, m in fields)
    assert ("webhooks[1].name", 'Duplicate value: "short.name"') in fields
    assert raw(kube, "GET", f"{VWC}/bad")[0] == 404
    status, _, body = raw(kube, "POST", VWC, {"metadata": {"name": "both"}, "webhooks": [
        webhook(hooks, "both", "/allow", clientConfig={"url": hooks.url("/x"),
                                                       "service": {"namespace": NS, "name": "hook"}})]})
    assert status == 422 and body["details"]["causes"][0]["message"] == \
        "Required value: exactly one of url or service is required"


# ---------------------------------------------------------------------------------------------- validating
@pytest.mark.parametrize(("status_field", "code", "message"), [
    ({"code": 403, "message": "no thanks"}, 403, 'admission webhook "deny.test.keyqueue.dev" denied the request: '
                                                 "no thanks"),
    ({"reason": "NotToday"}, 400, 'admission webhook "deny.test.keyqueue.dev" denied the request: NotToday'),
    (None, 400, 'admission webhook "deny.test.keyqueue.dev" denied the request without explanation'),
])
def test_a_refusal_is_answered_as_kube_does(kube: TestAPIServer, hooks: WebhookServer,
                                            status_field: dict[str, Any] | None, code: int, message: str) -> None:
    hooks.handlers["/deny"] = lambda review: review_answer(review, False, **(
        {"status": status_field} if status_field else {}))
    configure(kube, VWC, "deny", webhook(hooks, "deny", "/deny"))
    status, _, body = raw(kube, "POST", cm_path(), configmap("refused"))
    assert (status, body["message"], body["code"]) == (code, message, code)
    assert stored(kube, "refused") is None


def test_a_refused_update_or_delete_changes_nothing(kube: TestAPIServer, hooks: WebhookServer) -> None:
    status, _, before = raw(kube, "POST", cm_path(), configmap("unchanged", a="1"))
    assert status == 201
    hooks.handlers["/deny"] = lambda review: review_answer(review, False, status={"code": 403, "message": "no"})
    configure(kube, VWC, "deny-writes", webhook(hooks, "deny", "/deny", rules=[
        {**CM_RULE, "operations": ["UPDATE", "DELETE"]}]))
    assert raw(kube, "PATCH", cm_path("unchanged"), {"data": {"a": "2"}}, "application/merge-patch+json")[0] == 403
    assert raw(kube, "PUT", cm_path("unchanged"), {**before, "data": {"a": "3"}})[0] == 403
    assert raw(kube, "DELETE", cm_path("unchanged"))[0] == 403
    assert stored(kube, "unchanged") == before


def test_a_dry_run_is_refused_by_a_webhook_with_side_effects(kube: TestAPIServer, hooks: WebhookServer) -> None:
    # v1 refuses such a configuration; one stored anyway (straight to storage) makes kube refuse dry runs with 400
    obj = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "side-effects", "uid": "u"},
           "webhooks": [{**webhook(hooks, "effects", "/effects"), "sideEffects": "Some", "failurePolicy": "Ignore",
                         "timeoutSeconds": 5}]}
    key = kube.registry.key(VALIDATING_WEBHOOK_CONFIGURATIONS, None, "side-effects")
    assert kube.registry.backend.create(key, json.dumps(obj).encode()).succeeded
    attempts = iter(range(1000))
    status, _, body = eventually(lambda: (r := raw(kube, "POST", cm_path() + "?dryRun=All",
                                                   configmap(f"dry-{next(attempts)}")))[0] != 201 and r, timeout=10)
    assert (status, body["message"]) == (400, 'admission webhook "effects.test.keyqueue.dev" does not support dry run')
    assert raw(kube, "POST", cm_path(), configmap("not-dry"))[0] == 201  # without dryRun it is called
    assert [r["request"]["name"] for r in hooks.reviews("/effects")] == ["not-dry"]


def test_warnings_become_warning_headers(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/warn"] = lambda review: review_answer(review, warnings=["careful now", 'a "quoted" one'])
    configure(kube, VWC, "warn", webhook(hooks, "warn", "/warn"))
    status, headers, _ = raw(kube, "POST", cm_path(), configmap("warned"))
    assert status == 201
    assert headers.get_all("Warning") == ['299 - "careful now"', '299 - "a \\"quoted\\" one"']


def test_the_review_request_says_what_is_written(kube: TestAPIServer, hooks: WebhookServer) -> None:
    configure(kube, VWC, "seen", webhook(hooks, "seen", "/seen"))
    assert raw(kube, "POST", cm_path() + "?fieldManager=tester", configmap("seen", a="1"))[0] == 201
    assert raw(kube, "PATCH", cm_path("seen"), {"data": {"a": "2"}}, "application/merge-patch+json")[0] == 200
    assert raw(kube, "DELETE", cm_path("seen") + "?dryRun=All")[0] == 200
    assert raw(kube, "DELETE", cm_path("seen"))[0] == 200
    reviews = hooks.reviews("/seen")
    assert [r["request"]["operation"] for r in reviews] == ["CREATE", "UPDATE", "DELETE", "DELETE"]
    create, patch, dry, delete = (r["request"] for r in reviews)
    assert reviews[0]["apiVersion"] == "admission.k8s.io/v1" and reviews[0]["kind"] == "AdmissionReview"
    assert len({r["uid"] for r in (create, patch, dry, delete)}) == 4
    assert create["kind"] == create["requestKind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert create["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert (create["name"], create["namespace"], create["oldObject"], create["dryRun"]) == ("seen", NS, None, False)
    assert create["object"]["data"] == {"a": "1"}
    assert create["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "tester"}
    assert create["userInfo"] == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    assert (patch["object"]["data"], patch["oldObject"]["data"]) == ({"a": "2"}, {"a": "1"})
    assert patch["options"]["kind"] == "UpdateOptions"
    assert (dry["dryRun"], dry["options"]["dryRun"], dry["object"]) == (True, ["All"], None)
    assert delete["oldObject"]["data"] == {"a": "2"} and delete["options"]["kind"] == "DeleteOptions"
    assert "subResource" not in create


def test_a_webhook_that_takes_only_v1beta1_gets_v1beta1(kube: TestAPIServer, hooks: WebhookServer) -> None:
    configure(kube, VWC, "beta", webhook(hooks, "beta", "/beta", admissionReviewVersions=["v1beta1"]))
    assert raw(kube, "POST", cm_path(), configmap("beta"))[0] == 201  # its v1beta1 answer is taken
    assert [r["apiVersion"] for r in hooks.reviews("/beta")] == ["admission.k8s.io/v1beta1"]


def test_rules_match_operations_resources_subresources_and_scope(kube: TestAPIServer,
                                                                 hooks: WebhookServer) -> None:
    def rule(resources: list[str], operations: list[str] | None = None, scope: str = "*",
             groups: list[str] | None = None) -> list[dict[str, Any]]:
        return [{"operations": operations or ["*"], "apiGroups": groups or [""], "apiVersions": ["v1"],
                 "resources": resources, "scope": scope}]
    configure(kube, VWC, "rules",
              webhook(hooks, "pods", "/pods", rules=rule(["pods"])),
              webhook(hooks, "status", "/pods-status", rules=rule(["pods/status"])),
              webhook(hooks, "podsall", "/pods-all", rules=rule(["pods/*"])),
              webhook(hooks, "update", "/cm-update", rules=rule(["configmaps"], ["UPDATE"])),
              webhook(hooks, "cluster", "/cluster", rules=rule(["*"], scope="Cluster")),
              webhook(hooks, "namespaced", "/namespaced", rules=rule(["*"], scope="Namespaced")),
              webhook(hooks, "apps", "/apps", rules=rule(["*"], groups=["apps"])))
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert raw(kube, "POST", f"/api/v1/namespaces/{NS}/pods", pod)[0] == 201
    _, _, current = raw(kube, "GET", f"/api/v1/namespaces/{NS}/pods/p")
    current["status"] = {"phase": "Running"}
    assert raw(kube, "PUT", f"/api/v1/namespaces/{NS}/pods/p/status", current)[0] == 200
    assert raw(kube, "POST", cm_path(), configmap("r"))[0] == 201
    assert raw(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": "wh-rules"}})[0] == 201
    assert raw(kube, "DELETE", "/api/v1/namespaces/wh-rules")[0] == 200
    calls = hooks.paths_called()
    assert calls.count("/pods") == 1  # the create, not the status update
    assert calls.count("/pods-status") == 1  # the status update only
    assert calls.count("/pods-all") == 2
    assert "/cm-update" not in calls and "/apps" not in calls
    assert calls.count("/cluster") == 2  # the namespace's create and delete
    assert calls.count("/namespaced") == 2  # the pod and the configmap ("*" is no subresource)
    status_review = hooks.reviews("/pods-status")[0]["request"]
    assert status_review["subResource"] == "status" and status_review["kind"]["kind"] == "Pod"


def test_namespace_and_object_selectors(kube: TestAPIServer, hooks: WebhookServer) -> None:
    assert raw(kube, "PATCH", f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {"hooked": "yes"}}},
               "application/merge-patch+json")[0] == 200
    configure(kube, VWC, "selectors",
              webhook(hooks, "ns", "/ns", namespaceSelector={"matchLabels": {"hooked": "yes"}}),
              webhook(hooks, "obj", "/obj", objectSelector={"matchExpressions": [
                  {"key": "team", "operator": "In", "values": ["a"]}]}))
    assert raw(kube, "POST", cm_path(), configmap("in-labeled"))[0] == 201
    assert raw(kube, "POST", cm_path(namespace=f"{NS}-other"), configmap("elsewhere", {"team": "a"}))[0] == 201
    assert raw(kube, "PATCH", cm_path("elsewhere", f"{NS}-other"), {"metadata": {"labels": {"team": "b"}}},
               "application/merge-patch+json")[0] == 200  # the old object still matches
    assert raw(kube, "PATCH", cm_path("elsewhere", f"{NS}-other"), {"metadata": {"labels": {"team": "c"}}},
               "application/merge-patch+json")[0] == 200  # neither matches
    assert [r["request"]["name"] for r in hooks.reviews("/ns")] == ["in-labeled"]
    assert [r["request"]["operation"] for r in hooks.reviews("/obj")] == ["CREATE", "UPDATE"]


def test_match_conditions(kube: TestAPIServer, hooks: WebhookServer) -> None:
    configure(kube, VWC, "conditions",
              webhook(hooks, "cond", "/cond", matchConditions=[
                  {"name": "wanted", "expression": "object.data.x.lowerAscii() == 'yes'"},  # Kubernetes' library
                  {"name": "creating", "expression": "request.operation == 'CREATE'"}]),
              webhook(hooks, "broken", "/broken", failurePolicy="Ignore",
                      matchConditions=[{"name": "missing", "expression": "object.spec.nothing == 1"}]))
    assert raw(kube, "POST", cm_path(), configmap("c1", x="yes"))[0] == 201
    assert raw(kube, "POST", cm_path(), configmap("c2", x="no"))[0] == 201
    assert raw(kube, "POST", cm_path(), configmap("c1b", x="YES"))[0] == 201
    assert [r["request"]["name"] for r in hooks.reviews("/cond")] == ["c1", "c1b"]
    assert hooks.reviews("/broken") == []  # its condition failed to evaluate, and it fails open
    configure(kube, VWC, "strict", webhook(hooks, "strict", "/strict", matchConditions=[
        {"name": "missing", "expression": "object.spec.nothing == 1"}]))
    status, _, body = raw(kube, "POST", cm_path(), configmap("c3", x="no"))
    assert status == 500 and body["reason"] == "InternalError", body
    assert body["message"].startswith('Internal error occurred: failed calling webhook "strict.test.keyqueue.dev": '
                                      "failed to evaluate match conditions")
    assert stored(kube, "c3") is None


# ---------------------------------------------------------------------------------------------- mutating
def test_mutating_patches_land_in_order(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/first"] = lambda review: review_answer(review, **json_patch(
        [{"op": "add", "path": "/metadata/labels/first", "value": "1"}]))

    def second(review: dict[str, Any]) -> Any:
        seen = review["request"]["object"]["metadata"]["labels"].get("first", "missing")
        return review_answer(review, **json_patch([{"op": "add", "path": "/data/saw", "value": seen}]))

    hooks.handlers["/second"] = second
    configure(kube, MWC, "a-first", webhook(hooks, "first", "/first"))
    configure(kube, MWC, "b-second", webhook(hooks, "second", "/second"))
    configure(kube, VWC, "check", webhook(hooks, "check", "/check"))
    status, _, body = raw(kube, "POST", cm_path(), configmap("mutated", {"x": "y"}, seed="0"))
    assert status == 201, body
    assert body["metadata"]["labels"]["first"] == "1" and body["data"]["saw"] == "1"
    assert stored(kube, "mutated")["data"]["saw"] == "1"  # type: ignore[index]
    assert hooks.reviews("/check")[0]["request"]["object"]["data"]["saw"] == "1"  # validating sees the result
    assert hooks.paths_called() == ["/first", "/second", "/check"]


@pytest.mark.parametrize(("policy", "calls"), [("IfNeeded", 2), ("Never", 1)])
def test_reinvocation(kube: TestAPIServer, hooks: WebhookServer, policy: str, calls: int) -> None:
    hooks.handlers["/later"] = lambda review: review_answer(review, **json_patch(
        [{"op": "add", "path": "/data/later", "value": "x"}]))
    configure(kube, MWC, "a-early", webhook(hooks, "early", "/early", reinvocationPolicy=policy))
    configure(kube, MWC, "b-later", webhook(hooks, "later", "/later", reinvocationPolicy="IfNeeded"))
    assert raw(kube, "POST", cm_path(), configmap(f"re-{policy.lower()}", seed="0"))[0] == 201
    assert hooks.paths_called() == ["/early", "/later", "/early"][:calls + 1]
    if calls == 2:
        assert hooks.reviews("/early")[1]["request"]["object"]["data"] == {"seed": "0", "later": "x"}


def test_a_patch_of_a_delete_is_an_internal_error(kube: TestAPIServer, hooks: WebhookServer) -> None:
    assert raw(kube, "POST", cm_path(), configmap("kept"))[0] == 201
    hooks.handlers["/p"] = lambda review: review_answer(review, **json_patch(
        [{"op": "add", "path": "/data", "value": {}}]))
    configure(kube, MWC, "delete-patch", webhook(hooks, "p", "/p", rules=[{**CM_RULE, "operations": ["DELETE"]}]))
    status, _, body = raw(kube, "DELETE", cm_path("kept"))
    assert status == 500 and "attempted to modify the object, which is not supported" in body["message"]
    assert stored(kube, "kept") is not None


# ---------------------------------------------------------------------------------------------- failures
def _refused_url() -> str:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{s.getsockname()[1]}/gone"  # nobody listens there once closed


FAILURES = {
    "refused": ("", "connect: connection refused"),
    "timeout": ("/hang", "context deadline exceeded"),
    "tls": ("/allow", "x509: certificate signed by unknown authority"),
    "status": ("/500", 'an error on the server ("boom") has prevented the request from succeeding'),
    "garbage": ("/garbage", "couldn't get version/kind; json parse error"),
    "uid": ("/uid", 'received invalid webhook response: expected response.uid='),
    "redirect": ("/redirect", "the server responded with the status code 302 but did not return more information"),
    "kind": ("/kind", "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got v1, "
                      "Kind=Status"),
}


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_failure_policy(kube: TestAPIServer, hooks: WebhookServer, failure: str, policy: str) -> None:
    path, text = FAILURES[failure]
    hooks.handlers["/hang"] = hooks.hang
    hooks.handlers["/500"] = lambda review: (500, b"boom", {})
    hooks.handlers["/garbage"] = lambda review: (200, b"<html>not json</html>", {})
    hooks.handlers["/uid"] = lambda review: review_answer({**review, "request": {"uid": "someone-else"}})
    hooks.handlers["/redirect"] = lambda review: (302, b"", {"Location": hooks.url("/allow")})
    hooks.handlers["/kind"] = lambda review: (200, json.dumps({"apiVersion": "v1", "kind": "Status"}).encode(), {})
    hook = webhook(hooks, "failing", path, failurePolicy=policy, timeoutSeconds=1)
    if failure == "refused":
        hook["clientConfig"]["url"] = _refused_url()
    if failure == "tls":
        hook["clientConfig"]["caBundle"] = base64.b64encode(_other_ca(hooks)).decode()
    for path_, kind in ((VWC, "validating"), (MWC, "mutating")):
        configure(kube, path_, f"fail-{kind}", hook)
        name = f"f-{failure}-{policy}-{kind}".lower()
        status, _, body = raw(kube, "POST", cm_path(), configmap(name))
        if policy == "Ignore":
            assert status == 201, body
            assert stored(kube, name) is not None
        else:
            assert status == 500, body
            assert body["reason"] == "InternalError"
            assert body["message"].startswith('Internal error occurred: failed calling webhook '
                                              '"failing.test.keyqueue.dev": ')
            assert text in body["message"], body["message"]
            assert stored(kube, name) is None
        assert raw(kube, "DELETE", f"{path_}/fail-{kind}")[0] == 200
    assert "/allow" not in hooks.paths_called()  # the redirect was not followed


def _other_ca(hooks: WebhookServer) -> bytes:
    from .webhook_server import make_certs
    ca, _, _ = make_certs(hooks.ca_cert.parent / "other")
    return ca.read_bytes()


def test_dry_run_reaches_webhooks_without_side_effects(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/m"] = lambda review: review_answer(review, **json_patch(
        [{"op": "add", "path": "/data/m", "value": "1"}]))
    configure(kube, MWC, "dry", webhook(hooks, "m", "/m", sideEffects="NoneOnDryRun"))
    status, _, body = raw(kube, "POST", cm_path() + "?dryRun=All", configmap("dry", seed="0"))
    assert status == 201 and body["data"] == {"seed": "0", "m": "1"}
    assert hooks.reviews("/m")[0]["request"]["dryRun"] is True
    assert stored(kube, "dry") is None


# ---------------------------------------------------------------------------------------------- services
def test_a_service_reference_is_reached_at_its_configured_address(kube: TestAPIServer,
                                                                    hooks: WebhookServer) -> None:
    hook = webhook(hooks, "svc", "/", clientConfig={"service": {"namespace": NS, "name": "hook", "path": "/svc"},
                                                    "caBundle": hooks.ca_bundle})
    configure(kube, VWC, "svc", hook)
    status, _, body = raw(kube, "POST", cm_path(), configmap("svc-1"))
    assert status == 500 and 'Post "https://hook.wh.svc:443/svc?timeout=10s": no endpoints available for service ' \
        '"hook"' in body["message"]
    kube.registry.admission.set_service_address(NS, "hook", 443, ("127.0.0.1", hooks.port))
    assert raw(kube, "POST", cm_path(), configmap("svc-2"))[0] == 201
    assert [r["request"]["name"] for r in hooks.reviews("/svc")] == ["svc-2"]
    # the certificate is checked for the Service's name: another service at the same address fails
    kube.registry.admission.set_service_address(NS, "other", 443, ("127.0.0.1", hooks.port))
    hook["clientConfig"]["service"]["name"] = "other"
    configure(kube, VWC, "svc-other", {**hook, "name": "other.test.keyqueue.dev"})
    status, _, body = raw(kube, "POST", cm_path(), configmap("svc-3"))
    assert status == 500 and "tls: failed to verify certificate" in body["message"], body


# ---------------------------------------------------------------------------------------------- concurrency
def test_a_hanging_webhook_delays_only_its_own_requests(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/hang"] = hooks.hang
    configure(kube, VWC, "hanging", webhook(hooks, "hang", "/hang", timeoutSeconds=30))
    results: list[int] = []
    writers = [threading.Thread(target=lambda i=i: results.append(raw(kube, "POST", cm_path(),
                                                                      configmap(f"slow-{i}"))[0]))
               for i in range(20)]  # more than the server's storage threads
    for writer in writers:
        writer.start()
    for _ in writers:
        assert hooks.hanging.acquire(timeout=30)  # every write is waiting for the webhook
    # meanwhile other resources (and reads of this one) are served: each answered while the webhooks still hang
    for i in range(10):
        lease = {"metadata": {"name": f"l-{i}"}, "spec": {"holderIdentity": "x"}}
        assert raw(kube, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", lease)[0] == 201
        assert raw(kube, "GET", cm_path())[0] == 200
    assert not hooks.release.is_set() and not results
    hooks.release.set()
    for writer in writers:
        writer.join(30)
    assert results == [201] * 20
    pool = kube.server._executor  # the threads started beyond the bound while the webhooks hung have ended
    assert pool is not None
    eventually(lambda: len(pool._threads) <= kube.server.storage_threads, timeout=10)


def test_a_timeout_ends_the_wait(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/hang"] = hooks.hang
    configure(kube, VWC, "short", webhook(hooks, "short", "/hang", timeoutSeconds=1))
    status, _, body = raw(kube, "POST", cm_path(), configmap("timed-out"))
    assert status == 500 and "context deadline exceeded" in body["message"]
    assert not hooks.release.is_set()  # answered while the webhook still hangs: its timeout ended the wait


def test_configurations_written_by_another_server_take_effect(kube: TestAPIServer, hooks: WebhookServer) -> None:
    hooks.handlers["/deny"] = lambda review: review_answer(review, False)
    # written straight to storage (as another server on the same etcd would): this server's watch brings it in
    backend = kube.registry.backend
    key = kube.registry.key(VALIDATING_WEBHOOK_CONFIGURATIONS, None, "elsewhere")
    obj = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "elsewhere", "uid": "u"},
           "webhooks": [{**webhook(hooks, "elsewhere", "/deny"), "failurePolicy": "Fail", "timeoutSeconds": 5}]}
    assert backend.create(key, json.dumps(obj).encode()).succeeded
    attempts = iter(range(1000))
    eventually(lambda: raw(kube, "POST", cm_path(), configmap(f"late-{next(attempts)}"))[0] == 400, timeout=10)
