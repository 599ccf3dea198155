"""Three manager replicas (processes) on one Lease, against the test API server: SIGKILL the leader while
ConfigMaps keep arriving. Never two replicas reconciling at once (:func:`find_overlaps` over every reconcile's
interval on the machine-wide ``time.monotonic()``), and nothing lost (every ConfigMap is reconciled after the kill
too). The control runs the same replicas without leader election: the overlap check must fire."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer
from keyqueue.leaderelection import Interval, find_overlaps
from keyqueue.testing import eventually

ROOT = Path(__file__).resolve().parents[2]


class Replicas:
    """Replica processes (tests/manager/replica.py) and what they reported."""

    def __init__(self, apiserver: TestAPIServer, namespace: str, *extra: str) -> None:
        self.lease = f"lease-{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for i in range(3):
            identity = f"replica-{i}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.manager.replica", "--kubeconfig", str(apiserver.kubeconfig_path),
                 "--namespace", namespace, "--identity", identity, "--lease", self.lease, *extra],
                cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            self.procs[identity] = proc
            threading.Thread(target=self._read, args=(identity, proc), daemon=True).start()

    def _read(self, identity: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            event["who"] = identity
            with self.lock:
                self.events.append(event)

    def of(self, kind: str, who: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind and (who is None or e["who"] == who)]

    def reconciled(self, after: float = 0.0) -> set[str]:
        return {e["key"].split("/")[1] for e in self.of("reconciled") if e["start"] > after}

    def intervals(self) -> list[Interval]:
        return [Interval(e["who"], e["start"], e["end"]) for e in self.of("reconciled")]

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


@pytest.fixture
def start_replicas(kube_apiserver: TestAPIServer, kube_namespace: str) -> Iterator[Any]:
    groups: list[Replicas] = []

    def start(*extra: str) -> Replicas:
        group = Replicas(kube_apiserver, kube_namespace, *extra)
        groups.append(group)
        eventually(lambda: len(group.of("ready")) == 3, timeout=60)
        return group

    yield start
    for group in groups:
        group.close()


class Writer:
    """Creates ConfigMaps one after another in a thread (the load) until stopped; ``created`` lists them."""

    def __init__(self, api: client.CoreV1Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.created: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"cm-{i}"
            self.api.create_namespaced_config_map(self.namespace, {"metadata": {"name": name}})
            with self.lock:
                self.created.append(name)
            i += 1
            self.stop.wait(0.01)

    def names(self) -> set[str]:
        with self.lock:
            return set(self.created)

    def finish(self) -> set[str]:
        self.stop.set()
        self.thread.join(30)
        return self.names()


def holder(api_client: client.ApiClient, namespace: str, lease: str) -> str:
    try:
        got = client.CoordinationV1Api(api_client).read_namespaced_lease(lease, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return got.spec.holder_identity or ""


def test_sigkill_the_leader_under_load_never_two_reconciling_nothing_lost(
        start_replicas: Any, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    group: Replicas = start_replicas()
    writer = Writer(client.CoreV1Api(kube_api_client), kube_namespace)
    try:
        first = eventually(lambda: holder(kube_api_client, kube_namespace, group.lease), timeout=30)
        eventually(lambda: len(group.of("reconciled", who=first)) >= 20, timeout=30)
        group.procs[first].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        second = eventually(lambda: (h := holder(kube_api_client, kube_namespace, group.lease)) != first and h,
                            timeout=30)
        eventually(lambda: len([e for e in group.of("reconciled", who=second) if e["start"] > killed_at]) >= 20,
                   timeout=30)
    finally:
        created = writer.finish()
    eventually(lambda: created <= group.reconciled(), timeout=30)  # nothing lost: each one reconciled
    assert find_overlaps(group.intervals()) == []  # never two replicas reconciling at once
    assert {e["who"] for e in group.of("reconciled")} == {first, second}  # the third stood by throughout
    for who, proc in group.procs.items():
        if who != first:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
    assert holder(kube_api_client, kube_namespace, group.lease) == ""  # the last leader released the Lease


def test_control_without_leader_election_the_overlap_check_fires(
        start_replicas: Any, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    group: Replicas = start_replicas("--no-election")
    writer = Writer(client.CoreV1Api(kube_api_client), kube_namespace)
    try:
        eventually(lambda: len({e["who"] for e in group.of("reconciled")}) == 3, timeout=30)
        eventually(lambda: find_overlaps(group.intervals()), timeout=30)
    finally:
        writer.finish()
