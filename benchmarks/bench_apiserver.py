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

CPU per operation, for every row: ``client`` is the measuring thread (the official client, or the
direct storage call of ``storage txn``), ``server`` every other thread of this process (the API server's loop,
its storage threads, its watch stream, gRPC's own threads; for ``write->watch`` the watching client's thread is
left out), ``etcd`` the etcd process (from ``/proc/<pid>/stat``, 10 ms ticks: a coarse figure).  The
``storage txn`` row's CPU is what one compare-and-swap costs through gRPC (client) and in etcd; ``http floor``'s
server CPU is what the API server spends on the least a request can cost (``GET /version``: aiohttp, routing,
a small JSON answer).

Targets: update median <= 1.2 ms, write->watch median <= 1.5 ms.
"""

from __future__ import annotations

import argparse
import json
import os
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


def _ticks(pid: int | None) -> int | None:
    """utime + stime of process ``pid`` in clock ticks (``None`` if unknown)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


class _CPU:
    """CPU seconds per operation over a measured loop: this thread, the rest of this process (minus ``exclude``
    threads), and the etcd process."""

    def __init__(self, etcd_pid: int | None, exclude: list[threading.Thread] | None = None) -> None:
        self.etcd_pid = etcd_pid
        self.clocks = [time.pthread_getcpuclockid(t.ident) for t in exclude or () if t.ident is not None]

    def __enter__(self) -> _CPU:
        self._start = (time.thread_time(), time.process_time(), [time.clock_gettime(c) for c in self.clocks],
                       _ticks(self.etcd_pid))
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = (time.thread_time(), time.process_time(), [time.clock_gettime(c) for c in self.clocks],
                     _ticks(self.etcd_pid))

    def per_op(self, n: int) -> dict[str, float]:
        (t0, p0, x0, e0), (t1, p1, x1, e1) = self._start, self._end
        client = t1 - t0
        excluded = sum(b - a for a, b in zip(x0, x1, strict=True))
        out = {"client_cpu_us": client / n * 1e6, "server_cpu_us": (p1 - p0 - client - excluded) / n * 1e6}
        if e0 is not None and e1 is not None:
            out["etcd_cpu_us"] = (e1 - e0) / os.sysconf("SC_CLK_TCK") / n * 1e6
        return out


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
        etcd_pid = s.etcd.pid if s.etcd is not None else None
        cpu: dict[str, dict[str, float]] = {}
        txn: list[float] = []
        for i in range(warmup):
            mod = backend.update(key, b'{"w":"%d"}' % i, mod).kv.mod_revision
        with _CPU(etcd_pid) as c:
            for i in range(iterations):
                t0 = time.perf_counter()
                result = backend.update(key, b'{"i":"%d"}' % i, mod)
                txn.append(time.perf_counter() - t0)
                mod = result.kv.mod_revision
        cpu["storage txn"] = c.per_op(iterations)
        # the server's threads take no part in a direct storage call: all of this process's CPU is the call's
        cpu["storage txn"]["client_cpu_us"] += cpu["storage txn"].pop("server_cpu_us")

        floor: list[float] = []
        version_api: Any = client.VersionApi(writer_client)
        for _ in range(warmup):
            version_api.get_code()
        with _CPU(etcd_pid) as c:
            for _ in range(iterations):
                t0 = time.perf_counter()
                version_api.get_code()
                floor.append(time.perf_counter() - t0)
        cpu["http floor"] = c.per_op(iterations)

        update: list[float] = []
        for i in range(warmup):
            cm.data["i"] = f"uw{i}"
            cm = api.replace_namespaced_config_map("target", ns, cm)
        with _CPU(etcd_pid) as c:
            for i in range(iterations):
                cm.data["i"] = f"u{i}"
                t0 = time.perf_counter()
                cm = api.replace_namespaced_config_map("target", ns, cm)
                update.append(time.perf_counter() - t0)
        cpu["update"] = c.per_op(iterations)

        patch: list[float] = []
        for i in range(warmup):
            api.patch_namespaced_config_map("target", ns, {"data": {"i": f"pw{i}"}})
        with _CPU(etcd_pid) as c:
            for i in range(iterations):
                t0 = time.perf_counter()
                api.patch_namespaced_config_map("target", ns, {"data": {"i": f"p{i}"}})
                patch.append(time.perf_counter() - t0)
        cpu["patch"] = c.per_op(iterations)

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

        def write_and_see(marker: str) -> float:
            t0 = time.perf_counter()
            api.patch_namespaced_config_map("target", ns, {"data": {"i": marker}})
            while True:
                got, t1 = arrivals.get(timeout=10)
                if got == marker:
                    return t1 - t0

        for i in range(warmup):
            write_and_see(f"ww{i}")
        with _CPU(etcd_pid, exclude=[thread]) as c:
            for i in range(iterations):
                to_watch.append(write_and_see(f"w{i}"))
        cpu["write->watch"] = c.per_op(iterations)
        w.stop()
        thread.join(10)
        writer_client.close()
        watcher_client.close()
    samples = {"storage txn": txn, "http floor": floor, "update": update, "patch": patch, "write->watch": to_watch}
    return {name: {**_summary(values), **cpu[name]} for name, values in samples.items()}


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

    print(f"keyqueue test API server, {args.backend} backend, official Python client, {iterations} iterations, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'metric':<14} {'median ms':>10} {'p99 ms':>8} {'/storage txn':>12} {'target':>10}  ok  "
          f"{'CPU/op µs: client':>17} {'server':>7} {'etcd':>6}")
    ok = True
    base = results["storage txn"]["median_ms"]
    for name, r in results.items():
        target = TARGETS_MS.get(name)
        passed = target is None or r["median_ms"] <= target
        ok = ok and passed
        shown = f"<= {target:.1f}" if target is not None else "-"
        server = f"{r['server_cpu_us']:>7,.0f}" if "server_cpu_us" in r else f"{'-':>7}"
        etcd = f"{r['etcd_cpu_us']:>6,.0f}" if "etcd_cpu_us" in r else f"{'-':>6}"
        print(f"{name:<14} {r['median_ms']:>10.2f} {r['p99_ms']:>8.2f} {r['median_ms'] / base:>11.2f}x {shown:>10}  "
              f"{'yes' if passed else 'NO ':<3} {r['client_cpu_us']:>17,.0f} {server} {etcd}")
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
