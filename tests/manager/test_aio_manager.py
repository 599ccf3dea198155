"""keyqueue.aio.Manager against the test API server: coroutine reconciles wired by For/Owns, a raising reconcile
retried, leader election released at stop, metrics and probes."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from typing import Any

import pytest
from kubernetes import client

import keyqueue.aio
from keyqueue.informer.aio import Informer as AioInformer
from keyqueue.testing import aeventually

pytest.importorskip("aiohttp")


def test_the_asyncio_manager_reconciles_owned_objects_and_releases_its_lease(
        kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    calls: Counter[str] = Counter()
    failures = Counter({f"{kube_namespace}/flaky": 2})

    async def main() -> None:
        mgr = keyqueue.aio.Manager(kube_api_client, namespace=kube_namespace, leader_election="aio-lease",
                                   metrics_port=0, health_port=0)

        @mgr.controller(for_="v1/configmaps", owns=["v1/secrets"])
        async def reconcile(key: str) -> None:
            calls[key] += 1
            if failures[key] > 0:
                failures[key] -= 1
                raise RuntimeError("planted")

        assert isinstance(mgr.informer("v1/secrets"), AioInformer)
        parent = await asyncio.to_thread(core.create_namespaced_config_map, kube_namespace,
                                         {"metadata": {"name": "parent"}})
        async with mgr:
            async def synced() -> bool:
                return calls[f"{kube_namespace}/parent"] == 1
            await aeventually(synced)
            ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": parent.metadata.uid,
                   "controller": True}
            await asyncio.to_thread(core.create_namespaced_secret, kube_namespace,
                                    {"metadata": {"name": "child", "ownerReferences": [ref]}})
            await asyncio.to_thread(core.create_namespaced_config_map, kube_namespace,
                                    {"metadata": {"name": "flaky"}})

            async def reconciled() -> bool:
                return calls[f"{kube_namespace}/parent"] == 2 and calls[f"{kube_namespace}/flaky"] == 3
            await aeventually(reconciled, timeout=30)
            status, body = await asyncio.to_thread(get, f"http://127.0.0.1:{mgr.health_port}/readyz")
            assert (status, body) == (200, "ok\n")
            _, text = await asyncio.to_thread(get, f"http://127.0.0.1:{mgr.metrics_port}/metrics")
            assert 'controller_runtime_reconcile_errors_total{controller="configmap"} 2.0' in text
            assert 'leader_election_master_status{name="aio-lease"} 1.0' in text
            lease = await asyncio.to_thread(client.CoordinationV1Api(kube_api_client).read_namespaced_lease,
                                            "aio-lease", kube_namespace)
            assert lease.spec.holder_identity == mgr.elector.identity  # type: ignore[union-attr]
        assert mgr.alive() == (False, "not running")
        lease = await asyncio.to_thread(client.CoordinationV1Api(kube_api_client).read_namespaced_lease,
                                        "aio-lease", kube_namespace)
        assert not lease.spec.holder_identity  # released by stop()

    asyncio.run(main())


def get(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_asyncio_leader_election_takes_an_asyncio_elector(kube_api_client: client.ApiClient) -> None:
    from keyqueue.leaderelection import LeaderElector

    threaded = LeaderElector(kube_api_client, name="x", namespace="default", identity="me")
    with pytest.raises(TypeError, match="leader_election"):
        keyqueue.aio.Manager(kube_api_client, leader_election=threaded)  # type: ignore[arg-type]
