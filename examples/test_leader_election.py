"""Testing leader election with two replicas of one controller, with keyqueue's pytest plugin (run:
`.venv/bin/python -m pytest examples/test_leader_election.py`).

Both replicas watch the test's namespace and campaign for one Lease in it; only the leader reconciles. When the
leader stops (releasing the Lease), the other takes over and reconciles what changes next.
"""

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

import keyqueue
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.leaderelection import LeaderElector
from keyqueue.testing import eventually


class Replica:
    """One replica: its own informer, queue and elector; `reconciled` lists the ConfigMaps it reconciled."""

    def __init__(self, api_client: client.ApiClient, namespace: str, identity: str) -> None:
        self.identity = identity
        self.reconciled: list[str] = []
        self.lock = threading.Lock()
        self.informer = Informer.for_config_maps(api_client, namespace)
        # client-go's lease timings: a leader stalled by a busy test machine keeps its Lease; a stopped leader
        # releases it, and the standby, trying every retry_period, takes it at once.
        elector = LeaderElector(api_client, name="my-controller", namespace=namespace, identity=identity,
                                lease_duration=15.0, renew_deadline=10.0, retry_period=0.1)
        self.controller = keyqueue.Controller(self.reconcile, name=identity, leader_election=elector)
        self.informer.add_event_handler(on_add=lambda obj: self.controller.queue.add(meta_namespace_key(obj)))

    def reconcile(self, key: str) -> None:
        with self.lock:
            self.reconciled.append(key.split("/")[1])

    def start(self) -> None:
        self.informer.start()
        assert self.informer.wait_for_cache_sync(30)
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()  # stops its workers, then its elector, which releases the Lease
        self.informer.stop()


@pytest.fixture
def replicas(kube_api_client: client.ApiClient, kube_namespace: str) -> Iterator[list[Replica]]:
    replicas = [Replica(kube_api_client, kube_namespace, f"replica-{i}") for i in range(2)]
    for replica in replicas:
        replica.start()
    yield replicas
    for replica in replicas:
        replica.stop()


def holder(api_client: client.ApiClient, namespace: str) -> str | None:
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease("my-controller", namespace)
    return lease.spec.holder_identity or None


def test_one_leader_at_a_time_and_a_failover(replicas: list[Replica], kube_api_client: client.ApiClient,
                                             kube_namespace: str) -> None:
    api = client.CoreV1Api(kube_api_client)
    api.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "first"}})
    leader = eventually(lambda: next((r for r in replicas if "first" in r.reconciled), None), timeout=30)
    standby = next(r for r in replicas if r is not leader)
    assert holder(kube_api_client, kube_namespace) == leader.identity
    assert standby.reconciled == []  # it watches, its queue is warm, but it does not reconcile

    leader.stop()
    eventually(lambda: holder(kube_api_client, kube_namespace) == standby.identity, timeout=30)
    api.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "second"}})
    eventually(lambda: "second" in standby.reconciled, timeout=30)
    assert "second" not in leader.reconciled
