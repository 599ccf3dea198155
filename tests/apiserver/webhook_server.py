"""A small HTTPS admission webhook for the tests: answers ``AdmissionReview`` requests as the test tells it (by
path), records what it was sent, and can hang, redirect or answer garbage."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# (status, body, headers) of an answer; a handler gets the decoded review
Answer = tuple[int, bytes, dict[str, str]]
Handler = Callable[[dict[str, Any]], Answer]


def make_certs(directory: Path, dns_names: tuple[str, ...] = ("localhost",)) -> tuple[Path, Path, Path]:
    """``(ca.crt, server.crt, server.key)``: a throwaway CA and a certificate for 127.0.0.1 and ``dns_names``
    (made with the ``openssl`` command)."""
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=webhook-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    sans = ",".join(["IP:127.0.0.1", *(f"DNS:{d}" for d in dns_names)])
    (directory / "server.ext").write_text(f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\n"
                                          "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                          "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext")
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


def review_answer(review: dict[str, Any], allowed: bool = True, **response: Any) -> Answer:
    """An ``AdmissionReview`` answer to ``review`` (its uid, ``allowed``, more ``response`` fields)."""
    body = {"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": allowed, **response}}
    return 200, json.dumps(body).encode(), {"Content-Type": "application/json"}


def json_patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``patch``/``patchType`` fields of a response carrying ``ops``."""
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


class WebhookServer:
    """HTTPS on 127.0.0.1 (a free port) in a thread.  ``handlers[path]`` answers POSTs to ``path`` (default: allow);
    ``calls`` records ``(path, review)`` in arrival order; ``release`` ends every hanging handler."""

    def __init__(self, directory: Path, dns_names: tuple[str, ...] = ("localhost",)) -> None:
        self.ca_cert, cert, key = make_certs(directory, dns_names)
        self.handlers: dict[str, Handler] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.hanging = threading.Semaphore(0)  # one release per handler that started hanging
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                review = json.loads(raw)
                path = self.path.partition("?")[0]
                with outer.lock:
                    outer.calls.append((path, review))
                    handler = outer.handlers.get(path, review_answer)
                status, body, headers = handler(review)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class _Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up (a timeout, a refused certificate) is what some tests do

        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="test-webhook", daemon=True)
        self._thread.start()

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_cert.read_bytes()).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def paths_called(self) -> list[str]:
        with self.lock:
            return [path for path, _ in self.calls]

    def reviews(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [review for p, review in self.calls if p == path]

    def hang(self, review: dict[str, Any]) -> Answer:
        """A handler that answers only once :attr:`release` is set (at most 60 s)."""
        self.hanging.release()
        self.release.wait(60)
        return review_answer(review)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(10)
