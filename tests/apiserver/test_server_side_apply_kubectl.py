"""``kubectl apply --server-side`` and ``kubectl diff --server-side`` against the test API server: the vendored
prometheus-operator CRDs (the project's documented install, CRDs too large for client-side apply included), a
ConfigMap and a Deployment with a second field manager's conflict, ``--force-conflicts``, and the diff."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import EtcdProcess, TestAPIServer
from keyqueue.apiserver.objects import CRDS

from .conftest import Kubectl, unique
from .test_real_crds import _crds

pytestmark = [pytest.mark.etcd, pytest.mark.kubectl]


@pytest.fixture(scope="module")
def ssa_server(etcd_proc: EtcdProcess) -> Iterator[TestAPIServer]:
    """A server of this module's own, under its own etcd prefix (the CRDs stay out of the session server)."""
    with TestAPIServer("etcd", etcd=etcd_proc, prefix=f"/{unique('ssa')}") as s:
        yield s


@pytest.fixture(scope="module")
def kc(kubectl_path: str, ssa_server: TestAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    home = tmp_path_factory.mktemp("kubectl-ssa")
    return Kubectl(kubectl_path, ssa_server.write_kubeconfig(home / "kubeconfig"), home)


def test_prometheus_operator_crds_apply_server_side(kc: Kubectl, ssa_server: TestAPIServer, tmp_path: Path) -> None:
    crds = _crds(kc, tmp_path, "prometheus-operator")
    path = tmp_path / "crds.yaml"
    path.write_text("\n---\n".join(map(json.dumps, crds)))
    out = kc.run("apply", "--server-side", "-f", str(path)).stdout
    assert out.count("serverside-applied") == len(crds), out
    for crd in crds:
        kvs, _ = ssa_server.backend.range(ssa_server.registry.key(CRDS, None, crd["metadata"]["name"]))
        stored = json.loads(kvs[0].value)
        (entry,) = stored["metadata"]["managedFields"]
        assert entry["manager"] == "kubectl" and entry["operation"] == "Apply", entry
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (stored["metadata"].get("annotations") or {})
    # applying the same files again changes nothing
    again = kc.run("apply", "--server-side", "-f", str(path)).stdout
    assert again.count("serverside-applied") == len(crds), again
    resources = kc.run("api-resources", "--api-group=monitoring.coreos.com", "-o", "name").stdout.split()
    assert "prometheuses.monitoring.coreos.com" in resources


def _configmap(name: str, namespace: str, value: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                       "data": {"key": value}})


def _deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}}


def test_conflicts_force_and_diff(kc: Kubectl) -> None:
    ns = unique("ssa")
    kc.run("create", "namespace", ns)
    try:
        out = kc.run("apply", "--server-side", "-f", "-", input=_configmap("cm", ns, "one")).stdout
        assert "configmap/cm serverside-applied" in out, out
        err = kc.fail("apply", "--server-side", "--field-manager=other", "-f", "-", input=_configmap("cm", ns, "two"))
        assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.key' in err, err
        out = kc.run("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-",
                     input=_configmap("cm", ns, "two")).stdout
        assert "serverside-applied" in out
        assert kc.run("get", "configmap", "cm", "-n", ns, "-o", "jsonpath={.data.key}").stdout == "two"

        deploy = json.dumps(_deployment("web", ns, 2))
        kc.run("apply", "--server-side", "-f", "-", input=deploy)
        err = kc.fail("apply", "--server-side", "--field-manager=other", "-f", "-",
                      input=json.dumps(_deployment("web", ns, 3)))
        assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas' in err, err
        # kubectl diff --server-side: a dry-run apply; exit code 1 with the change shown, nothing stored
        diff = kc.run("diff", "--server-side", "-f", "-", input=json.dumps(_deployment("web", ns, 4)), check=False)
        assert diff.returncode == 1, diff.stderr
        assert "-  replicas: 2" in diff.stdout and "+  replicas: 4" in diff.stdout, diff.stdout
        assert kc.run("get", "deployment", "web", "-n", ns, "-o", "jsonpath={.spec.replicas}").stdout == "2"
        same = kc.run("diff", "--server-side", "-f", "-", input=deploy, check=False)
        assert same.returncode == 0 and same.stdout == "", same.stdout
        shown = kc.run("get", "deployment", "web", "-n", ns, "-o", "yaml", "--show-managed-fields").stdout
        assert "operation: Apply" in shown and "manager: kubectl" in shown, shown
    finally:
        kc.run("delete", "namespace", ns, "--wait=false")


def test_client_side_apply_moves_to_server_side(kc: Kubectl) -> None:
    """An object kubectl applied client-side takes ``kubectl apply --server-side`` with a changed value without a
    conflict (kube's last-applied manager), and its last-applied annotation follows; a field someone else changed
    since still conflicts."""
    ns = unique("csa")
    kc.run("create", "namespace", ns)
    try:
        kc.run("apply", "-f", "-", input=_configmap("moving", ns, "one"))
        out = kc.run("apply", "--server-side", "-f", "-", input=_configmap("moving", ns, "two")).stdout
        assert "serverside-applied" in out, out
        got = json.loads(kc.run("get", "configmap", "moving", "-n", ns, "-o", "json").stdout)
        assert got["data"] == {"key": "two"}
        last = json.loads(got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
        assert last["data"] == {"key": "two"}
        kc.run("apply", "-f", "-", input=_configmap("edited", ns, "one"))
        kc.run("patch", "configmap", "edited", "-n", ns, "--type=merge", "-p", '{"data":{"key":"by-hand"}}')
        err = kc.fail("apply", "--server-side", "-f", "-", input=_configmap("edited", ns, "two"))
        assert 'conflict with "kubectl-patch" using v1: .data.key' in err, err
    finally:
        kc.run("delete", "namespace", ns, "--wait=false")
