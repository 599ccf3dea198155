"""Waiting on something outside the server (an admission webhook) from a storage thread, without taking a
thread from the requests that do not wait on it.

The storage threads are bounded (:class:`~keyqueue.apiserver.server.threads._StoragePool`).  A request that waits
for a slow webhook would hold one for up to the webhook's timeout, and enough of them would hold all, stalling
every other request.  Code that waits that way runs inside :func:`waiting_outside`: the pool then does not count
the thread against its bound while it waits (it starts another thread if calls are queued), as Go's scheduler hands
a goroutine's processor on when it blocks in a system call.  Outside a pool thread :func:`waiting_outside` does
nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["bind_thread", "waiting_outside"]

_local = threading.local()


def bind_thread(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    """Make the current thread report its outside waits: ``enter()`` when one starts, ``leave()`` when it ends (both
    must not block for long)."""
    _local.hooks = (enter, leave)


@contextlib.contextmanager
def waiting_outside() -> Iterator[None]:
    """The block waits on something outside the server (see the module docstring)."""
    hooks: tuple[Callable[[], None], Callable[[], None]] | None = getattr(_local, "hooks", None)
    if hooks is None:
        yield
        return
    enter, leave = hooks
    enter()
    try:
        yield
    finally:
        leave()
