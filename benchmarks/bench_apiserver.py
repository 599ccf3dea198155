"""Latency of the test API server (keyqueue.apiserver) through the official Kubernetes Python client.

    python benchmarks/bench_apiserver.py [--smoke] [--iterations N] [--backend etcd|memory] [--json PATH]

Measured with the etcd backend by default (a real etcd started for the run, fsync on), one ``ApiClient``
(keep-alive connection pool), after a warm-up:

* ``update``: a ConfigMap replace (PUT with the resourceVersion of the previous answer, i.e. a compare-and-swap
  in etcd), from the call to the returned model.
* ``patch``: a strategic-merge patch of the same ConfigMap (no precondition).
* ``write->watch``: from just before a patch is sent to the moment a second client's ``watch.Watch().stream``
  yields the matching MODIFIED event (the watch runs in its own thread on its own ApiClient).

Baselines measured in the same run, in the same process: ``storage txn``, the compare-and-swap the update does,
sent straight through the storage backend (the floor under ``update``: what is left is HTTP, the client and the
registry); ``http floor``, a ``GET /version`` through the same client (HTTP + client, no storage). The ratio
column is each row over ``storage txn``.

Targets (issue 14; issue 7 had 3 ms): update median <= 1.2 ms, write->watch median <= 1.5 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal, cast

from kubernetes import client, watch

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.objects import CONFIGMAPS

TARGETS_MS = {"update": 1.2, "write->watch": 1.5}


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) >= 2 else ms[0]
    return {"n": len(ms), "median_ms": statistics.median(ms), "p99_ms": p99, "min_ms": ms[0], "max_ms": ms[-1]}


def measure(backend: str, iterations: int, warmup: int) -> dict[str, dict[str, float]]:
    if backend not in ("etcd", "memory"):
        raise ValueError(f"backend must be 'etcd' or 'memory', got {backend!r}")
    # The official client's models and Watch are partly untyped: handle them as Any here.
    with TestAPIServer(cast(Literal["etcd", "memory"], backend)) as s:
        writer_client: Any = s.api_client()
        watcher_client: Any = s.api_client()
        api: Any = client.CoreV1Api(writer_client)
        watch_api: Any = client.CoreV1Api(watcher_client)
        ns = "bench"
        api.create_namespace({"metadata": {"name": ns}})
        cm: Any = api.create_namespaced_config_map(ns, {"metadata": {"name": "target"}, "data": {"i": "0"}})

        backend: Any = s.backend
        key = s.registry.key(CONFIGMAPS, ns, "floor")
        created = backend.create(key, b"{}")
        mod = created.kv.mod_revision
        txn: list[float] = []
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            result = backend.update(key, b'{"i":"%d"}' % i, mod)
            if i >= warmup:
                txn.append(time.perf_counter() - t0)
            mod = result.kv.mod_revision

        floor: list[float] = []
        version_api: Any = client.VersionApi(writer_client)
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            version_api.get_code()
            if i >= warmup:
                floor.append(time.perf_counter() - t0)

        update: list[float] = []
        for i in range(warmup + iterations):
            cm.data["i"] = f"u{i}"
            t0 = time.perf_counter()
            cm = api.replace_namespaced_config_map("target", ns, cm)
            if i >= warmup:
                update.append(time.perf_counter() - t0)

        patch: list[float] = []
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            api.patch_namespaced_config_map("target", ns, {"data": {"i": f"p{i}"}})
            if i >= warmup:
                patch.append(time.perf_counter() - t0)

        arrivals: queue.Queue[tuple[str, float]] = queue.Queue()
        w: Any = cast(Any, watch.Watch)()  # Watch.__init__ is untyped
        rv = api.list_namespaced_config_map(ns).metadata.resource_version

        def run_watch() -> None:
            try:
                for event in w.stream(watch_api.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=600):
                    if event["type"] == "MODIFIED":
                        arrivals.put((event["object"].data["i"], time.perf_counter()))
            except Exception:  # stream shut down by w.stop()
                pass

        thread = threading.Thread(target=run_watch, daemon=True)
        thread.start()
        to_watch: list[float] = []
        for i in range(warmup + iterations):
            marker = f"w{i}"
            t0 = time.perf_counter()
            api.patch_namespaced_config_map("target", ns, {"data": {"i": marker}})
            while True:
                got, t1 = arrivals.get(timeout=10)
                if got == marker:
                    break
            if i >= warmup:
                to_watch.append(t1 - t0)
        w.stop()
        thread.join(10)
        writer_client.close()
        watcher_client.close()
    return {"storage txn": _summary(txn), "http floor": _summary(floor), "update": _summary(update),
            "patch": _summary(patch), "write->watch": _summary(to_watch)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="20 iterations, for CI")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    iterations = 20 if args.smoke else args.iterations
    warmup = 5 if args.smoke else 30
    results = measure(args.backend, iterations, warmup)

    print(f"keyqueue test API server, {args.backend} backend, official Python client, {iterations} iterations")
    print(f"{'metric':<14} {'median ms':>10} {'p99 ms':>8} {'/storage txn':>12} {'target':>10}  ok")
    ok = True
    base = results["storage txn"]["median_ms"]
    for name, r in results.items():
        target = TARGETS_MS.get(name)
        passed = target is None or r["median_ms"] <= target
        ok = ok and passed
        shown = f"<= {target:.1f}" if target is not None else "-"
        print(f"{name:<14} {r['median_ms']:>10.2f} {r['p99_ms']:>8.2f} {r['median_ms'] / base:>11.2f}x {shown:>10}  "
              f"{'yes' if passed else 'NO'}")
    if args.json:
        report: dict[str, Any] = {
            "backend": args.backend,
            "iterations": iterations,
            "python": sys.version.split()[0],
            "machine": platform.platform(),
            "targets_ms": TARGETS_MS,
            "results": results,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
