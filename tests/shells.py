"""Shell factories for the conformance suite: each builds a queue of a given kind with a *synchronous* API.

The threading shell is its own facade. Other shells (asyncio) register an adapter here that exposes the same
blocking methods, so every conformance test runs unchanged against every shell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keyqueue

ShellFactory = Callable[..., Any]


def threaded(kind: str, *args: Any, **kwargs: Any) -> Any:
    cls = {
        "queue": keyqueue.Queue,
        "delaying": keyqueue.DelayingQueue,
        "ratelimiting": keyqueue.RateLimitingQueue,
    }[kind]
    return cls(*args, **kwargs)


SHELLS: dict[str, ShellFactory] = {"threaded": threaded}
