"""Access reviews: SelfSubjectAccessReview, SelfSubjectRulesReview and SelfSubjectReview are answered, never
stored (no authorization: everything is allowed; the user is the token's)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl, raw_request


def test_access_review_allows_everything(server: TestAPIServer) -> None:
    with server.api_client() as api_client:
        authz = client.AuthorizationV1Api(api_client)
        for attributes in ({"resourceAttributes": {"verb": "delete", "resource": "configmaps", "namespace": "x"}},
                           {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}):
            review = authz.create_self_subject_access_review({"spec": attributes})
            assert review.status.allowed is True and not review.status.denied
            assert review.status.reason
        rules = authz.create_self_subject_rules_review({"spec": {"namespace": "default"}})
        assert rules.status.resource_rules[0].verbs == ["*"] and rules.status.incomplete is False


def test_subject_review_reports_the_anonymous_user_without_a_token(server: TestAPIServer) -> None:
    with server.api_client() as api_client:
        review = client.AuthenticationV1Api(api_client).create_self_subject_review({})
        assert review.status.user_info.username == "system:anonymous"
        assert review.status.user_info.groups == ["system:unauthenticated"]


@pytest.mark.parametrize("spec, field, message", [
    ({}, "spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes"),
    ({"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/x", "verb": "get"}},
     "spec.nonResourceAttributes", "cannot be specified in combination with resourceAttributes"),
])
def test_malformed_access_review_is_invalid(server: TestAPIServer, spec: dict[str, Any], field: str,
                                            message: str) -> None:
    code, status = raw_request(server, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "POST",
                               {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                                "spec": spec})
    assert code == 422, status
    assert status["reason"] == "Invalid" and message in status["message"]
    assert status["details"]["causes"][0]["field"] == field


def test_reviews_serve_only_create(server: TestAPIServer) -> None:
    base = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    for method, path in (("GET", base), ("GET", base + "/x"), ("DELETE", base + "/x"), ("PUT", base + "/x")):
        code, status = raw_request(server, path, method, {} if method == "PUT" else None)
        assert code == 405, (method, path, status)
        assert status["reason"] == "MethodNotAllowed"
    code, resources = raw_request(server, "/apis/authorization.k8s.io/v1")
    assert code == 200
    assert {r["name"]: r["verbs"] for r in resources["resources"]}["selfsubjectaccessreviews"] == ["create"]
    # nothing was stored: the server's storage holds no review key
    kvs, _ = server.backend.range("/registry/selfsubject", 0)
    assert kvs == []


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_auth_can_i_and_whoami(kubectl: Kubectl) -> None:
    assert kubectl.run("auth", "can-i", "delete", "configmaps", "-n", "kube-system").stdout.strip() == "yes"
    assert kubectl.run("auth", "can-i", "create", "leases.coordination.k8s.io").stdout.strip() == "yes"
    listed = kubectl.run("auth", "can-i", "--list").stdout.splitlines()
    assert listed[0].split()[:2] == ["Resources", "Non-Resource"] and listed[1].split()[0] == "*.*"
    who = json.loads(kubectl.run("auth", "whoami", "-o", "json").stdout)
    assert who["kind"] == "SelfSubjectReview"
    assert who["status"]["userInfo"]["username"] == "system:anonymous"
