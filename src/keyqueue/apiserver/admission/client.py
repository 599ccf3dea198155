"""Calling one admission webhook: an HTTPS ``POST`` of an ``AdmissionReview``, and the checks of its answer.

The webhook is reached at ``clientConfig.url``, or for ``clientConfig.service`` at the address a
:data:`ServiceResolver` gives for it (this server runs no pods and no Services; without an address the call fails
as kube's does for a Service without endpoints).  Its certificate is verified with ``clientConfig.caBundle`` (the
system's trust store without one), against the URL's host or the Service's DNS name
(``<name>.<namespace>.svc``).  The whole exchange (connect, TLS, request, answer) gets at most the webhook's
``timeoutSeconds``; a redirect is not followed.

Every way the call can fail raises :class:`CallError` with kube's text (``failed calling webhook "<name>": ...``);
the caller applies the webhook's ``failurePolicy`` to it.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote, urlsplit

__all__ = ["CallError", "ServiceResolver", "call_webhook"]

#: Where ``(namespace, name, port)`` of a ``clientConfig.service`` is reached: ``(host, port)``, or ``None`` when
#: it is not reachable.
ServiceResolver = Callable[[str, str, int], "tuple[str, int] | None"]
_MAX_RESPONSE: Final = 3 * 1024 * 1024  # kube's limit on a webhook's answer (bytes)
# apimachinery's NewGenericServerResponse texts for the answers a client does not understand
_GENERIC: Final = {
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    403: "the server does not allow access to the requested resource",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    413: "the server has rejected the request because the request entity is too large",
    415: "the server responded with the status code 415 but did not return more information",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the "
         "request",
}


class CallError(Exception):
    """The webhook could not be called or answered nonsense (kube's ``ErrCallingWebhook``); the message is kube's
    text for it."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f"failed calling webhook {json.dumps(webhook)}: {reason}")
        self.webhook = webhook
        self.reason = reason


_contexts: dict[str, ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """A client context trusting ``ca_bundle`` (base64 of PEM, as in ``clientConfig.caBundle``), or the system's
    trust store for ``""``; contexts are shared per bundle."""
    with _contexts_lock:
        ctx = _contexts.get(ca_bundle)
    if ctx is not None:
        return ctx
    if ca_bundle:
        pem = base64.b64decode(ca_bundle).decode("ascii", "replace")
        ctx = ssl.create_default_context(cadata=pem)
    else:
        ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with _contexts_lock:
        if len(_contexts) > 256:
            _contexts.clear()
        return _contexts.setdefault(ca_bundle, ctx)


def _target(config: Mapping[str, Any], timeout: int,
            resolve: ServiceResolver) -> tuple[str, str, int, str, str, tuple[str, int] | None]:
    """``(url, host, port, path, tls_name, address)`` of a webhook; ``address`` is where to connect for a service
    (``None``: not reachable) or ``(host, port)`` of the URL."""
    query = f"timeout={timeout}s"
    url = config.get("url")
    if isinstance(url, str):
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
        path = (parts.path or "/") + "?" + query
        return f"{url}?{query}", host, port, path, host, (host, port)
    service = config.get("service") or {}
    namespace, name = str(service.get("namespace", "")), str(service.get("name", ""))
    port = int(service.get("port") or 443)
    path = (service.get("path") or "/") + "?" + query
    tls_name = f"{name}.{namespace}.svc"
    url = f"https://{tls_name}:{port}{quote(str(service.get('path') or '/'), safe='/')}?{query}"
    return url, tls_name, port, path, tls_name, resolve(namespace, name, port)


def _tls_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in (18, 19, 20, 21):  # self-signed or issuer unknown
            return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        return f"tls: failed to verify certificate: x509: {exc.verify_message}"
    return f"remote error: tls: {exc.reason or exc}"


def _read_body(response: http.client.HTTPResponse, sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = response.read1(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_RESPONSE:
            raise ValueError(f"the response is larger than {_MAX_RESPONSE} bytes")
        chunks.append(chunk)


def _status_text(code: int, body: bytes) -> str:
    """What kube's client reports for an answer other than 200: the ``Status`` in it if there is one, else
    apimachinery's generic text."""
    try:
        status = json.loads(body)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status" and status.get("message"):
        return str(status["message"])
    if code >= 500 and code not in _GENERIC:
        return f"an error on the server ({json.dumps(body.decode('utf-8', 'replace')[:256])}) has prevented the " \
               "request from succeeding"
    return _GENERIC.get(code, f"the server responded with the status code {code} but did not return more "
                              "information")


def call_webhook(hook: Mapping[str, Any], review: dict[str, Any], resolve: ServiceResolver) -> dict[str, Any]:
    """POST ``review`` to ``hook`` and return the ``AdmissionReview`` it answered (a JSON object, not yet
    checked).  Blocks for at most the hook's ``timeoutSeconds``; raises :class:`CallError` on every failure
    (refused, timed out, TLS, an answer other than 200, a body that is not a JSON object)."""
    name = str(hook.get("name", ""))
    timeout = int(hook.get("timeoutSeconds") or 10)
    config = hook.get("clientConfig") or {}
    url, host, port, path, tls_name, address = _target(config, timeout, resolve)
    post = f"Post {json.dumps(url)}"
    if address is None:
        service = config.get("service") or {}
        raise CallError(name, f"failed to call webhook: {post}: no endpoints available for service "
                              f"{json.dumps(str(service.get('name', '')))}")
    deadline = time.monotonic() + timeout
    body = json.dumps(review, separators=(",", ":")).encode()
    try:
        ctx = _ssl_context(str(config.get("caBundle") or ""))
    except (ssl.SSLError, binascii.Error, ValueError) as exc:
        raise CallError(name, f"could not get REST client: unable to load root certificates: {exc}") from None
    sock: socket.socket | None = None
    try:
        try:
            raw = socket.create_connection(address, timeout=timeout)
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise CallError(name, f"failed to call webhook: {post}: context deadline exceeded") from None
            why = "connection refused" if isinstance(exc, ConnectionRefusedError) else (exc.strerror or str(exc))
            raise CallError(name, f"failed to call webhook: {post}: dial tcp {address[0]}:{address[1]}: "
                                  f"connect: {why.lower()}") from None
        try:
            raw.settimeout(max(deadline - time.monotonic(), 0.001))
            sock = ctx.wrap_socket(raw, server_hostname=tls_name)
        except BaseException:
            raw.close()
            raise
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
        conn.sock = sock
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.request("POST", path, body, {"Content-Type": "application/json", "Accept": "application/json",
                                          "User-Agent": "keyqueue-apiserver"})
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        # the answer is read from the socket this function owns (http.client's getresponse would close it under
        # an answer that ends the connection, before its body is read with the time left)
        response = http.client.HTTPResponse(sock, method="POST")
        response.begin()
        answer = _read_body(response, sock, deadline)
    except CallError:
        raise
    except TimeoutError:
        raise CallError(name, f"failed to call webhook: {post}: context deadline exceeded") from None
    except ssl.SSLError as exc:
        raise CallError(name, f"failed to call webhook: {post}: {_tls_reason(exc)}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise CallError(name, f"failed to call webhook: {post}: {type(exc).__name__}: {exc}") from None
    finally:
        if sock is not None:
            sock.close()
    if response.status != 200:
        raise CallError(name, f"failed to call webhook: {_status_text(response.status, answer)}")
    try:
        decoded = json.loads(answer)
    except (ValueError, RecursionError) as exc:
        raise CallError(name, f"failed to call webhook: couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(decoded, dict):
        raise CallError(name, "failed to call webhook: couldn't get version/kind; json parse error: the answer is "
                              f"a JSON {type(decoded).__name__}, not an object")
    return decoded
