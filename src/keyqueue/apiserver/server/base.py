""":class:`ServerBase`: what every part of the :class:`~.lifecycle.APIServer` stands on.

It holds the server's configuration and state, and runs storage calls: on the loop for a non-blocking backend, else
in the bounded pool of storage threads (:class:`~.threads._StoragePool`).
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from keyqueue._httpserver import BackgroundHTTPServer, HTTPLimits

from .. import errors
from ..gc import GarbageCollector
from ..registry import Registry
from ..storage import DEFAULT_WATCH_BUFFER
from .threads import _StoragePool, _WatchStream

__all__ = ["ServerBase"]

T = TypeVar("T")


class ServerBase:
    """The configuration and state of an :class:`~.lifecycle.APIServer` (its parameters are described there), and
    how a storage call is run."""

    def __init__(
        self,
        registry: Registry,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        bookmark_interval: float = 1.0,
        max_watch_seconds: float = 1800.0,
        limits: HTTPLimits | None = None,
        watch_buffer: int = DEFAULT_WATCH_BUFFER,
        storage_threads: int = 16,
        user: str = "keyqueue-admin",
    ) -> None:
        if not isinstance(watch_buffer, int) or isinstance(watch_buffer, bool) or watch_buffer < 1:
            raise ValueError(f"watch_buffer must be a positive int, got {type(watch_buffer).__name__}: "
                             f"{watch_buffer!r}")
        if not isinstance(user, str) or not user:
            raise ValueError(f"user must be a non-empty str, got {type(user).__name__}: {user!r}")
        if not isinstance(storage_threads, int) or isinstance(storage_threads, bool) or storage_threads < 1:
            raise ValueError(f"storage_threads must be a positive int, got {type(storage_threads).__name__}: "
                             f"{storage_threads!r}")
        self.registry = registry
        self.host = host
        self.port = port
        self.token = token
        self.user = user
        self._token_bytes = token.encode() if token is not None else None
        self.ssl_context = ssl_context
        self.bookmark_interval = bookmark_interval
        self.max_watch_seconds = max_watch_seconds
        self.limits = limits or HTTPLimits()
        self.watch_buffer = watch_buffer
        self.storage_threads = storage_threads
        self.stopping = False
        self._lock = threading.Lock()
        self._http: BackgroundHTTPServer | None = None
        self._executor: _StoragePool | None = None
        self._gc: GarbageCollector | None = None  # runs while the server does
        self._streams: set[_WatchStream] = set()  # loop thread only
        self._blocking = bool(getattr(registry.backend, "blocking", True))

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        with self._lock:
            return self._http is not None

    @property
    def open_connections(self) -> int:
        """Connections open now (0 when stopped)."""
        http = self._http
        return http.open_connections if http is not None else 0

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a storage call: on the loop for a non-blocking backend (unless admission webhooks are configured: a
        write may then wait for them), else in the bounded thread pool."""
        if not self._blocking and not self.registry.admission.active():
            return fn(*args)
        executor = self._executor
        if executor is None:
            raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down")
        try:
            fut = executor.run(fn, *args)
        except RuntimeError:
            raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down") from None
        return await fut
