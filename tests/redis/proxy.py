"""A TCP proxy on loopback that a test controls: forward, or cut (a black hole: the connection stays open, nothing
arrives, as when a network partition hits a worker)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType
from typing import Self


def redis_port(url: str) -> int:
    """The port of a ``redis://host:port/db`` URL (what a proxy for that server forwards to)."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


class CuttableProxy:
    """``CuttableProxy(port)`` forwards ``127.0.0.1:<self.port>`` to ``127.0.0.1:<port>``. :meth:`cut` drops every
    byte in both directions from then on (connections stay open); :meth:`restore` closes the connections that
    were cut (their streams lost bytes) and forwards again; :meth:`retarget` moves it to another server."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._cut = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cuttable-proxy", daemon=True)

    def start(self) -> Self:
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._thread.start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            for s in list(self._pairs):
                self._close(s)

    def retarget(self, target_port: int) -> None:
        """Forward new connections to ``target_port`` from now on and close the open ones: a service endpoint
        (a managed Redis's primary address) moving to another server."""
        with self._lock:
            self.target_port = target_port
            for s in list(self._pairs):
                self._close(s)

    def _close(self, s: socket.socket) -> None:
        peer = self._pairs.pop(s, None)
        for x in (s, peer):
            if x is None:
                continue
            self._pairs.pop(x, None)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(x)
            x.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with self._lock:
                    if sock is self._listener:
                        client, _ = self._listener.accept()
                        upstream = socket.create_connection(("127.0.0.1", self.target_port))
                        for s in (client, upstream):
                            s.setblocking(False)
                            self._sel.register(s, selectors.EVENT_READ)
                        self._pairs[client], self._pairs[upstream] = upstream, client
                        continue
                    if sock not in self._pairs:
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._close(sock)
                    elif not self._cut:
                        with contextlib.suppress(OSError):
                            self._pairs[sock].sendall(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for s in list(self._pairs):
                self._close(s)
        self._listener.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
