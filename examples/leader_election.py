"""Three replicas of one controller with leader election on a Lease: only the leader reconciles.

Each replica has its own informer and queue (warm on the standbys) and campaigns for the Lease `default/demo`.
The leader reconciles every ConfigMap; then it is stopped (releasing the Lease) and a standby takes over and
reconciles what changes next. The replicas share one process here so that the program runs anywhere; in a cluster
each is a pod (`keyqueue-lab failover` runs them as processes and SIGKILLs the leader). Run it with
`.venv/bin/python examples/leader_election.py`.
"""

import threading

from kubernetes import client

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.leaderelection import LeaderElector

reconciled: dict[str, set[str]] = {}  # ConfigMap name -> replicas that reconciled it
changed = threading.Condition()


def replica(api_client: client.ApiClient, identity: str) -> tuple[keyqueue.Controller[str], Informer]:
    informer = Informer.for_config_maps(api_client, "default")

    def reconcile(key: str) -> None:
        with changed:
            reconciled.setdefault(key.split("/")[1], set()).add(identity)
            changed.notify_all()

    elector = LeaderElector(api_client, name="demo", namespace="default", identity=identity,
                            lease_duration=2.0, renew_deadline=1.5, retry_period=0.25,
                            on_started_leading=lambda: print(f"{identity} leads"))
    controller = keyqueue.Controller(reconcile, name=identity, leader_election=elector)
    informer.add_event_handler(on_add=lambda obj: controller.queue.add(meta_namespace_key(obj)))
    return controller, informer


def wait_for(name: str) -> str:
    with changed:
        if not changed.wait_for(lambda: name in reconciled, 30):
            raise SystemExit(f"{name} was not reconciled within 30 s")
        return ", ".join(sorted(reconciled[name]))


with TestAPIServer("memory") as server, server.api_client() as api_client:
    api = client.CoreV1Api(api_client)
    replicas = [replica(api_client, f"replica-{i}") for i in range(3)]
    for controller, informer in replicas:
        informer.start()
        if not informer.wait_for_cache_sync(30):
            raise SystemExit("the informer's cache did not sync within 30 s")
        controller.start()
    api.create_namespaced_config_map("default", {"metadata": {"name": "first"}})
    first = wait_for("first")
    print(f"first reconciled by {first}")  # one replica: the leader
    leader = next(c for c, _ in replicas if c.name == first)
    leader.stop()  # stops its workers, then its elector, which releases the Lease
    api.create_namespaced_config_map("default", {"metadata": {"name": "second"}})
    second = wait_for("second")
    print(f"second reconciled by {second}")  # one replica: the new leader
    assert first != second and "," not in first + second
    for controller, informer in replicas:
        controller.stop()
        informer.stop()
print("one leader at a time")
