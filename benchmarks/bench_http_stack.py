"""The test API server's HTTP stack under hostile connections (what it must survive).

    python benchmarks/bench_http_stack.py [--hostile N] [--samples N] [--json PATH]

One memory-backed ``TestAPIServer``; ``GET /healthz`` round trips (a new connection each) are timed first with no
other connection open (the baseline, same run), then with N/2 slowloris connections (a request line and a header
that never ends) and N/2 idle ones open. Reported: both medians and maxima, their ratio, the threads of this process
and whether ``/healthz`` answered at all. The target: ``/healthz`` within 100 ms with 1,000 + 1,000 open.
The same script runs against an older checkout (``PYTHONPATH=<checkout>/src``) for a before/after in one sitting.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from keyqueue.apiserver import TestAPIServer


def _healthz_ms(port: int, timeout: float) -> float:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            return float("inf")
    except OSError:
        return float("inf")
    finally:
        conn.close()
    return (time.perf_counter() - t0) * 1000


def measure(hostile: int, samples: int) -> dict[str, Any]:
    with TestAPIServer("memory") as s:
        for _ in range(20):  # warm-up
            _healthz_ms(s.port, 10)
        base = sorted(_healthz_ms(s.port, 10) for _ in range(samples))
        socks: list[socket.socket] = []
        try:
            for i in range(hostile // 2):
                sock = socket.create_connection(("127.0.0.1", s.port))
                sock.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow-%d: a" % i)
                socks.append(sock)
            for _ in range(hostile - hostile // 2):
                socks.append(socket.create_connection(("127.0.0.1", s.port)))
            time.sleep(0.5)  # let the server accept them all (a benchmark, not a test)
            threads = threading.active_count()
            under = sorted(_healthz_ms(s.port, 10) for _ in range(samples))
        finally:
            for sock in socks:
                sock.close()
    return {
        "hostile_connections": hostile,
        "baseline_median_ms": statistics.median(base), "baseline_max_ms": base[-1],
        "hostile_median_ms": statistics.median(under), "hostile_max_ms": under[-1],
        "ratio": statistics.median(under) / statistics.median(base),
        "threads_with_hostile_open": threads,
        "answered": all(x != float("inf") for x in under),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hostile", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    r = measure(args.hostile, args.samples)
    print(f"/healthz, new connection each: alone median {r['baseline_median_ms']:.2f} ms (max "
          f"{r['baseline_max_ms']:.2f}); with {r['hostile_connections']} slowloris+idle connections open median "
          f"{r['hostile_median_ms']:.2f} ms (max {r['hostile_max_ms']:.2f}) = {r['ratio']:.2f}x; "
          f"threads {r['threads_with_hostile_open']}; all answered: {r['answered']}")
    worst = r["hostile_max_ms"]
    print(f"target: every /healthz within 100 ms with the hostile connections open: worst {worst:.2f} ms -> "
          f"{'PASS' if r['answered'] and worst <= 100 else 'MISS'}")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
