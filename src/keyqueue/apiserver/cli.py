"""``keyqueue-lab apiserver``: run the test API server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from .testserver import TestAPIServer

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``apiserver`` options to ``parser``."""
    parser.add_argument("--kubeconfig", required=True, type=Path,
                        help="write a kubeconfig for the server to this path")
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd",
                        help="storage: a real etcd started for this run (default) or in-memory")
    parser.add_argument("--port", type=int, default=0, help="API server port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a throwaway CA (needs openssl)")
    parser.add_argument("--token", action="store_true", help="require a random bearer token (put in the kubeconfig)")
    parser.add_argument("--compaction-interval", type=float, default=300.0, metavar="SECONDS",
                        help="compact storage this often, like kube-apiserver (default 300; 0 = never)")


def run(args: argparse.Namespace) -> int:
    """Start etcd (unless ``--backend memory``) and the server, write the kubeconfig, serve.

    Blocks until SIGINT or SIGTERM, then stops the server and etcd and returns 0.
    Must be called from the main thread (it installs signal handlers).
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with TestAPIServer(args.backend, port=args.port, tls=args.tls, token=True if args.token else None,
                           compaction_interval=args.compaction_interval or None) as s:
            path = s.write_kubeconfig(args.kubeconfig)
            etcd = f", etcd {s.etcd.client_url} (pid {s.etcd.pid})" if s.etcd is not None else ""
            print(f"keyqueue test API server (Kubernetes API subset: ConfigMaps, Namespaces; not kube-apiserver)\n"
                  f"listening on {s.url} with {args.backend} storage{etcd}\n"
                  f"kubeconfig: {path}  (export KUBECONFIG={path})\n"
                  f"stop with Ctrl-C or SIGTERM", flush=True)
            while not stop.wait(0.5):
                pass
            print("stopping", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keyqueue.apiserver",
        description="Kubernetes-API-compatible test server for ConfigMaps and Namespaces, backed by etcd.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
