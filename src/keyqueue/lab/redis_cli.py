"""``keyqueue-lab redis``: a throwaway ``redis-server`` for experiments with :mod:`keyqueue.redis`, until Ctrl-C.

It runs :class:`keyqueue.redis.RedisServer` (a real ``redis-server`` on a loopback port, its files in a temporary
directory), prints the URL to give every process that should share a queue, and on SIGINT or SIGTERM stops the
server and deletes its directory: the queues' data goes with it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from typing import TextIO

from keyqueue._signals import recorded_signals
from keyqueue.lab.common import format_duration

__all__ = ["add_arguments", "run"]


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be within 0..65535, got {port}")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Ctrl-C or SIGTERM stops the server and deletes its files: the normal end (exit status 0)."
    parser.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--appendonly", action="store_true",
                        help="keep an append-only file (fsync every second) while it runs; it is deleted at the "
                             "stop all the same")


def _key_count(url: str) -> int | None:
    """The keys in the server's database, or ``None`` if it cannot be asked."""
    try:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2.0)
        try:
            return int(client.dbsize())
        finally:
            client.close()
    except Exception:  # the count is a courtesy of the summary; the stop goes on without it
        return None


def _banner(url: str, pid: int | None, directory: str, out: TextIO) -> None:
    env = f"KEYQUEUE_REDIS_URL={url}"
    python = shlex.quote(sys.executable)
    print(f"redis: redis-server on {url} (pid {pid}, files in {directory}, deleted at the stop)\n"
          f"share a queue: give every process the same URL and queue name, e.g. in two shells:\n"
          f"  {python} -c \"from keyqueue.redis import Queue; q = Queue('demo', url='{url}'); "
          "print(q.add('default/a'))\"\n"
          f"  {python} -c \"from keyqueue.redis import Queue; q = Queue('demo', url='{url}'); k = q.get(); "
          "print(k); q.done(k)\"\n"
          f"the lab's Redis runs use it with: export {env}\n"
          "stop with Ctrl-C or SIGTERM", file=out, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM, then stop the server, delete its files and return 0 (the normal end of a
    server, as for ``apiserver``); 2 if it cannot start (no ``redis-server`` binary, the port is taken)."""
    from keyqueue.redis import RedisServer, RedisStartError

    out = sys.stdout
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("keyqueue-lab redis runs in the main thread (it handles SIGINT and SIGTERM)")
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        server = RedisServer(appendonly=args.appendonly, port=args.port or None)
        try:
            server.start()
        except (RedisStartError, FileNotFoundError) as exc:
            server.stop()
            print(f"redis: could not start: {exc}", file=sys.stderr)
            return 2
        started = time.monotonic()
        try:
            _banner(server.url, server.pid, str(server.directory), out)
            while not received:
                if server.pid is None or not server.running():
                    print("redis: redis-server exited by itself", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            keys = _key_count(server.url)
            held = "" if keys is None else f"; it held {keys} {'key' if keys == 1 else 'keys'}"
            print(f"redis: {signal.Signals(received[0]).name}: stopping after "
                  f"{format_duration(time.monotonic() - started)}{held} (deleted with it)", file=out, flush=True)
        finally:
            server.stop()
    return 0
