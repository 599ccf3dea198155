"""A threaded HTTP/1.1 server whose keep-alive connections can all be ended (used by the test API server and the
pipeline lab's trigger server).

:class:`http.server.ThreadingHTTPServer` serves each connection in a thread but forgets it; ``shutdown()`` only
stops accepting, so a keep-alive connection (and a watch stream) would outlive it. This subclass remembers every
connection and its thread, and :meth:`TrackingHTTPServer.close_all` shuts them down and joins the threads.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["TrackingHTTPServer"]

log = logging.getLogger(__name__)


class TrackingHTTPServer(ThreadingHTTPServer):
    """One daemon thread per connection, tracked so that :meth:`close_all` can end them all.

    The listen backlog is 128: the default of 5 drops the SYNs of a burst of connects, and clients then retry after
    a second. Subclasses may override :meth:`prepare_connection` (e.g. a TLS handshake) and set ``thread_name``.
    """

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
    thread_name = "http-conn"

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._conn_lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._closing = False
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address),
            name=f"{self.thread_name} {client_address}", daemon=True,
        )
        with self._conn_lock:
            if self._closing:
                self.shutdown_request(request)
                return
            self._connections[request] = thread
        thread.start()

    def prepare_connection(self, request: Any) -> None:
        """Called in the connection's thread before any request is read (default: nothing)."""

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.prepare_connection(request)
            self.finish_request(request, client_address)
        except Exception as exc:  # a broken connection must not kill the server
            if not isinstance(exc, OSError):  # ssl.SSLError is an OSError too
                log.exception("connection %s failed", client_address)
        finally:
            self.shutdown_request(request)
            with self._conn_lock:
                self._connections.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("error on connection %s", client_address, exc_info=True)

    def close_all(self, timeout: float) -> None:
        """Refuse new connections, shut every open one down and wait up to ``timeout`` s for their threads."""
        with self._conn_lock:
            self._closing = True
            items = list(self._connections.items())
        for sock, _ in items:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in items:
            thread.join(max(0.0, deadline - time.monotonic()))
