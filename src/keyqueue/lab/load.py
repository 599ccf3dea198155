"""``keyqueue-lab load``: a bounded load generator against the pipeline's ``POST /trigger/{name}``.

``--concurrency`` threads, each with one keep-alive :class:`http.client.HTTPConnection` (``TCP_NODELAY`` set),
send ``--requests`` POSTs in total to ``/trigger/obj-<n>`` (:func:`trigger_name`: four requests in five go to the
``--hot`` first names, the rest walk all ``--keys`` names, so that a few hot keys are written again while the
queue still holds them) and time each round trip with ``time.perf_counter_ns``. Only loopback URLs are accepted:
this is a lab tool, not a way to load someone's server.

The same load with standard tools (``wrk`` is in Debian; k6 works the same way)::

    cat > trigger.lua <<'EOF'
    wrk.method = "POST"
    counter = 0
    request = function()
        counter = counter + 1
        local n = math.floor(counter / 5) % 20
        if counter % 5 ~= 0 then n = counter % 3 end
        return wrk.format(nil, "/trigger/obj-" .. n)
    end
    EOF
    wrk -t2 -c10 -d10s -s trigger.lua --latency http://127.0.0.1:PORT

``wrk`` runs for a duration rather than a request count, and its threads are not bounded by this tool's
``--requests``; its ``--latency`` table gives the same percentiles.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import ipaddress
import json
import math
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from keyqueue._procs import die_with_parent
from keyqueue._signals import recorded_signals
from keyqueue.lab.common import EXIT_INTERRUPTED, MAX_THREADS, add_json_argument, check_size, human_stream, write_json

__all__ = [
    "LoadResult",
    "add_arguments",
    "check_loopback_url",
    "main",
    "percentile",
    "run",
    "run_load",
    "run_load_subprocess",
    "trigger_name",
]

HOT_SHARE = 0.8
"""The share of requests that go to the hot names (:func:`trigger_name`)."""


def trigger_name(i: int, keys: int, hot: int = 0) -> str:
    """The name request ``i`` triggers: four requests in five (:data:`HOT_SHARE`) go to ``obj-0``..``obj-<hot-1>``,
    every fifth walks ``obj-0``..``obj-<keys-1>``; with ``hot`` 0 every request walks the names (round robin)."""
    if hot <= 0:
        return f"obj-{i % keys}"
    return f"obj-{i % min(hot, keys)}" if i % 5 else f"obj-{i // 5 % keys}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, by the nearest-rank method; NaN when empty."""
    if not sorted_values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q!r}")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def check_loopback_url(url: str) -> tuple[str, int, str]:
    """Split an ``http://`` URL into (host, port, path prefix); ``ValueError`` unless the host is loopback."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    host = parts.hostname or ""
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                raise ValueError(f"refusing a non-loopback host {host!r}: the load generator only targets this machine")
        except ValueError as exc:
            if "refusing" in str(exc):
                raise
            raise ValueError(f"the host must be localhost or a loopback IP address, got {host!r}") from None
    port = parts.port or 80
    return host, port, parts.path.rstrip("/")


@dataclass
class LoadResult:
    """What one load run measured. Latencies are client-side round trips in milliseconds."""

    url: str
    requests: int  #: requests completed (answered or failed)
    errors: int  #: requests that failed (connection error or a non-2xx status)
    concurrency: int
    keys: int
    elapsed_s: float
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    statuses: dict[str, int] = field(default_factory=dict)
    first_error: str = ""
    cpu_s: float = math.nan  #: CPU time (user + system) this process used while the requests ran
    stopped: bool = False  #: the load was stopped early (``stop`` set, or SIGINT/SIGTERM to the load CLI)
    refused: int = 0  #: requests answered 503: the server was stopping (not errors; that client then stopped)
    hot: int = 0  #: names that got four requests in five (:func:`trigger_name`); 0: round robin

    def summary(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line; round trips are shown only when at least one request was answered (never ``nan``)."""
        names = f"{self.keys} {'name' if self.keys == 1 else 'names'}" + (
            f", {HOT_SHARE:.0%} of the requests on {self.hot} hot" if self.hot else "")
        head = (f"load: {self.requests:,} {'request' if self.requests == 1 else 'requests'} to {self.url}/trigger/"
                f"obj-* ({names}), concurrency {self.concurrency}, {self.errors} "
                f"{'error' if self.errors == 1 else 'errors'}"
                + (f", stopped early ({self.refused} refused with 503)" if self.stopped else ""))
        if math.isnan(self.p50_ms):
            return head + " | no request was answered"
        return (f"{head}, {self.rps:,.0f} req/s | round trip p50={self.p50_ms:.2f}ms p95={self.p95_ms:.2f}ms "
                f"p99={self.p99_ms:.2f}ms max={self.max_ms:.2f}ms")


def _check_sizes(requests: int, concurrency: int, keys: int, hot: int) -> None:
    for label, value in (("requests", requests), ("concurrency", concurrency), ("keys", keys)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {type(value).__name__}: {value!r}")
    check_size("concurrency", concurrency, 1, MAX_THREADS)
    check_size("hot", hot, 0, keys)


def _connect(host: str, port: int, timeout: float) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def run_load(url: str, requests: int, concurrency: int, keys: int = 20, timeout: float = 10.0,
             stop: threading.Event | None = None, hot: int = 0) -> LoadResult:
    """Send ``requests`` POSTs to ``{url}/trigger/{trigger_name(i, keys, hot)}`` from ``concurrency`` threads; block
    until done.

    ``stop``: once set, each client finishes its request in flight and sends no more (the result has
    ``stopped``). A 503 (the pipeline refuses new triggers because it is stopping) counts as ``refused``, not as an
    error, and ends that client's share of the load.

    Raises ``ValueError`` for a non-loopback URL, non-positive counts or more than
    :data:`~keyqueue.lab.common.MAX_THREADS` connections. Connection errors do not raise: they are
    counted in ``errors`` (the connection is re-opened for the next request).
    """
    _check_sizes(requests, concurrency, keys, hot)
    host, port, prefix = check_loopback_url(url)
    concurrency = min(concurrency, requests)
    lock = threading.Lock()
    next_index = 0
    latencies: list[list[int]] = [[] for _ in range(concurrency)]
    statuses: dict[str, int] = {}
    errors = 0
    refused = 0
    attempted = 0
    first_error = ""

    def take() -> int:
        nonlocal next_index, attempted
        with lock:
            if stop is not None and stop.is_set():
                return requests
            i = next_index
            next_index += 1
            if i < requests:
                attempted += 1
        return i

    def fail(msg: str, kind: str = "") -> None:
        nonlocal errors, first_error
        kind = kind or msg.split(":")[0]
        with lock:
            errors += 1
            statuses[kind] = statuses.get(kind, 0) + 1
            if not first_error:
                first_error = msg

    start_gate = threading.Barrier(concurrency + 1)

    def client(slot: int) -> None:
        nonlocal refused
        mine = latencies[slot]
        conn: http.client.HTTPConnection | None = None
        with contextlib.suppress(OSError):  # if it fails, the first request retries and counts the failure
            conn = _connect(host, port, timeout)
        start_gate.wait()
        while True:
            i = take()
            if i >= requests:
                break
            path = f"{prefix}/trigger/{trigger_name(i, keys, hot)}"
            t0 = time.perf_counter_ns()
            try:
                if conn is None:
                    conn = _connect(host, port, timeout)
                conn.request("POST", path, body=b"", headers={"Content-Length": "0"})
                resp = conn.getresponse()
                resp.read()
                t1 = time.perf_counter_ns()
            except ConnectionRefusedError:
                fail(f"connection refused to {host}:{port}", "connection refused")
                conn = None
                continue
            except (OSError, http.client.HTTPException) as exc:
                fail(f"{type(exc).__name__}: {exc}")
                if conn is not None:
                    conn.close()
                conn = None
                continue
            mine.append(t1 - t0)
            if resp.status == 503:  # the server refuses new triggers: it is stopping, so this client stops too
                with lock:
                    refused += 1
                break
            elif not 200 <= resp.status < 300:
                fail(f"HTTP {resp.status}: {resp.reason}")
            else:
                with lock:
                    statuses[str(resp.status)] = statuses.get(str(resp.status), 0) + 1
            if resp.will_close:
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,), name=f"load-{i}", daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    start_gate.wait()
    t_start = time.perf_counter()
    cpu_start = time.process_time()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - cpu_start
    all_ms = sorted(ns / 1e6 for lst in latencies for ns in lst)
    done = attempted
    return LoadResult(
        url=url.rstrip("/"),
        requests=done,
        errors=errors,
        concurrency=concurrency,
        keys=keys,
        hot=hot,
        elapsed_s=elapsed,
        rps=done / elapsed if elapsed > 0 else math.nan,
        p50_ms=percentile(all_ms, 50),
        p95_ms=percentile(all_ms, 95),
        p99_ms=percentile(all_ms, 99),
        max_ms=all_ms[-1] if all_ms else math.nan,
        mean_ms=sum(all_ms) / len(all_ms) if all_ms else math.nan,
        statuses=statuses,
        first_error=first_error,
        cpu_s=cpu,
        stopped=(stop is not None and stop.is_set()) or refused > 0,
        refused=refused,
    )


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


def _nothing_sent(url: str, concurrency: int, keys: int, hot: int) -> LoadResult:
    """The result of a load stopped before its first request."""
    nan = math.nan
    return LoadResult(url=url.rstrip("/"), requests=0, errors=0, concurrency=concurrency, keys=keys, elapsed_s=0.0,
                      hot=hot, rps=nan, p50_ms=nan, p95_ms=nan, p99_ms=nan, max_ms=nan, mean_ms=nan, stopped=True)


def run_load_subprocess(url: str, requests: int, concurrency: int, keys: int = 20,
                        timeout: float = 600.0, stop: threading.Event | None = None, hot: int = 0) -> LoadResult:
    """:func:`run_load` in a child process (``python -m keyqueue.lab.load``), so that the client does not compete
    for the caller's GIL. Raises ``RuntimeError`` if the child fails to produce a result within ``timeout``.
    ``stop``: once set, the child gets SIGTERM, stops sending and reports what it did (``stopped``)."""
    # The result comes back as JSON on the child's stdout (its text goes to stderr): no file to leave behind.
    cmd = [sys.executable, "-m", "keyqueue.lab.load", "--url", url, "--requests", str(requests),
           "--concurrency", str(concurrency), "--keys", str(keys), "--hot", str(hot), "--json", "-"]
    # The child runs in a process group of its own: a terminal's Ctrl-C reaches the caller only, which stops the
    # child through ``stop``; and it gets SIGTERM if the caller dies (see die_with_parent).
    cmd, preexec = die_with_parent(cmd)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0,
                          preexec_fn=preexec) as proc:
        deadline = time.monotonic() + timeout
        signalled = False
        while True:
            try:
                out, err = proc.communicate(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.communicate()
                    raise RuntimeError(f"load generator did not finish within {timeout} s") from None
                if stop is not None and stop.is_set() and not signalled:
                    signalled = True
                    proc.send_signal(signal.SIGTERM)  # it stops sending and writes its result
    if signalled and not out.strip():
        # Stopped before it could send anything (SIGTERM while the child was still starting): nothing was sent.
        return _nothing_sent(url, concurrency, keys, hot)
    # 1 = some requests failed, 130 = stopped early: still a result; -SIGTERM after its result was written: our
    # stop came late
    late_stop = signalled and proc.returncode == -signal.SIGTERM
    if (proc.returncode not in (0, 1, EXIT_INTERRUPTED) and not late_stop) or not out.strip():
        raise RuntimeError(f"load generator failed ({proc.returncode}): {out}{err}")
    return LoadResult(**json.loads(out))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True,
                        help="the pipeline's base URL, e.g. http://127.0.0.1:8080 (loopback only)")
    parser.add_argument("--requests", type=int, default=200, help="requests in total (default 200)")
    parser.add_argument("--concurrency", type=int, default=10, help="concurrent keep-alive connections (default 10)")
    parser.add_argument("--keys", type=int, default=20, help="distinct names obj-0..obj-K-1 (default 20)")
    parser.add_argument("--hot", type=int, default=3,
                        help="four requests in five go to the first HOT names, so that the queue absorbs repeated "
                             "writes of a key it still holds; 0 = round robin over all names (default 3)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="socket timeout per request in seconds (default 10)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit status 0 when every request succeeded, 1 if some failed, 2 for bad arguments, 130 when SIGINT or SIGTERM
    stopped it early.

    SIGINT or SIGTERM stop the load early: requests in flight finish, the result (``stopped``) is still printed and
    written (from the main thread only; the signals are only recorded until the result is out)."""
    if threading.current_thread() is not threading.main_thread():
        return _run(args, threading.Event())
    stop = threading.Event()
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        done = threading.Event()

        def watch_signals() -> None:
            while not received and not done.wait(0.05):
                pass
            if received:
                stop.set()

        watcher = threading.Thread(target=watch_signals, name="load-signals", daemon=True)
        watcher.start()
        try:
            return _run(args, stop)
        finally:
            done.set()
            watcher.join()


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    out = human_stream(args)
    try:
        check_loopback_url(args.url)
        _check_sizes(args.requests, args.concurrency, args.keys, args.hot)
    except ValueError as exc:
        print(f"load: {exc}", file=out)
        return 2
    print(f"load: sending {args.requests:,} {_plural(args.requests, 'request')} to {args.url.rstrip('/')}/trigger/"
          f"obj-* from {args.concurrency} {_plural(args.concurrency, 'connection')} (Ctrl-C to stop)", file=out,
          flush=True)
    try:
        result = run_load(args.url, args.requests, args.concurrency, args.keys, args.timeout, stop, args.hot)
    except ValueError as exc:
        print(f"load: {exc}", file=out)
        return 2
    print(result.line(), file=out)
    if result.first_error:
        kinds = ", ".join(f"{kind} × {n}" for kind, n in result.statuses.items() if not kind.isdigit())
        print(f"load: {result.errors} requests failed ({kinds}); the first: {result.first_error}", file=out)
    write_json(args.json, result.summary())
    if stop.is_set():
        return EXIT_INTERRUPTED
    return 0 if result.errors == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keyqueue.lab.load", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
