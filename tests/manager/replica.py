"""One manager replica in its own process, for the failover test: ``python -m tests.manager.replica ...``.

A :class:`keyqueue.Manager` with one controller over ConfigMaps of ``--namespace``, elected on ``--lease``
(or, with ``--no-election``, reconciling without leader election: the control that must make the overlap check
fire). Prints JSON lines on stdout, each with times of ``time.monotonic()`` (one clock for every process of the
machine): ``ready`` once started, and ``reconciled`` (``key``, ``start``, ``end``) for every reconcile. SIGTERM
stops the manager (releasing the Lease); the process then exits 0. ``--aio`` runs a :class:`keyqueue.aio.Manager`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config

import keyqueue.aio
from keyqueue import Manager
from keyqueue.leaderelection import ElectionConfig

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--lease", required=True)
    p.add_argument("--no-election", action="store_true")
    p.add_argument("--aio", action="store_true", help="a keyqueue.aio.Manager (coroutine reconcile)")
    args = p.parse_args()

    conf = client.Configuration()
    kube_config.load_kube_config(config_file=args.kubeconfig, client_configuration=conf)
    election = None if args.no_election else ElectionConfig.check(
        name=args.lease, namespace=args.namespace, identity=args.identity, lease_duration=3.0, renew_deadline=2.0,
        retry_period=0.25, release_on_cancel=True)
    if args.aio:
        return asyncio.run(aio_main(client.ApiClient(conf), args, election))
    mgr = Manager(client.ApiClient(conf), namespace=args.namespace, leader_election=election, stop_timeout=10)

    def reconcile(key: str) -> None:
        start = time.monotonic()
        time.sleep(0.01)  # the work: holds the key long enough for an overlap to be seen
        emit("reconciled", key=key, start=start, end=time.monotonic())

    mgr.add_controller(reconcile, for_="v1/configmaps", workers=2)

    def report_ready() -> None:  # run() starts the manager after installing its signal handlers
        while not mgr.alive()[0]:
            time.sleep(0.01)
        emit("ready", t=time.monotonic())

    threading.Thread(target=report_ready, daemon=True).start()
    mgr.run()  # until SIGTERM
    emit("stopped", t=time.monotonic())
    return 0


async def aio_main(api_client: client.ApiClient, args: argparse.Namespace, election: ElectionConfig | None) -> int:
    mgr = keyqueue.aio.Manager(api_client, namespace=args.namespace, leader_election=election, stop_timeout=10)

    async def reconcile(key: str) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.01)
        emit("reconciled", key=key, start=start, end=time.monotonic())

    mgr.add_controller(reconcile, for_="v1/configmaps", workers=2)

    async def report_ready() -> None:  # run() starts the manager after installing its signal handlers
        while not mgr.alive()[0]:
            await asyncio.sleep(0.01)
        emit("ready", t=time.monotonic())

    ready = asyncio.create_task(report_ready())
    await mgr.run()  # until SIGTERM
    await ready
    emit("stopped", t=time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main())
