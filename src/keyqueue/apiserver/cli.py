"""``keyqueue-lab apiserver``: run the test API server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from keyqueue._signals import recorded_signals

from .etcd import EtcdStartError
from .objects import BUILTINS, REVIEWS
from .testserver import TestAPIServer

__all__ = ["DESCRIPTION", "SERVED", "add_arguments", "run"]


def _plural(kind: str) -> str:
    if kind.endswith("ss"):
        return kind + "es"
    return kind if kind.endswith("s") else kind + "s"


def _served() -> str:
    """Every stored built-in kind in plural (``ConfigMaps, ..., EndpointSlices``) and the custom resources."""
    kinds = list(dict.fromkeys(_plural(rt.kind) for rt in BUILTINS if rt not in REVIEWS))
    return ", ".join(kinds) + " and the custom resources of the CRDs"


SERVED = _served()
"""The resources the test server serves, as its description and banner name them."""

DESCRIPTION = (
    f"A Kubernetes-API-compatible test server for a subset of resources ({SERVED}), not kube-apiserver. It stores "
    "objects in a real etcd started for this run (on free loopback ports, temp data dir) the way kube-apiserver "
    "does, writes a kubeconfig (to --kubeconfig, or a temporary file it names and deletes at the stop), prints "
    "where it listens and serves until SIGINT or SIGTERM, then stops the server and etcd. 'kubectl apply' works "
    "client-side and server-side (--server-side)."
)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be within 0..65535, got {port}")
    return port


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``apiserver`` options to ``parser`` (and set its description)."""
    parser.description = DESCRIPTION
    parser.epilog = None  # the lab's epilog is about its counters, which this server does not print
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="write a kubeconfig for the server to this path (default: a temporary file, printed "
                             "at the start and deleted at the stop)")
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd",
                        help="storage: a real etcd started for this run (default) or in-memory")
    parser.add_argument("--port", type=_port, default=0, help="API server port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a throwaway CA (needs openssl)")
    parser.add_argument("--token", action="store_true", help="require a random bearer token (put in the kubeconfig)")
    parser.add_argument("--compaction-interval", type=_seconds, default=300.0, metavar="SECONDS",
                        help="compact storage this often, like kube-apiserver (default 300; 0 = never)")
    parser.add_argument("--remove-kubeconfig", action="store_true",
                        help="remove the kubeconfig when the server stops, and its directory if that is then empty "
                             "(for a parent process that made the directory and may not outlive this server)")
    parser.add_argument("--stop-on-stdin-eof", action="store_true",
                        help="also stop when standard input reaches its end or the parent process exits (for a "
                             "parent process that owns this server)")


def run(args: argparse.Namespace) -> int:
    """Start etcd (unless ``--backend memory``) and the server, write the kubeconfig, serve.

    Blocks until SIGINT or SIGTERM (or, with ``--stop-on-stdin-eof``, until standard input ends or the parent
    process exits), then stops the server and etcd and returns 0; a stop that takes longer than ``STOP_GRACE``
    seconds ends the process with exit status 3 and the threads' stacks on stderr.
    If they cannot start (no etcd binary, etcd unhealthy, port taken, kubeconfig not
    writable), whatever did start is stopped, the reason is printed to stderr and 2
    is returned.  Must be called from the main thread (it installs signal handlers).
    """
    stop = threading.Event()
    watchdog: list[threading.Timer] = []

    watchdog_lock = threading.Lock()

    def request_stop() -> None:
        # Never called from a signal handler. An orderly stop is bounded: if it has not finished STOP_GRACE
        # seconds after it was asked for, the process dumps its threads' stacks to stderr and exits (etcd, our
        # child, gets its parent-death signal).
        with watchdog_lock:
            if not watchdog:
                timer = threading.Timer(STOP_GRACE, _force_exit)
                timer.daemon = True
                timer.start()
                watchdog.append(timer)
        stop.set()

    # The handlers only record the signal (see keyqueue._signals); the loop below acts on it.
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        if getattr(args, "stop_on_stdin_eof", False):

            def stop_at_eof(fd: int) -> None:
                # os.read on the descriptor, not sys.stdin.buffer: a daemon thread blocked inside the buffered
                # reader holds its lock when the interpreter finalises, which aborts the process ("Fatal Python
                # error: _enter_buffered_busy") instead of exiting 0.
                with contextlib.suppress(OSError, ValueError):
                    while os.read(fd, 65536):
                        pass
                request_stop()

            def stop_with_parent(parent: int) -> None:  # the parent died: we were re-parented
                while not stop.wait(0.5):
                    if os.getppid() != parent:
                        request_stop()
                        return

            threading.Thread(target=stop_at_eof, args=(sys.stdin.fileno(),), name="apiserver-stdin-eof",
                             daemon=True).start()
            threading.Thread(target=stop_with_parent, args=(os.getppid(),), name="apiserver-parent-watch",
                             daemon=True).start()
        try:
            server = TestAPIServer(args.backend, port=args.port, tls=args.tls, token=True if args.token else None,
                                   compaction_interval=args.compaction_interval or None)
            _abandon_on_force_exit.append(server.abandon)
            try:
                server.start()
                path = server.write_kubeconfig(args.kubeconfig) if args.kubeconfig else server.kubeconfig_path
            except (EtcdStartError, OSError) as exc:  # FileNotFoundError (no etcd) is an OSError
                server.stop()
                print(f"apiserver: could not start: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                return 2
            try:
                etcd = f", etcd {server.etcd.client_url} (pid {server.etcd.pid})" if server.etcd is not None else ""
                print(f"keyqueue test API server: a Kubernetes-API-compatible test server for a subset of "
                      f"resources ({SERVED}), not kube-apiserver\n"
                      f"listening on {server.url} with {args.backend} storage{etcd}\n"
                      f"kubeconfig: {path}  (export KUBECONFIG={path})\n"
                      f"stop with Ctrl-C or SIGTERM", flush=True)
                while not received and not stop.wait(0.2):
                    pass
                request_stop()
                with contextlib.suppress(OSError):  # stdout may be a pipe whose reader is gone (a killed parent)
                    print("stopping", flush=True)
            finally:
                server.stop()
                if getattr(args, "remove_kubeconfig", False):
                    _remove_kubeconfig(path)
        finally:
            for timer in watchdog:
                timer.cancel()
    return 0


def _remove_kubeconfig(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):  # only an empty directory goes
        path.parent.rmdir()


STOP_GRACE = 20.0  # seconds an orderly stop may take before the process exits anyway
_abandon_on_force_exit: list[Callable[[], None]] = []


def _force_exit() -> None:
    with contextlib.suppress(Exception):
        print(f"apiserver: stopping took longer than {STOP_GRACE:g} s; exiting now. Threads:", file=sys.stderr,
              flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    for abandon in _abandon_on_force_exit:  # etcd and the temp files (the kubeconfig with the token) go too
        with contextlib.suppress(Exception):
            abandon()
    os._exit(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keyqueue.apiserver")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
