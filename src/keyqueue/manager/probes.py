"""The manager's health endpoint: ``/healthz`` (alive) and ``/readyz`` (ready), on a stdlib HTTP server in a daemon
thread (controller-runtime's ``HealthProbeBindAddress``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["HealthServer"]

Check = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves ``GET /healthz`` from ``alive`` and ``GET /readyz`` from ``ready``: each returns ``(ok, text)``;
    200 with the text when ok, 503 otherwise. Any other path is 404. ``port=0`` picks a free port (read
    :attr:`port`). Binds ``addr`` (all interfaces by default, so that the kubelet can probe the pod). Raises
    ``OSError`` if the address cannot be bound."""

    def __init__(self, port: int, alive: Check, ready: Check, addr: str = "0.0.0.0") -> None:
        checks = {"/healthz": alive, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    code, text = 404, "not found"
                else:
                    try:
                        ok, text = check()
                    except Exception as exc:  # a probe answers; it does not crash the server thread
                        ok, text = False, f"check failed: {type(exc).__name__}: {exc}"
                    code = 200 if ok else 503
                body = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Probes every few seconds: not logged."""

        self._server = ThreadingHTTPServer((addr, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name=f"keyqueue-health:{self.port}", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving and release the port (waits for the serving loop, at most ``timeout`` seconds)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)
