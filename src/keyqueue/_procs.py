"""Child processes of keyqueue's test servers (etcd, the API server child, redis-server): a free port to give them,
and a ``preexec_fn`` that makes them exit with their parent."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["die_with_parent_hook", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_PR_SET_PDEATHSIG: Final = 1


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
