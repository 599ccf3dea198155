"""Real ``kubectl`` against the built-in kinds of the etcd-backed server: ``run``, ``apply``, ``get`` (columns,
``-o wide``, ``get all``), ``scale``, ``explain``, ``describe`` and strict unknown fields."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Kubectl, unique

pytestmark = [pytest.mark.etcd, pytest.mark.kubectl]


@pytest.fixture
def kns(kubectl: Kubectl) -> Iterator[str]:
    name = unique("kk")
    kubectl.run("create", "namespace", name)
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def _deployment(name: str, image: str = "nginx:1.27", **spec: object) -> str:
    return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {
        "selector": {"matchLabels": {"app": name}}, **spec,
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "web", "image": image}]}}}})


def _header(output: str) -> list[str]:
    return output.splitlines()[0].split()


def test_get_shows_kubes_columns(kubectl: Kubectl, kns: str) -> None:
    assert kubectl.run("run", "p1", "--image=busybox", "-n", kns).stdout.strip() == "pod/p1 created"
    out = kubectl.run("get", "pods", "-n", kns).stdout
    assert _header(out) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert out.splitlines()[1].split()[:4] == ["p1", "0/1", "Pending", "0"]
    wide = kubectl.run("get", "pods", "-n", kns, "-o", "wide").stdout
    assert _header(wide)[5:8] == ["IP", "NODE", "NOMINATED"]
    kubectl.run("apply", "-n", kns, "-f", "-", input=_deployment("web", replicas=2))
    out = kubectl.run("get", "deployments", "-n", kns).stdout
    assert _header(out) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert out.splitlines()[1].split()[:4] == ["web", "0/2", "0", "0"]
    everything = kubectl.run("get", "all", "-n", kns).stdout
    assert "pod/p1" in everything and "deployment.apps/web" in everything


def test_apply_scale_and_generation(kubectl: Kubectl, kns: str) -> None:
    assert "created" in kubectl.run("apply", "-n", kns, "-f", "-", input=_deployment("web")).stdout
    assert "configured" in kubectl.run("apply", "-n", kns, "-f", "-",
                                       input=_deployment("web", "nginx:1.28", replicas=3)).stdout
    jsonpath = "jsonpath={.spec.replicas} {.metadata.generation} {.spec.template.spec.containers[0].image}"
    assert kubectl.run("get", "deploy", "web", "-n", kns, "-o", jsonpath).stdout == "3 2 nginx:1.28"
    assert kubectl.run("scale", "deployment", "web", "--replicas=5", "-n", kns).stdout.strip() == \
        "deployment.apps/web scaled"
    assert kubectl.run("get", "deploy", "web", "-n", kns, "-o", jsonpath).stdout == "5 3 nginx:1.28"
    err = kubectl.fail("apply", "-n", kns, "-f", "-", input=_deployment("web").replace(
        '"image"', '"imagee": "x", "image"'))
    assert 'strict decoding error: unknown field "spec.template.spec.containers[0].imagee"' in err
    err = kubectl.fail("apply", "-n", kns, "-f", "-", input=_deployment("web").replace(
        '{"app": "web"}', '{"app": "other"}'))
    assert "spec.selector" in err and "field is immutable" in err


def test_explain_and_describe(kubectl: Kubectl, kns: str) -> None:
    out = kubectl.run("explain", "deployment.spec.replicas").stdout
    assert "KIND:       Deployment" in out and "FIELD: replicas <integer>" in out
    assert "Number of desired pods." in out  # the field's documentation, from the client's models
    out = kubectl.run("explain", "pod.spec.containers.image").stdout
    assert "FIELD: image <string>" in out
    kubectl.run("apply", "-n", kns, "-f", "-", input=_deployment("web"))
    out = kubectl.run("describe", "deployment", "web", "-n", kns).stdout
    assert "Replicas:" in out and "RollingUpdate" in out and "nginx:1.27" in out
    kubectl.run("run", "p1", "--image=busybox", "-n", kns)
    out = kubectl.run("describe", "pod", "p1", "-n", kns).stdout
    assert "Status:       Pending" in out and "QoS Class:        BestEffort" in out


def test_explain_through_openapi_v2(kubectl: Kubectl) -> None:
    out = kubectl.run("explain", "--output=plaintext-openapiv2", "deployment.spec.replicas").stdout
    assert "KIND:     Deployment" in out and "VERSION:  apps/v1" in out and "FIELD:    replicas <integer>" in out
    assert "Number of desired pods." in out
    out = kubectl.run("explain", "--output=plaintext-openapiv2", "pods.spec.containers").stdout
    assert "imagePullPolicy\t<string>" in out and "ports\t<[]Object>" in out


def test_kubectl_create_sends_protobuf_bodies(kubectl: Kubectl, kns: str) -> None:
    """``kubectl create <kind>`` sends protobuf: each kind is decoded into the object the flags describe."""
    def create(*args: str) -> None:
        assert " created" in kubectl.run("create", "-n", kns, *args).stdout

    def get(what: str, path: str) -> Any:
        value: Any = json.loads(kubectl.run("get", what, "-n", kns, "-o", "json").stdout)
        for part in re.findall(r"[^.\[\]]+", path):
            value = value[int(part)] if part.isdigit() else value[part]
        return value

    create("deployment", "web", "--image=nginx:1.27", "--replicas=2", "--port=80")
    spec = get("deploy/web", ".spec")
    assert isinstance(spec, dict) and spec["replicas"] == 2 and spec["selector"] == {"matchLabels": {"app": "web"}}
    container = spec["template"]["spec"]["containers"][0]
    assert (container["name"], container["image"], container["ports"]) == (
        "nginx", "nginx:1.27", [{"containerPort": 80, "protocol": "TCP"}])
    create("service", "nodeport", "svc", "--tcp=80:8080")
    port = get("svc/svc", ".spec.ports[0]")
    assert isinstance(port, dict) and (port["port"], port["targetPort"]) == (80, 8080)
    assert 30000 <= port["nodePort"] <= 32767
    create("secret", "generic", "s", "--from-literal=user=admin")
    assert get("secret/s", ".data") == {"user": "YWRtaW4="}
    create("serviceaccount", "sa")
    create("job", "j", "--image=busybox", "--", "echo", "hi")
    job = get("job/j", ".spec.template.spec")
    assert isinstance(job, dict) and job["containers"][0]["command"] == ["echo", "hi"]
    assert job["restartPolicy"] == "Never"
    create("cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *")
    assert get("cronjob/cj", ".spec.schedule") == "*/5 * * * *"
    create("role", "r", "--verb=get", "--verb=list", "--resource=pods,deployments.apps")
    assert get("role/r", ".rules") == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                                       {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]}]
    create("rolebinding", "rb", "--role=r", "--user=alice")
    assert get("rolebinding/rb", ".roleRef") == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}
    create("pdb", "pdb", "--selector=app=web", "--min-available=50%")
    assert get("pdb/pdb", ".spec.minAvailable") == "50%"
    create("ingress", "ing", "--rule=foo.example.com/bar*=svc:8080", "--class=nginx")
    assert get("ingress/ing", ".spec.rules[0].http.paths[0]") == {
        "backend": {"service": {"name": "svc", "port": {"number": 8080}}}, "path": "/bar", "pathType": "Prefix"}
    out = kubectl.run("get", "deployments", "-n", kns).stdout
    assert out.splitlines()[1].split()[:2] == ["web", "0/2"]


def test_apply_merges_containers_by_name(kubectl: Kubectl, kns: str) -> None:
    """kube's patch merge keys are in the OpenAPI schemas and the server's strategic merge: kubectl apply removes a
    container and an env var that left the manifest, and ``set image`` changes only the image of a Pod."""
    def manifest(containers: list[dict[str, object]]) -> str:
        return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {
            "selector": {"matchLabels": {"app": "w"}},
            "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": containers}}}})

    kubectl.run("apply", "-n", kns, "-f", "-", input=manifest([
        {"name": "a", "image": "x", "env": [{"name": "E1", "value": "1"}, {"name": "E2", "value": "2"}]},
        {"name": "b", "image": "y"}]))
    kubectl.run("apply", "-n", kns, "-f", "-", input=manifest([
        {"name": "a", "image": "x:2", "env": [{"name": "E2", "value": "3"}]}]))
    containers = json.loads(kubectl.run("get", "deploy", "w", "-n", kns, "-o",
                                        "jsonpath={.spec.template.spec.containers}").stdout)
    assert [(c["name"], c["image"], c["env"]) for c in containers] == [("a", "x:2", [{"name": "E2", "value": "3"}])]
    assert containers[0]["imagePullPolicy"] == "Always"  # the stored default, kept by the merge
    kubectl.run("run", "p", "--image=busybox", "-n", kns)
    kubectl.run("set", "image", "pod/p", "p=busybox:2", "-n", kns)
    out = kubectl.run("get", "pod", "p", "-n", kns, "-o",
                      "jsonpath={.spec.containers[0].image} {.spec.containers[0].imagePullPolicy}").stdout
    assert out == "busybox:2 Always"
