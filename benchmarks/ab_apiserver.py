"""Two checkouts' API servers side by side in one sitting: CPU per write and the write's watch event.

    python benchmarks/ab_apiserver.py [--rounds N] [--chunk N] NAME=PYTHON NAME=PYTHON ...

Each ``NAME=PYTHON`` names a Python whose ``keyqueue`` is the checkout to measure (e.g. ``main=../main/.venv/bin/python
new=.venv/bin/python``).  Each gets its own ``python -m keyqueue.apiserver`` child (its own etcd with fsync, as
``keyqueue-lab apiserver`` starts it), one official client with a keep-alive pool, and a watch on the namespace.
One operation = a merge patch of one ConfigMap and waiting for its MODIFIED event (what the pipeline's trigger
costs the API server).  The servers are driven alternately, ``--chunk`` operations at a time, ``--rounds`` times
(the order flips every round), so that background load falls on every side alike.  Per side: the patch → event
median, and the CPU per operation of the API server process and of its etcd (``/proc/<pid>/stat``, 10 ms ticks,
summed over all rounds), and of this client.  With two sides the second is also given as a ratio of the first:
the figure to quote on a loaded machine.  Reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config, watch


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


class Side:
    """One checkout's API server (a child process on its own etcd) and a client and a watch on it."""

    def __init__(self, name: str, python: str, tmp: Path) -> None:
        self.name = name
        kubeconfig = tmp / f"{name}.kubeconfig"
        self.child = subprocess.Popen([python, "-m", "keyqueue.apiserver", "--kubeconfig", str(kubeconfig),
                                       "--stop-on-stdin-eof"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      cwd=tmp)
        deadline = time.monotonic() + 60
        while not (kubeconfig.exists() and kubeconfig.stat().st_size):
            if self.child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the API server did not start")
            time.sleep(0.05)
        etcd = _children(self.child.pid)
        if not etcd:
            raise RuntimeError(f"{name}: no etcd child found")
        self.etcd = etcd[0]
        cfg: Any = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=cfg)
        self.api: Any = client.CoreV1Api(client.ApiClient(cfg))
        watch_api: Any = client.CoreV1Api(client.ApiClient(cfg))
        self.api.create_namespace({"metadata": {"name": "ab"}})
        cm = self.api.create_namespaced_config_map("ab", {"metadata": {"name": "target"}, "data": {"i": "0"}})
        self.arrivals: queue.Queue[str] = queue.Queue()
        self.watch: Any = cast(Any, watch.Watch)()  # its constructor is untyped
        rv = cm.metadata.resource_version

        def follow() -> None:
            try:
                for event in self.watch.stream(watch_api.list_namespaced_config_map, "ab", resource_version=rv,
                                               timeout_seconds=3600):
                    if event["type"] == "MODIFIED":
                        self.arrivals.put(event["object"].data["i"])
            except Exception:  # the stream is shut down by stop()
                pass

        threading.Thread(target=follow, daemon=True).start()
        self.latencies: list[float] = []
        self.server_ticks = self.etcd_ticks = self.ops = 0
        self.client_cpu = 0.0
        self.run(50, record=False)  # warm-up

    def run(self, n: int, record: bool = True) -> None:
        server0, etcd0, client0 = _ticks(self.child.pid), _ticks(self.etcd), time.process_time()
        latencies = []
        for i in range(n):
            marker = f"{self.ops}-{i}-{time.perf_counter_ns()}"
            t0 = time.perf_counter()
            self.api.patch_namespaced_config_map("target", "ab", {"data": {"i": marker}},
                                                 _content_type="application/merge-patch+json")
            while self.arrivals.get(timeout=10) != marker:
                pass
            latencies.append(time.perf_counter() - t0)
        if record:
            self.server_ticks += _ticks(self.child.pid) - server0
            self.etcd_ticks += _ticks(self.etcd) - etcd0
            self.client_cpu += time.process_time() - client0
            self.ops += n
            self.latencies += latencies

    def stop(self) -> None:
        self.watch.stop()
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sides", nargs="+", metavar="NAME=PYTHON")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=200, help="operations per side per round")
    args = parser.parse_args(argv)
    pairs = [s.split("=", 1) for s in args.sides]
    if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
        parser.error("each side is NAME=PYTHON")
    hz = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="keyqueue-ab-") as tmp:
        sides: list[Side] = []
        try:
            for name, python in pairs:  # the child runs in the temp dir: no checkout on its path but its own
                sides.append(Side(name, os.path.abspath(python), Path(tmp)))
            load_before = os.getloadavg()[0]
            for r in range(args.rounds):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    side.run(args.chunk)
        finally:
            for side in sides:
                side.stop()
    print(f"{args.rounds} rounds x {args.chunk} merge patches + their watch event per side, alternating; load average "
          f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    for s in sides:
        print(f"{s.name:>8}: patch -> event p50 {statistics.median(s.latencies) * 1e3:.2f} ms | API server CPU/op "
              f"{s.server_ticks / hz / s.ops * 1e6:,.0f} µs | etcd CPU/op {s.etcd_ticks / hz / s.ops * 1e6:,.0f} µs "
              f"| client CPU/op {s.client_cpu / s.ops * 1e6:,.0f} µs")
    if len(sides) == 2:
        a, b = sides

        def ratio(x: float, y: float) -> str:  # a few operations can be under one 10 ms tick
            return f"{x / y:.3f}" if y else "n/a (too few ticks)"

        print(f"ratio {b.name}/{a.name}: API server CPU {ratio(b.server_ticks / b.ops, a.server_ticks / a.ops)}, "
              f"etcd CPU {ratio(b.etcd_ticks / b.ops, a.etcd_ticks / a.ops)}, "
              f"p50 {ratio(statistics.median(b.latencies), statistics.median(a.latencies))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
