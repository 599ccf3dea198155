"""One elector in its own process, for the multi-process tests: ``python -m tests.leaderelection.replica ...``.

Prints JSON lines on stdout, each with ``t`` = ``time.monotonic()`` (one clock for all processes of the machine):
``ready``, ``started``, ``stopped``, ``new_leader`` (``who``), ``released`` and, every 10 ms while ``is_leader()``
holds, ``leading`` — the moments at which this replica would act as the leader. SIGTERM stops the elector (with
release). ``--unsafe-renew-deadline`` is the broken control: it overrides the checked configuration with a
renew deadline that is not below the lease duration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config

from keyqueue._signals import recorded_signals
from keyqueue.leaderelection import LeaderElector

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.monotonic(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--lease", required=True)
    p.add_argument("--namespace", default="default")
    p.add_argument("--lease-duration", type=float, default=2.0)
    p.add_argument("--renew-deadline", type=float, default=1.5)
    p.add_argument("--retry-period", type=float, default=0.5)
    p.add_argument("--unsafe-renew-deadline", type=float, default=0.0)
    args = p.parse_args()

    conf = client.Configuration()
    kube_config.load_kube_config(config_file=args.kubeconfig, client_configuration=conf)
    elector = LeaderElector(
        client.ApiClient(conf), name=args.lease, namespace=args.namespace, identity=args.identity,
        lease_duration=args.lease_duration, renew_deadline=args.renew_deadline, retry_period=args.retry_period,
        on_started_leading=lambda: emit("started"), on_stopped_leading=lambda: emit("stopped"),
        on_new_leader=lambda who: emit("new_leader", who=who),
    )
    if args.unsafe_renew_deadline:
        broken = dataclasses.replace(elector.config, renew_deadline=args.unsafe_renew_deadline)
        elector.config = elector._core.config = broken

    def heartbeat() -> None:
        while True:
            if elector.is_leader():
                emit("leading")
            time.sleep(0.01)

    with recorded_signals(signal.SIGTERM) as received:  # the handler only records (see keyqueue._signals)
        threading.Thread(target=heartbeat, daemon=True).start()
        elector.start()
        emit("ready")
        while not received:
            time.sleep(0.02)
    elector.stop(10)
    emit("released")
    return 0


if __name__ == "__main__":
    sys.exit(main())
