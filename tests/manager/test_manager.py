"""keyqueue.Manager (threads) against the test API server: resolution, shared informers, For/Owns/Watches wiring,
predicates, caches, errors in reconcile, metrics and probes, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.manager import UnknownResource, parse_label_selector
from keyqueue.predicates import labels_changed
from keyqueue.testing import eventually

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """A reconcile function that counts keys; ``fail[key]`` makes that many calls raise first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.order: list[str] = []
        self.fail: Counter[str] = Counter()

    def __call__(self, key: str) -> None:
        with self.lock:
            self.calls[key] += 1
            self.order.append(key)
            if self.fail[key] > 0:
                self.fail[key] -= 1
                raise RuntimeError(f"planted failure for {key}")

    def count(self, key: str) -> int:
        with self.lock:
            return self.calls[key]


@pytest.fixture
def mgr(kube_api_client: client.ApiClient, kube_namespace: str) -> Iterator[keyqueue.Manager]:
    m = keyqueue.Manager(kube_api_client, namespace=kube_namespace, metrics_port=0, health_port=0)
    yield m
    m.stop()


def owner_ref(obj: Any, controller: bool = True, kind: str = "ConfigMap") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": obj.metadata.name, "uid": obj.metadata.uid,
            "controller": controller}


def test_an_unknown_resource_is_named_with_close_matches(mgr: keyqueue.Manager) -> None:
    with pytest.raises(UnknownResource, match=r"'v1/configmap'.*did you mean 'v1/configmaps'") as info:
        mgr.resolve("v1/configmap")
    assert info.value.close_matches[0] == "v1/configmaps"
    with pytest.raises(UnknownResource, match=r"'apps/v2/deployments'.*does not serve apps/v2.*'apps/v1/deploy"):
        mgr.informer("apps/v2/deployments")
    with pytest.raises(ValueError, match="group/version/plural"):
        mgr.resolve("configmaps")
    with pytest.raises(UnknownResource, match="v1/secretz"):
        mgr.add_controller(Recorder(), for_="v1/configmaps", owns=("v1/secretz",))
    assert mgr.controllers() == {}  # nothing registered by a failed add_controller
    assert mgr.resolve("apps/v1/deployments").kind == "Deployment"
    assert mgr.resolve("v1/namespaces").namespaced is False


def test_bad_arguments_are_refused(kube_api_client: client.ApiClient, mgr: keyqueue.Manager) -> None:
    with pytest.raises(TypeError, match="leader_election"):
        keyqueue.Manager(kube_api_client, leader_election=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="metrics_port"):
        keyqueue.Manager(kube_api_client, metrics_port=-1)
    with pytest.raises(TypeError, match="coroutine"):
        async def reconcile(key: str) -> None: ...
        mgr.add_controller(reconcile, for_="v1/configmaps")
    with pytest.raises(TypeError, match="owns"):
        mgr.add_controller(Recorder(), for_="v1/configmaps", owns="v1/secrets")  # type: ignore[arg-type]
    mgr.add_controller(Recorder(), for_="v1/configmaps")
    with pytest.raises(ValueError, match="'configmap' exists already"):
        mgr.add_controller(Recorder(), for_="v1/configmaps")


def test_controllers_share_one_informer_and_cache(mgr: keyqueue.Manager, kube_api_client: client.ApiClient,
                                                  kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    a, b = Recorder(), Recorder()
    mgr.add_controller(a, for_="v1/configmaps", name="a")

    @mgr.controller(for_="v1/configmaps", name="b", workers=2)
    def reconcile_b(key: str) -> None:
        b(key)

    assert mgr.informer("v1/configmaps") is mgr.informer("v1/configmaps")
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "x", "labels": {"tier": "web"}}})
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "y", "labels": {"tier": "db"}}})
    with mgr:
        key = f"{kube_namespace}/x"
        eventually(lambda: a.count(key) and b.count(key))
        informer = mgr.informer("v1/configmaps")
        eventually(lambda: informer.stats().watches >= 1)  # the watch opens after the list
        assert (informer.stats().lists, informer.stats().watches) == (1, 1)  # one list and one watch for both
        cache = mgr.cache("v1/configmaps")
        assert cache.get(key)["metadata"]["labels"] == {"tier": "web"}  # type: ignore[index]
        assert cache.get(f"{kube_namespace}/nope") is None
        assert [o["metadata"]["name"] for o in cache.list(namespace=kube_namespace)] == ["x", "y"]
        assert [o["metadata"]["name"] for o in cache.list(label_selector="tier in (db,cache)")] == ["y"]
        assert [o["metadata"]["name"] for o in cache.list(label_selector={"tier": "web"})] == ["x"]
        assert cache.list(namespace="elsewhere") == []
        with pytest.raises(ValueError, match="label_selector"):
            cache.list(label_selector="tier in (")


def test_owns_enqueues_only_the_controller_owner_of_the_primary_kind(
        mgr: keyqueue.Manager, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    rec = Recorder()
    mgr.add_controller(rec, for_="v1/configmaps", owns=("v1/secrets",))
    parent = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "parent"}})
    other = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "other"}})
    with mgr:
        eventually(lambda: rec.count(f"{kube_namespace}/parent") == 1 and rec.count(f"{kube_namespace}/other") == 1)
        # No owner reference, a reference that is not the controller, a controller of another kind: no enqueue.
        core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s0"}})
        core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s1",
                                                                    "ownerReferences": [owner_ref(other, False)]}})
        core.create_namespaced_secret(kube_namespace, {"metadata": {
            "name": "s2", "ownerReferences": [owner_ref(other, True, kind="Pod")]}})
        # The controller reference to a ConfigMap: its owner is reconciled (after the three above: one informer,
        # one worker, events in order).
        core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s3",
                                                                    "ownerReferences": [owner_ref(parent)]}})
        eventually(lambda: rec.count(f"{kube_namespace}/parent") == 2)
        assert rec.count(f"{kube_namespace}/other") == 1
        assert set(rec.calls) == {f"{kube_namespace}/parent", f"{kube_namespace}/other"}


def test_watches_map_keys_and_predicates_filter_updates(mgr: keyqueue.Manager, kube_api_client: client.ApiClient,
                                                       kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    rec = Recorder()

    def for_label(obj: dict[str, Any]) -> list[str]:
        target = (obj["metadata"].get("labels") or {}).get("for")
        return [f"{kube_namespace}/{target}"] if target else []

    mgr.add_controller(rec, for_="v1/configmaps", watches=[("v1/secrets", for_label)], predicates=[labels_changed])
    for name in ("a", "b"):
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": name}})
    key_a, key_b = f"{kube_namespace}/a", f"{kube_namespace}/b"
    with mgr:
        eventually(lambda: rec.count(key_a) == 1 and rec.count(key_b) == 1)
        core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s", "labels": {"for": "b"}}})
        eventually(lambda: rec.count(key_b) == 2)
        core.patch_namespaced_config_map("a", kube_namespace, {"data": {"k": "v"}})  # labels unchanged: filtered
        core.patch_namespaced_config_map("b", kube_namespace, {"metadata": {"labels": {"x": "1"}}})  # passes
        eventually(lambda: rec.count(key_b) == 3)
        assert rec.count(key_a) == 1
        core.patch_namespaced_config_map("a", kube_namespace, {"metadata": {"labels": {"x": "1"}}})
        eventually(lambda: rec.count(key_a) == 2)


def test_a_cluster_scoped_primary_is_keyed_by_name(mgr: keyqueue.Manager, kube_namespace: str) -> None:
    rec = Recorder()
    mgr.add_controller(rec, for_="v1/namespaces")  # watched cluster-wide although the manager has a namespace
    with mgr:
        eventually(lambda: rec.count(kube_namespace) >= 1)
        assert mgr.cache("v1/namespaces").get(kube_namespace) is not None


def test_a_raising_reconcile_is_retried_with_backoff_and_the_worker_lives(
        mgr: keyqueue.Manager, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    rec = Recorder()
    rec.fail[f"{kube_namespace}/bad"] = 3
    mgr.add_controller(rec, for_="v1/configmaps", workers=1)
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "bad"}})
    with mgr:
        eventually(lambda: rec.count(f"{kube_namespace}/bad") == 4)  # 3 failures, then the success
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "good"}})
        eventually(lambda: rec.count(f"{kube_namespace}/good") == 1)  # the one worker still runs
        text = scrape(mgr)
        assert 'controller_runtime_reconcile_errors_total{controller="configmap"} 3.0' in text
        assert 'controller_runtime_reconcile_total{controller="configmap",result="success"} 2.0' in text
        assert 'workqueue_retries_total{name="configmap"} 3.0' in text


def scrape(mgr: keyqueue.Manager) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{mgr.metrics_port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def probe(port: int | None, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_and_probes(kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    mgr = keyqueue.Manager(kube_api_client, namespace=kube_namespace, leader_election="probes", metrics_port=0,
                           health_port=0)
    mgr.add_controller(Recorder(), for_="v1/configmaps", workers=3)
    assert mgr.ready() == (False, "manager not running; cache v1/configmaps not synced; leader election not running")
    with mgr:
        assert probe(mgr.health_port, "/healthz") == (200, "ok\n")
        assert probe(mgr.health_port, "/readyz") == (200, "ok\n")
        assert probe(mgr.health_port, "/other")[0] == 404
        eventually(lambda: 'leader_election_master_status{name="probes"} 1.0' in scrape(mgr))
        text = scrape(mgr)
        for line in ('controller_runtime_max_concurrent_reconciles{controller="configmap"} 3.0',
                     'controller_runtime_active_workers{controller="configmap"} 0.0',
                     'controller_runtime_reconcile_errors_total{controller="configmap"} 0.0',
                     'controller_runtime_reconcile_time_seconds_bucket{controller="configmap",le="0.005"}',
                     'controller_runtime_reconcile_total{controller="configmap",result="success"}',
                     '# TYPE workqueue_depth gauge',
                     'workqueue_adds_total{name="configmap"}',
                     'workqueue_queue_duration_seconds_bucket{',
                     'process_cpu_seconds_total'):
            assert line in text, line
        port = mgr.health_port
    assert mgr.alive() == (False, "not running")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    lease = client.CoordinationV1Api(kube_api_client).read_namespaced_lease("probes", kube_namespace)
    assert not lease.spec.holder_identity  # released at stop
    with pytest.raises(RuntimeError, match="already started"):
        mgr.start()


def test_parse_label_selector() -> None:
    labels = {"a": "1", "b": "2"}
    for selector, expected in (("", True), ("a", True), ("!a", False), ("a=1", True), ("a==2", False),
                               ("c!=1", True), ("a in (1, 3)", True), ("b notin (2)", False), ("a,b=2", True),
                               ("a=1,c", False)):
        assert parse_label_selector(selector)(labels) is expected, selector
    for bad in ("a=", "a in 1", "=1", "a,,b", "a in ()", "a b"):
        with pytest.raises(ValueError, match="label_selector"):
            parse_label_selector(bad)


@pytest.mark.parametrize("shell", ["threads", "aio"])
def test_run_stops_on_sigterm_and_releases_the_lease(shell: str, kube_apiserver: TestAPIServer,
                                                     kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.manager.replica", "--kubeconfig", str(kube_apiserver.kubeconfig_path),
         "--namespace", kube_namespace, "--identity", "solo", "--lease", "solo",
         *(["--aio"] if shell == "aio" else [])],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        assert '"ready"' in proc.stdout.readline()
        leases = client.CoordinationV1Api(kube_api_client)

        def read() -> str:
            try:
                return str(leases.read_namespaced_lease("solo", kube_namespace).spec.holder_identity or "")
            except client.ApiException as exc:
                if exc.status == 404:  # not created yet
                    return ""
                raise

        eventually(lambda: read() == "solo", timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert '"stopped"' in proc.stdout.read()
        assert not read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
