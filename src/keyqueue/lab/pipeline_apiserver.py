"""The pipeline's test API server in a child process (``keyqueue-lab pipeline --apiserver process``, the default):
``python -m keyqueue.apiserver`` with its etcd, apart from the controller's process as a real cluster's API server
is, and its process ids for the pipeline's CPU accounting."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading

from keyqueue._procs import die_with_parent, wait_or_kill
from keyqueue._tempdirs import owned_tempdir

__all__ = ["ApiServerProcess"]


def _child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                found.extend(int(x) for x in fh.read().split())
    return found


class ApiServerProcess:
    """``python -m keyqueue.apiserver`` on ``backend`` storage in a child process. :meth:`start` returns once its
    kubeconfig (:attr:`kubeconfig`) is written; :meth:`stop` (idempotent) stops it, and it stops its etcd."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.kubeconfig = ""  #: the child's kubeconfig, once :meth:`start` has returned
        self.proc: subprocess.Popen[str] | None = None
        self._dir: str | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the child; returns once its kubeconfig is written. Raises ``RuntimeError`` with the child's output
        if it does not start within 60 s (:meth:`stop` then cleans up)."""
        self._dir = owned_tempdir("keyqueue-pipeline-")  # also removes those of pipelines that were killed
        path = os.path.join(self._dir, "kubeconfig")
        cmd = [sys.executable, "-m", "keyqueue.apiserver", "--kubeconfig", path, "--backend", self.backend,
               "--stop-on-stdin-eof", "--remove-kubeconfig"]
        # If this process dies without stopping the child, the child stops (and stops its etcd) twice over: the
        # kernel sends it SIGTERM (PR_SET_PDEATHSIG, see die_with_parent), and its stdin pipe, whose only writer is
        # this process, reaches its end. The pipe alone would do; the signal is faster. Stopping, it removes its
        # kubeconfig and this directory, which would otherwise outlive a killed pipeline.
        cmd, preexec = die_with_parent(cmd)
        self.proc = child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True, preexec_fn=preexec,
                                             # A terminal's Ctrl-C goes to the foreground process group: in a
                                             # process group of its own the child is stopped by stop(), after
                                             # the informer, never under the informer's open watch. It stays in
                                             # this process's session, i.e. (Linux, sched_autogroup) in its
                                             # scheduling group: in a session of its own it would be a group as
                                             # large as this whole process, and a worker woken by an add would
                                             # wait for the API server's time slices instead of preempting its
                                             # threads (enqueue → Get twice as long at concurrency 10).
                                             process_group=0)
        lines: list[str] = []
        ready = threading.Event()

        def drain() -> None:  # reads the child's output to its end, so that it never blocks on a full pipe
            assert child.stdout is not None
            for line in child.stdout:
                if len(lines) < 200:
                    lines.append(line)
                if line.startswith("stop with"):  # the banner's last line: the kubeconfig is written
                    ready.set()
            ready.set()  # the child exited

        self._reader = threading.Thread(target=drain, name="apiserver-child-output", daemon=True)
        self._reader.start()
        ready.wait(60)
        if not os.path.exists(path) or child.poll() is not None:
            raise RuntimeError("the API server child process did not start:\n" + "".join(lines))
        self.kubeconfig = path

    def stop(self) -> None:
        """SIGTERM to the child (then SIGKILL after 15 s), and its directory removed. Idempotent."""
        child, self.proc = self.proc, None
        if child is not None:
            if child.poll() is None:
                child.terminate()  # SIGTERM: it stops its server and etcd
                wait_or_kill(child, 15)
            if self._reader is not None:
                self._reader.join(5.0)  # it reaches the end of the output now that the child is gone
                self._reader = None
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def pids(self) -> dict[str, int]:
        """``apiserver`` (the child) and ``etcd`` (the child's first child: its etcd, when it runs on etcd) while
        the child runs; empty before :meth:`start` and after :meth:`stop`."""
        pids: dict[str, int] = {}
        if self.proc is not None:
            pids["apiserver"] = self.proc.pid
            etcd = _child_pids(self.proc.pid)
            if etcd:
                pids["etcd"] = etcd[0]
        return pids
