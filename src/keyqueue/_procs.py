"""Child processes of keyqueue's test servers (etcd, the API server child, redis-server): a free port to give them,
and the way to make them exit with their parent."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["die_with_parent", "die_with_parent_hook", "free_port", "wait_or_kill"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_or_kill(proc: subprocess.Popen[Any], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``proc`` to exit; if it has not, SIGKILL it and reap it (blocks up to 5 s
    more for that)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


_PR_SET_PDEATHSIG: Final = 1


def die_with_parent(argv: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``(argv, preexec_fn)`` for :class:`subprocess.Popen` so that the child gets SIGTERM when its parent dies
    (Linux only; elsewhere ``(argv, None)``).

    Where util-linux's ``setpriv`` is installed (it is on Debian), ``argv`` is prefixed with
    ``setpriv --pdeathsig TERM --``, which sets the signal and then executes the command (the same process, so
    the signal stays set) through ``sh``, which first exits with status 1 if the parent died before the signal
    was set; there is no ``preexec_fn``. That matters: a ``preexec_fn`` runs Python code in the
    forked child of a process that has other threads, and it makes ``Popen`` use ``fork()`` instead of ``vfork()``,
    so the libraries' fork handlers run in the child too. gRPC's (loaded by the etcd client) then restarted its
    poller there, which found its epoll descriptor closed by ``close_fds`` and aborted the child before it could
    execute etcd. Without ``setpriv`` the ``preexec_fn`` from :func:`die_with_parent_hook` is returned instead.

    Linux delivers the signal when the *thread* that forked exits, so nothing is added unless the caller is the
    main thread (whose end is the process's).
    """
    command = list(argv)
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return command, None
    setpriv, sh = shutil.which("setpriv"), shutil.which("sh")
    if setpriv is not None and sh is not None:
        # The parent may die between the fork and setpriv's prctl, and then no signal ever comes: the shell, started
        # with the signal already set, checks that its parent is still the process that started it before it
        # executes the command (the same check the preexec hook makes).
        check = f'[ "$PPID" = {os.getpid()} ] || exit 1; exec "$@"'
        return [setpriv, "--pdeathsig", "TERM", "--", sh, "-c", check, "sh", *command], None
    return command, die_with_parent_hook()


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child get SIGTERM when its parent dies (Linux only).

    Linux delivers the signal when the *thread* that forked exits, so this is
    only used when starting from the main thread (whose end is the process's).
    The libc function is looked up here, in the parent, so that the child only
    makes the call.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook
