"""Real CRDs (cert-manager, prometheus-operator, gateway-api; vendored under ``data/crds``) applied with kubectl,
and their objects answered as kube answers them: RE2 patterns, JSONPath printer columns, a CRD list over 4 MiB."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import EtcdProcess, TestAPIServer
from keyqueue.apiserver.objects import CRDS

from .conftest import Kubectl, unique

pytestmark = [pytest.mark.etcd, pytest.mark.kubectl]

DATA = Path(__file__).parent / "data" / "crds"
SETS = ("cert-manager", "prometheus-operator", "gateway-api")
#: kube's limit on all annotations of an object: a CRD whose JSON is larger cannot carry kubectl apply's
#: last-applied-configuration annotation, so it is created (on kube as here).
MAX_ANNOTATIONS = 256 * 1024


def _crds(kc: Kubectl, work: Path, name: str) -> list[dict[str, Any]]:
    """The CRDs of one vendored set, read by kubectl itself (PyYAML does not read them all: YAML 1.1's ``=``)."""
    path = work / f"{name}.yaml"
    path.write_bytes(gzip.decompress((DATA / f"{name}.yaml.gz").read_bytes()))
    text = kc.run("create", "--dry-run=client", "-o", "json", "-f", str(path)).stdout
    decoder, pos, items = json.JSONDecoder(), 0, []
    while text[pos:].strip():  # one JSON document per object, one after the other
        pos += len(text[pos:]) - len(text[pos:].lstrip())
        item, pos = decoder.raw_decode(text, pos)
        items.append(item)
    return [d for d in items if d.get("kind") == "CustomResourceDefinition"]


@pytest.fixture(scope="module")
def crd_server(etcd_proc: EtcdProcess) -> Iterator[TestAPIServer]:
    """A server of this module's own, under its own etcd prefix (these CRDs stay out of the session server)."""
    with TestAPIServer("etcd", etcd=etcd_proc, prefix=f"/{unique('crds')}") as s:
        yield s


@pytest.fixture(scope="module")
def kc(kubectl_path: str, crd_server: TestAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    home = tmp_path_factory.mktemp("kubectl-crds")
    return Kubectl(kubectl_path, crd_server.write_kubeconfig(home / "kubeconfig"), home)


@pytest.fixture(scope="module")
def installed(kc: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every CRD installed as its project documents it: ``kubectl apply`` (client-side), ``kubectl create`` for
    those too large for apply's annotation."""
    work = tmp_path_factory.mktemp("crd-files")
    names: list[str] = []
    small: list[dict[str, Any]] = []
    large: list[dict[str, Any]] = []
    for name in SETS:
        for crd in _crds(kc, work, name):
            names.append(crd["metadata"]["name"])
            (large if len(json.dumps(crd)) > MAX_ANNOTATIONS else small).append(crd)
    assert len(names) == 26 and large
    for verb, docs in (("apply", small), ("create", large)):
        path = work / f"{verb}.yaml"
        path.write_text("\n---\n".join(map(json.dumps, docs)))  # JSON documents are YAML documents
        out = kc.run(verb, "-f", str(path)).stdout
        assert out.count("customresourcedefinition.apiextensions.k8s.io/") == len(docs), out
    return names


def test_all_crds_install_and_list(kc: Kubectl, installed: list[str], crd_server: TestAPIServer) -> None:
    listed = kc.run("get", "crd", "-o", "name").stdout.split()
    assert sorted(listed) == sorted(f"customresourcedefinition.apiextensions.k8s.io/{n}" for n in installed)
    kvs, _ = crd_server.backend.range(crd_server.registry.collection_prefix(CRDS, None))
    assert sum(len(kv.value) for kv in kvs) > 4 * 1024 * 1024  # the list that answered 500 before
    resources = kc.run("api-resources", "--api-group=monitoring.coreos.com", "-o", "name").stdout.split()
    assert "prometheusrules.monitoring.coreos.com" in resources


def test_large_crd_refuses_client_side_apply_as_kube_does(kc: Kubectl, installed: list[str],
                                                          tmp_path: Path) -> None:
    crd = next(c for c in _crds(kc, tmp_path, "prometheus-operator")
               if c["metadata"]["name"].startswith("prometheuses."))
    path = tmp_path / "prometheuses.json"
    path.write_text(json.dumps(crd))
    err = kc.fail("apply", "-f", str(path))
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in err, err


def _apply(kc: Kubectl, obj: dict[str, Any], ok: bool = True) -> str:
    doc = json.dumps(obj)
    return kc.run("apply", "-f", "-", input=doc).stdout if ok else kc.fail("apply", "-f", "-", input=doc)


@pytest.fixture
def kns(kc: Kubectl, installed: list[str]) -> Iterator[str]:
    name = unique("crdns")
    kc.run("create", "namespace", name)
    yield name
    kc.run("delete", "namespace", name, "--wait=false", check=False)


def test_cert_manager_issuer_certificate_and_ready_column(kc: Kubectl, kns: str) -> None:
    issuer = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
              "metadata": {"name": "selfsigned", "namespace": kns}, "spec": {"selfSigned": {}}}
    assert "issuer.cert-manager.io/selfsigned created" in _apply(kc, issuer)
    cert = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "web", "namespace": kns},
            "spec": {"secretName": "web-tls", "dnsNames": ["web.example.com"],
                     "issuerRef": {"name": "selfsigned", "kind": "Issuer"}}}
    assert "certificate.cert-manager.io/web created" in _apply(kc, cert)
    bad = {**cert, "metadata": {"name": "bad", "namespace": kns}, "spec": {"dnsNames": ["x"], "issuerRef": {}}}
    err = _apply(kc, bad, ok=False)
    assert 'The Certificate "bad" is invalid' in err and "spec.secretName: Required value" in err, err

    header, row = kc.run("get", "certificates", "-n", kns, "-o", "wide").stdout.splitlines()
    assert header.split() == ["NAME", "READY", "SECRET", "ISSUER", "STATUS", "EXPIRATION", "AGE"], header

    def cell(name: str, following: str) -> str:
        return row[header.index(name):header.index(following)].strip()

    # no status yet: READY, STATUS and EXPIRATION are empty, not an error
    assert [cell("READY", "SECRET"), cell("SECRET", "ISSUER"), cell("ISSUER", "STATUS"), cell("STATUS", "AGE")] == [
        "", "web-tls", "selfsigned", ""], row
    status = {"status": {"notAfter": "2030-01-01T00:00:00Z", "conditions": [
        {"type": "Issuing", "status": "False", "reason": "Done", "message": "issued"},
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "Certificate is up to date"}]}}
    kc.run("patch", "certificate", "web", "-n", kns, "--subresource=status", "--type=merge", "-p",
           json.dumps(status))
    row = kc.run("get", "certificates", "-n", kns, "--no-headers").stdout.split()
    assert row[:3] == ["web", "True", "web-tls"], row
    wide = kc.run("get", "certificate", "web", "-n", kns, "-o", "wide", "--no-headers").stdout
    assert "Certificate is up to date" in wide and "2030-01-01T00:00:00Z" in wide, wide


def test_prometheus_rule_go_patterns(kc: Kubectl, kns: str) -> None:
    def rule(name: str, strategy: str) -> dict[str, Any]:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                "metadata": {"name": name, "namespace": kns},
                "spec": {"groups": [{"name": "g", "partial_response_strategy": strategy,
                                     "rules": [{"alert": "Up", "expr": "up == 0"}]}]}}

    assert "created" in _apply(kc, rule("abort", "abort"))
    assert "created" in _apply(kc, rule("warn-upper", "WARN"))
    err = _apply(kc, rule("never", "never"), ok=False)
    assert ('spec.groups[0].partial_response_strategy: Invalid value: "never": '
            "spec.groups[0].partial_response_strategy in body should match '^(?i)(abort|warn)?$'") in err, err
    err = _apply(kc, rule("newline", "abort\n"), ok=False)  # Go's $ is the end of the text, not before a newline
    assert "should match '^(?i)(abort|warn)?$'" in err, err


def test_alertmanager_config_mid_pattern_flags(kc: Kubectl, kns: str) -> None:
    def config(name: str, month: str) -> dict[str, Any]:
        return {"apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "AlertmanagerConfig",
                "metadata": {"name": name, "namespace": kns},
                "spec": {"muteTimeIntervals": [{"name": "m", "timeIntervals": [
                    {"months": [month], "weekdays": ["Monday:friday"]}]}]}}

    assert "created" in _apply(kc, config("march", "MARCH"))
    err = _apply(kc, config("smarch", "smarch"), ok=False)
    assert 'spec.muteTimeIntervals[0].timeIntervals[0].months[0]: Invalid value: "smarch"' in err, err


def test_gateway_class_pattern(kc: Kubectl, installed: list[str]) -> None:
    name = unique("gc")
    ok = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": name},
          "spec": {"controllerName": "example.net/gateway-controller"}}
    assert f"gatewayclass.gateway.networking.k8s.io/{name} created" in _apply(kc, ok)
    bad = {**ok, "metadata": {"name": f"{name}-bad"}, "spec": {"controllerName": "Not A Domain"}}
    err = _apply(kc, bad, ok=False)
    assert 'spec.controllerName: Invalid value: "Not A Domain": spec.controllerName in body should match' in err
    kc.run("delete", "gatewayclass", name)
