"""``keyqueue-lab pipeline``: HTTP trigger → API server → etcd → watch → informer → queue → worker, timed.

The command line of :class:`keyqueue.lab.pipeline.Pipeline` (whose module says what each stage measures): start
the pipeline, serve triggers until a signal or run the built-in load (:mod:`keyqueue.lab.load`), settle, print the
stage table and the verdict, and exit with it.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, TextIO
from urllib.parse import urlsplit

from keyqueue._signals import recorded_signals
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    MAX_THREADS,
    add_json_argument,
    check_size,
    format_duration,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.load import LoadResult, run_load, run_load_subprocess
from keyqueue.lab.pipeline import Pipeline, PipelineConfig
from keyqueue.lab.pipeline_stages import microbench_queue
from keyqueue.lab.pipeline_view import start_live_view

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="trigger server port on 127.0.0.1 (default: free port)")
    parser.add_argument("--workers", type=int, default=4, help="reconciling worker threads (default 4)")
    parser.add_argument("--kubeconfig", default=None,
                        help="use this cluster instead of starting the test API server (ConfigMaps in 'default')")
    parser.add_argument("--connect-timeout", type=parse_duration, default=30.0, metavar="DURATION",
                        help="with --kubeconfig: how long to keep trying to reach the cluster (default 30s)")
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd",
                        help="storage of the embedded test API server (default etcd)")
    parser.add_argument("--reconcile", type=parse_duration, default=0.002,
                        help="simulated work per reconcile, a GIL-releasing sleep (default 2ms)")
    parser.add_argument("--requests", type=int, default=0,
                        help="run a built-in load of N requests, report and exit (default: serve until Ctrl-C)")
    parser.add_argument("--concurrency", type=int, default=10, help="built-in load concurrency (default 10)")
    parser.add_argument("--keys", type=int, default=20, help="built-in load: distinct names (default 20)")
    parser.add_argument("--hot", type=int, default=3,
                        help="built-in load: four requests in five go to the first HOT names, written again while "
                             "the queue holds them, so that the queue's funnel shows; 0 = round robin (default 3)")
    parser.add_argument("--verbose", action="store_true",
                        help="the whole stage table, with the scheduler's part of each hand-off and the replays")
    parser.add_argument("--load-in-process", action="store_true",
                        help="run the built-in load in threads of this process instead of a child process")
    parser.add_argument("--log-lines", type=int, default=10,
                        help="per-event log lines to print per kind (default 10; -1 all, 0 none)")
    parser.add_argument("--stats-interval", type=parse_duration, default=5.0,
                        help="time between [STATS] lines while serving (default 5s; 0 only at the end)")
    parser.add_argument("--apiserver", choices=("process", "thread"), default="process",
                        help="run the test API server (and its etcd) in a child process, as a real cluster's would "
                             "be (default), or in threads of this process (it then shares this process's GIL)")
    parser.add_argument("--trigger-process", action="store_true",
                        help="serve POST /trigger from a child process of its own (the load's writer, as kubectl or "
                             "another service would be) instead of this process's loop; needs --apiserver process "
                             "or --kubeconfig")
    parser.add_argument("--switch-interval", type=parse_duration, default=None,
                        help="set the interpreter's GIL switch interval while running (default: leave it, 5ms); "
                             "a shorter one lets a thread woken by I/O take the GIL from CPU-bound threads sooner")
    parser.add_argument("--plain", action="store_true",
                        help="no live view, plain lines even on a terminal")
    parser.add_argument("--unsafe-no-fsync", action="store_true",
                        help="start etcd with --unsafe-no-fsync (faster writes, not durable; with --apiserver thread)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """0 when the run verified (nothing lost, no same-key overlap, no request failed), 1 otherwise, 2 for bad
    arguments or a pipeline that could not start, 130 when Ctrl-C or SIGTERM cut the built-in load short (after
    the report of what ran).

    SIGINT or SIGTERM (while serving, or during the built-in load) ends the run in order: the trigger server
    refuses new triggers (503), the load stops sending, the pipeline settles (every name reconciled, up to 30 s),
    then the report prints its one verdict, and that verdict is the exit status: ``OK`` 0, ``FAILED`` 1, and
    ``INTERRUPTED`` 130 for a built-in load cut short that verified so far (the exit status every lab command uses
    for an interrupt; a signal that ends serving is the normal end and gives ``OK``). Further signals while
    stopping are ignored. The child API server also gets SIGTERM from the kernel if this process dies outright
    (Linux, when started from the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return _run(args, [])
    # The handlers only record the signal (see keyqueue._signals); the loops in _run poll for it.
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        return _run(args, received)


def _run(args: argparse.Namespace, received: list[int]) -> int:
    out = human_stream(args)
    try:
        check_size("--workers", args.workers, 1, MAX_THREADS)
        check_size("--concurrency", args.concurrency, 1, MAX_THREADS)
        check_size("--requests", args.requests, 0, 10_000_000)
        check_size("--keys", args.keys, 1, 1_000_000)
        check_size("--hot", args.hot, 0, args.keys)
    except ValueError as exc:
        print(f"pipeline: {exc}", file=out)
        return 2
    if args.kubeconfig:
        problem = _reach_cluster(args.kubeconfig, getattr(args, "connect_timeout", 30.0), received, out)
        if problem is not None:
            return problem
    cfg = PipelineConfig(port=args.port, workers=args.workers, backend=args.backend, kubeconfig=args.kubeconfig,
                         reconcile=args.reconcile, log_lines=args.log_lines, stats_interval=args.stats_interval,
                         unsafe_no_fsync=args.unsafe_no_fsync, apiserver_process=args.apiserver == "process",
                         trigger_process=args.trigger_process, switch_interval=args.switch_interval)
    try:
        pipeline = Pipeline(cfg, out=out)
    except ValueError as exc:
        print(f"pipeline: {exc}", file=out)
        return 2
    load: LoadResult | None = None
    try:
        pipeline.start()
    except Exception as exc:
        print(f"pipeline: could not start: {type(exc).__name__}: {exc}", file=out)
        return 2
    try:
        if cfg.kubeconfig:
            where = f"cluster {pipeline.api_url} (from {cfg.kubeconfig})"
        else:
            how = "a child process" if cfg.apiserver_process else "this process"
            where = (f"test API server {pipeline.api_url} ({cfg.backend} storage, in {how}; a Kubernetes-API-"
                     "compatible server for ConfigMaps, not kube-apiserver)")
        served = " (a child process)" if cfg.trigger_process else ""
        print(f"pipeline: triggers on {pipeline.url}/trigger/{{name}}{served}, metrics on "
              f"{pipeline.metrics_url}/metrics; {where}; {cfg.workers} workers", file=out, flush=True)
        view = None
        if not getattr(args, "plain", False) and out.isatty():
            view = start_live_view(pipeline, out)
        try:
            if args.requests > 0:
                load = _run_load_until_signal(pipeline, args, received)
                pipeline.print_line(load.line())  # above the live view, if there is one
            else:
                pipeline.print_line(f"try: curl -X POST {pipeline.url}/trigger/obj-7   (Ctrl-C to stop and report)")
                while not received:
                    time.sleep(0.2)
        finally:
            if view is not None:
                view.stop()
        # Interrupted = a signal cut the built-in load short (serving ends with a signal normally).
        interrupted = bool(received) and load is not None
        if received:
            pipeline.refuse_triggers()
            name = signal.Signals(received[0]).name
            during = " during the load" if load is not None else ""
            print(f"pipeline: {name}{during}: no new triggers; settling, then the verdict", file=out, flush=True)
            if interrupted:
                print("pipeline: interrupted; the report covers the triggers sent so far", file=out, flush=True)
        settled = pipeline.wait_reconciled(30.0)
        print(pipeline.stats_line(), file=out)
        micro = microbench_queue()
        print("", file=out)
        print(pipeline.report(micro, load, interrupted=interrupted, verbose=args.verbose), file=out)
        if not settled:
            print("pipeline: some names were still not reconciled after 30 s", file=out)
        summary = pipeline.summary()
        summary["replay_bound"] = {k: asdict(st) for k, st in pipeline.replay_bound().items()}
        summary["queue_microbench"] = micro
        summary["load"] = load.summary() if load is not None else None
        write_json(args.json, summary)
        ok = pipeline.verdict(load)
    finally:
        pipeline.stop()
    # The one verdict printed is the exit status: OK 0, FAILED 1, INTERRUPTED (verified so far) 130, like every
    # other lab command cut short by Ctrl-C.
    if not ok:
        return 1
    return EXIT_INTERRUPTED if interrupted else 0


def _cluster_url(kubeconfig: str) -> str:
    """The API server URL of the kubeconfig's current context; ``ValueError`` if the file cannot be used."""
    from kubernetes import client
    from kubernetes import config as kube_config

    conf = client.Configuration()
    try:
        load: Any = kube_config.load_kube_config
        load(config_file=kubeconfig, client_configuration=conf)
    except Exception as exc:  # the loader's errors have no common base: a missing file, bad YAML, no context ...
        raise ValueError(f"--kubeconfig {kubeconfig}: {' '.join(str(exc).split())}") from None
    return str(conf.host)


def _unreachable(url: str, timeout: float) -> str | None:
    """Why a TCP connection to the server of ``url`` fails (``None`` if it connects)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=timeout).close()
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return "no answer"
    except socket.gaierror:
        return f"unknown host {parts.hostname!r}"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _reach_cluster(kubeconfig: str, timeout: float, received: list[int], out: TextIO) -> int | None:
    """Wait until the kubeconfig's API server accepts connections: ``None`` then. If it does not at once, say so
    once and keep trying quietly until ``timeout``: then 2, or 130 if a signal came first."""
    try:
        url = _cluster_url(kubeconfig)
    except ValueError as exc:
        print(f"pipeline: {exc}", file=out)
        return 2
    deadline = time.monotonic() + timeout
    reason = _unreachable(url, min(1.0, timeout) or 1.0)
    if reason is None:
        return None
    print(f"pipeline: cannot reach {url} ({reason}); trying again quietly for up to {format_duration(timeout)} "
          "(Ctrl-C to stop)", file=out, flush=True)
    while reason is not None:
        if received:
            print(f"pipeline: {signal.Signals(received[0]).name}: stopped before {url} answered", file=out)
            return EXIT_INTERRUPTED
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"pipeline: could not start: cannot reach {url} ({reason}) within {format_duration(timeout)}",
                  file=out)
            return 2
        time.sleep(min(0.2, left))
        reason = _unreachable(url, max(0.05, min(1.0, deadline - time.monotonic())))
    print(f"pipeline: {url} answers", file=out, flush=True)
    return None


def _run_load_until_signal(pipeline: Pipeline, args: argparse.Namespace, received: list[int]) -> LoadResult:
    """The built-in load (in a thread here, or a child process); a signal refuses new triggers and stops it."""
    stop = threading.Event()
    results: list[LoadResult | BaseException] = []

    def go() -> None:
        try:
            if args.load_in_process:
                results.append(run_load(pipeline.url, args.requests, args.concurrency, args.keys, stop=stop,
                                        hot=args.hot))
            else:
                results.append(run_load_subprocess(pipeline.url, args.requests, args.concurrency, args.keys,
                                                   stop=stop, hot=args.hot))
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=go, name="pipeline-load", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
        if received and not stop.is_set():
            pipeline.refuse_triggers()  # first: nothing new gets in while the load winds down
            stop.set()
    result = results[0]
    if isinstance(result, BaseException):
        raise result
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="keyqueue-lab pipeline", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
