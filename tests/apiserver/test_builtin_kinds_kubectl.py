"""Real ``kubectl`` against the built-in kinds of the etcd-backed server: ``run``, ``apply``, ``get`` (columns,
``-o wide``, ``get all``), ``scale``, ``explain``, ``describe`` and strict unknown fields."""

from __future__ import annotations

import json
from collections.abc import Iterator

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
    out = kubectl.run("explain", "--output=plaintext-openapiv2", "pods.spec.containers").stdout
    assert "imagePullPolicy\t<string>" in out and "ports\t<[]Object>" in out
