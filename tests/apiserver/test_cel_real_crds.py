"""The CEL rules of real CRDs (vendored under ``data/crds``), applied and exercised with kubectl as an operator's
user would: cert-manager's Venafi issuer rule, gateway-api's listener-name and immutability rules."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import Kubectl

pytestmark = [pytest.mark.kubectl]

DATA = Path(__file__).parent / "data" / "crds"


def _document(project: str, crd_name: str) -> str:
    text = gzip.decompress((DATA / f"{project}.yaml.gz").read_bytes()).decode()
    return next(d for d in text.split("\n---\n") if f"\n  name: {crd_name}\n" in d)


@pytest.fixture(scope="module")
def kc(kubectl_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    home = tmp_path_factory.mktemp("kubectl-cel")
    with TestAPIServer("memory") as server:
        kc = Kubectl(kubectl_path, server.write_kubeconfig(home / "kubeconfig"), home)
        crds = home / "crds.yaml"
        crds.write_text("\n---\n".join([_document("cert-manager", "issuers.cert-manager.io"),
                                        _document("gateway-api", "gatewayclasses.gateway.networking.k8s.io"),
                                        _document("gateway-api", "gateways.gateway.networking.k8s.io")]))
        kc.run("apply", "-f", str(crds))
        yield kc


def _apply(kc: Kubectl, obj: dict[str, Any], ok: bool = True) -> str:
    text = json.dumps(obj)
    if ok:
        return kc.run("apply", "-f", "-", input=text).stdout
    return kc.fail("apply", "-f", "-", input=text)


def _issuer(name: str, venafi: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": name, "namespace": "default"},
            "spec": {"venafi": {"zone": "devops\\cert-manager", **venafi}}}


_TPP = {"url": "https://tpp.example.com/vedsdk", "credentialsRef": {"name": "tpp-secret"}}
_CLOUD = {"apiTokenSecretRef": {"name": "cloud-secret", "key": "apikey"}}


def test_cert_manager_issuer_rule(kc: Kubectl) -> None:
    assert "issuer.cert-manager.io/one-venafi created" in _apply(kc, _issuer("one-venafi", {"tpp": _TPP}))
    err = _apply(kc, _issuer("two-venafi", {"tpp": _TPP, "cloud": _CLOUD}), ok=False)
    assert ('The Issuer "two-venafi" is invalid: spec.venafi: Invalid value: "object": exactly one of tpp, cloud, '
            "or ngts must be configured") in err, err
    err = _apply(kc, _issuer("no-venafi", {}), ok=False)
    assert "exactly one of tpp, cloud, or ngts must be configured" in err, err
    names = kc.run("get", "issuers", "-n", "default", "-o", "name").stdout.split()
    assert names == ["issuer.cert-manager.io/one-venafi"]


def _gateway(name: str, listeners: list[str]) -> dict[str, Any]:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": "example",
                     "listeners": [{"name": n, "port": 80 + i, "protocol": "HTTP"} for i, n in enumerate(listeners)]}}


def test_gateway_api_listener_names_must_be_unique(kc: Kubectl) -> None:
    assert "created" in _apply(kc, _gateway("distinct", ["http", "admin"]))
    err = _apply(kc, _gateway("repeated", ["http", "http"]), ok=False)
    assert ('The Gateway "repeated" is invalid: spec.listeners: Invalid value: "array": Listener name must be unique '
            "within the Gateway") in err, err


def test_gateway_api_controller_name_is_immutable(kc: Kubectl) -> None:
    klass = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "example"},
             "spec": {"controllerName": "example.com/gateway-controller"}}
    _apply(kc, klass)
    klass["spec"]["controllerName"] = "example.com/other"
    err = _apply(kc, klass, ok=False)
    assert ('The GatewayClass "example" is invalid: spec.controllerName: Invalid value: "string": field is '
            "immutable") in err, err
    got = json.loads(kc.run("get", "gatewayclass", "example", "-o", "json").stdout)
    assert got["spec"]["controllerName"] == "example.com/gateway-controller"
