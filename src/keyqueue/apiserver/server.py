"""The HTTP front end: Kubernetes REST paths for the resources of :mod:`.objects`.

Core resources live under ``/api/v1``, those of named groups (Leases) under
``/apis/<group>/<version>``; the path layout below the prefix is the same.

A stdlib :class:`http.server.ThreadingHTTPServer` with one thread per
connection, HTTP/1.1 keep-alive and ``TCP_NODELAY`` (without it, delayed ACKs
add ~40 ms to every request).  Request bodies are always read in full, also for
DELETE, so a keep-alive connection never desynchronises.  Answers are JSON;
errors are ``Status`` objects; watches are chunked streams of JSON lines.

Server-side apply (``application/apply-patch+yaml``) is answered with 415
Unsupported Media Type; kubectl then reports that server-side apply is not
available.  Protobuf *request* bodies of ConfigMaps and Namespaces are accepted
(``kubectl create configmap|namespace`` sends them); responses are always JSON,
which every client accepts.
"""

from __future__ import annotations

import email.utils
import hmac
import json
import logging
import select
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from keyqueue._httpserver import TrackingHTTPServer

from . import discovery, errors
from .errors import APIError
from .objects import ResourceType, resource_for, to_table
from .patch import PATCH_TYPES
from .protobuf import PROTOBUF, decode_object
from .registry import ObjectWatch, Registry, WriteOptions

__all__ = ["APIServer"]

log = logging.getLogger(__name__)

_APPLY_PATCH: Final = "application/apply-patch+yaml"
_UNAUTHENTICATED_PATHS: Final = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_MAX_BODY: Final = 3 * 1024 * 1024  # kube-apiserver's limit for request bodies
_LIVENESS_POLL: Final = 1.0  # seconds between checks that an idle watch's client is still there


class _Request:
    """The parts of one request the routes need."""

    __slots__ = ("body", "content_type", "method", "path", "query", "table", "table_include")

    def __init__(self, method: str, path: str, query: dict[str, list[str]], body: bytes, content_type: str,
                 accept: str) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.content_type = content_type
        self.table = _wants_table(accept)
        self.table_include = self.arg("includeObject", "Metadata")

    def arg(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return self.arg(name).lower() in ("true", "1")

    def int_arg(self, name: str) -> int:
        raw = self.arg(name, "0") or "0"
        try:
            return int(raw)
        except ValueError:
            raise errors.bad_request(f"invalid {name}: {raw!r}") from None


def _wants_table(accept: str) -> bool:
    for part in accept.split(","):
        params = {p.strip().split("=", 1)[0]: p.strip().split("=", 1)[-1] for p in part.split(";")[1:]}
        if params.get("as") == "Table" and params.get("g", "meta.k8s.io") == "meta.k8s.io":
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- plumbing
    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
                if sum(map(len, parts)) > _MAX_BODY:
                    raise ValueError("request body too large")
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _head(self, code: int, headers: list[tuple[str, str]]) -> bytes:
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        lines = [f"HTTP/1.1 {code} {phrase}", f"Date: {email.utils.formatdate(usegmt=True)}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")

    def _send(self, code: int, body: bytes, content_type: str = "application/json",
              warnings: list[str] | None = None) -> None:
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))),
                   ("Cache-Control", "no-cache, private")]
        for w in warnings or ():
            headers.append(("Warning", '299 - "' + w.replace('"', '\\"') + '"'))
        self.wfile.write(self._head(code, headers) + body)
        self.log_request(code, len(body))

    def _send_json(self, code: int, obj: Any, warnings: list[str] | None = None) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(), warnings=warnings)

    def _handle(self, method: str) -> None:
        try:
            body = self._read_body()
        except (ValueError, OSError) as exc:
            self.close_connection = True  # the rest of the body was not read: the connection is done
            code, reason = (413, "RequestEntityTooLarge") if "too large" in str(exc) else (400, "BadRequest")
            self._send_json(code, errors.APIError(code, reason, f"request body: {exc}").status())
            return
        url = urlsplit(self.path)
        request = _Request(method, url.path.rstrip("/") or "/", parse_qs(url.query, keep_blank_values=True), body,
                           self.headers.get("Content-Type", "").split(";")[0].strip().lower(),
                           self.headers.get("Accept", ""))
        try:
            self._authorize(request.path)
            self.server.api.route(self, request)
        except APIError as exc:
            self._send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            log.exception("internal error serving %s %s", method, self.path)
            self._send_json(500, errors.internal_error(repr(exc)).status())

    def _authorize(self, path: str) -> None:
        token = self.server.api.token
        if token is None or path in _UNAUTHENTICATED_PATHS:
            return
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not hmac.compare_digest(header[7:].strip(), token):
            raise errors.unauthorized()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- watch streaming (chunked transfer encoding)
    def stream_watch(self, watch: ObjectWatch, request: _Request, timeout: float) -> None:
        api = self.server.api
        self.wfile.write(self._head(200, [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked"),
                                          ("Cache-Control", "no-cache, private")]))
        self.log_request(200)
        now = time.monotonic()
        deadline = now + timeout
        next_bookmark = now + api.bookmark_interval
        ok = True
        try:
            while ok and not api.stopping:
                now = time.monotonic()
                if now >= deadline:
                    break
                wake = min(deadline, next_bookmark, now + _LIVENESS_POLL)
                try:
                    events = watch.next(max(0.0, wake - now))
                except EOFError:
                    break
                if events:
                    ok = self._write_events(watch.rt, events, request)
                    next_bookmark = time.monotonic() + api.bookmark_interval
                    continue
                now = time.monotonic()
                if now >= next_bookmark:
                    next_bookmark = now + api.bookmark_interval
                    bookmark = watch.bookmark()
                    if bookmark is not None:
                        ok = self._write_events(watch.rt, [bookmark], request)
                if ok and self._client_gone():
                    ok = False
            if ok:
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.close_connection = True
        except OSError:
            self.close_connection = True
        finally:
            watch.close()

    def _write_events(self, rt: ResourceType, events: list[dict[str, Any]], request: _Request) -> bool:
        lines = []
        for event in events:
            if request.table and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                obj = event["object"]
                event = {"type": event["type"], "object": to_table(
                    rt, [obj], obj["metadata"]["resourceVersion"], time.time(), request.table_include)}
            lines.append(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        data = b"".join(lines)
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:
            return False
        return True

    def _client_gone(self) -> bool:
        """True if the client closed its side (a watch client never sends more data)."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            if isinstance(sock, ssl.SSLSocket):
                # TLS cannot peek; a readable socket may carry only a TLS record (no
                # application data), so read without blocking.
                sock.setblocking(False)
                try:
                    return not sock.recv(1)
                except ssl.SSLWantReadError:
                    return False
                finally:
                    sock.setblocking(True)
            return not sock.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True


class _HTTPServer(TrackingHTTPServer):
    """The API server's HTTP server: connection tracking from :class:`TrackingHTTPServer`, plus the TLS
    handshake in each connection's own thread."""

    thread_name = "apiserver-conn"

    def __init__(self, address: tuple[str, int], api: APIServer) -> None:
        self.api = api
        super().__init__(address, _Handler)

    def prepare_connection(self, request: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(10)
            request.do_handshake()
            request.settimeout(None)


class APIServer:
    """Serves the Kubernetes REST API subset for one :class:`Registry` on one loopback port.

    :meth:`start` binds and serves from a background thread; :meth:`stop` stops
    accepting, ends open watches (their streams end cleanly with the last chunk),
    closes every connection and waits for the connection threads.  A stopped
    server can be started again; with ``port`` fixed it binds the same port.

    ``token``: if set, every request except ``/version`` and the health checks
    needs ``Authorization: Bearer <token>`` (401 otherwise).  ``ssl_context``:
    serve HTTPS.  ``bookmark_interval``: how often an idle watch that asked for
    bookmarks gets a BOOKMARK.  ``max_watch_seconds``: watches without
    ``timeoutSeconds`` end after this long (kube-apiserver: 30-60 min).
    """

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
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.token = token
        self.ssl_context = ssl_context
        self.bookmark_interval = bookmark_interval
        self.max_watch_seconds = max_watch_seconds
        self.stopping = False
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._watches: set[ObjectWatch] = set()

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        with self._lock:
            return self._httpd is not None

    def start(self) -> None:
        """Bind (port 0 = a free port, remembered for restarts) and serve in a daemon thread."""
        with self._lock:
            if self._httpd is not None:
                raise RuntimeError("API server already running")
            httpd = _HTTPServer((self.host, self.port), self)
            if self.ssl_context is not None:
                httpd.socket = self.ssl_context.wrap_socket(httpd.socket, server_side=True,
                                                            do_handshake_on_connect=False)
            self.port = httpd.server_address[1]
            self.stopping = False
            self._httpd = httpd
            self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"apiserver :{self.port}", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving; blocks until connection threads ended (up to ``timeout`` s).  Idempotent."""
        with self._lock:
            httpd, thread = self._httpd, self._thread
            self._httpd = self._thread = None
            if httpd is None:
                return
            self.stopping = True
            watches = list(self._watches)
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout)
        for w in watches:
            w.close()
        httpd.close_all(timeout)

    # ------------------------------------------------------------------ routing
    def route(self, h: _Handler, req: _Request) -> None:
        parts = [p for p in req.path.split("/") if p]
        if req.method == "GET" and len(parts) <= 5 and self._static(h, req, parts):
            return
        if parts[:1] == ["api"] and len(parts) >= 3:
            group_version, rest = parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise errors.path_not_found()
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
            if req.method != "GET":
                raise errors.method_not_allowed(req.method)
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
            rt = resource_for(group_version, rest[0])
            if rt is None or not rt.namespaced or len(rest) > 2:
                raise errors.path_not_found()
        else:
            rt = resource_for(group_version, rest[0])
            if rt is None or len(rest) > 2 or (rt.namespaced and len(rest) == 2):
                raise errors.path_not_found()
        name = rest[1] if len(rest) == 2 else None
        if watch_path or (req.method == "GET" and name is None and req.flag("watch")):
            self._watch(h, req, rt, namespace, name)
        elif name is None:
            self._collection(h, req, rt, namespace)
        else:
            self._item(h, req, rt, namespace, name)

    def _static(self, h: _Handler, req: _Request, parts: list[str]) -> bool:
        path = "/" + "/".join(parts)
        if path == "/version":
            h._send_json(200, discovery.version_info())
        elif path == "/api":
            h._send_json(200, discovery.api_versions(f"{self.host}:{self.port}"))
        elif path == "/apis":
            h._send_json(200, discovery.api_group_list())
        elif path == "/openapi/v3":
            h._send_json(200, discovery.openapi_v3_root())
        elif path.startswith("/openapi/v3/") and (doc := discovery.openapi_v3_bytes(path[12:])) is not None:
            h._send(200, doc)
        elif parts[:1] == ["apis"] and len(parts) == 2 and (group := discovery.api_group(parts[1])) is not None:
            h._send_json(200, group)
        elif (len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis"):
            resources = discovery.api_resource_list("/".join(parts[1:]))
            if resources is None:
                return False
            h._send_json(200, resources)
        elif path in ("/healthz", "/livez", "/readyz"):
            h._send(200, b"ok", "text/plain; charset=utf-8")
        else:
            return False
        return True

    @staticmethod
    def _options(req: _Request) -> WriteOptions:
        dry_run = req.query.get("dryRun", [])
        if any(v != "All" for v in dry_run):
            raise errors.bad_request(f"unsupported dryRun value {dry_run!r}: only All is supported")
        return WriteOptions(dry_run=bool(dry_run), field_validation=req.arg("fieldValidation", "Warn"))

    @staticmethod
    def _json_body(req: _Request, rt: ResourceType) -> Any:
        if req.content_type == PROTOBUF:
            return decode_object(req.body)
        if req.content_type not in ("application/json", "", "*/*"):
            raise errors.unsupported_media_type(req.content_type, ["application/json", PROTOBUF])
        try:
            return json.loads(req.body or b"null")
        except ValueError as exc:
            raise errors.bad_request(
                f"{rt.kind} in version \"{rt.version}\" cannot be handled as a {rt.kind}: {exc}") from None

    def _reply_object(self, h: _Handler, req: _Request, rt: ResourceType, code: int, obj: dict[str, Any],
                      warnings: list[str] | None = None) -> None:
        if req.table and req.method == "GET":
            table = to_table(rt, [obj], obj["metadata"].get("resourceVersion", ""), time.time(), req.table_include)
            h._send_json(code, table, warnings)
        else:
            h._send_json(code, obj, warnings)

    def _collection(self, h: _Handler, req: _Request, rt: ResourceType, namespace: str | None) -> None:
        reg = self.registry
        if req.method == "GET":
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            items, meta = reg.list_objects(rt, namespace, matcher, req.arg("resourceVersion"),
                                   req.arg("resourceVersionMatch"), req.int_arg("limit"), req.arg("continue"))
            if req.table:
                for obj in items:
                    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
                h._send_json(200, to_table(rt, items, meta["resourceVersion"], time.time(), req.table_include,
                                           {k: v for k, v in meta.items() if k != "resourceVersion"}))
            else:
                h._send_json(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                                   "items": items})
        elif req.method == "POST":
            if rt.namespaced and namespace is None:
                raise errors.method_not_allowed("POST")
            opts = self._options(req)
            obj = reg.create(rt, namespace, self._json_body(req, rt), opts)
            h._send_json(201, obj, opts.warnings)
        elif req.method == "DELETE" and rt.namespaced and namespace is not None:
            opts = self._options(req)
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            items, meta = reg.delete_collection(rt, namespace, matcher, opts)
            h._send_json(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                               "items": items})
        else:
            raise errors.method_not_allowed(req.method)

    def _item(self, h: _Handler, req: _Request, rt: ResourceType, namespace: str | None, name: str) -> None:
        reg = self.registry
        if req.method == "GET":
            self._reply_object(h, req, rt, 200, reg.get(rt, namespace, name))
        elif req.method == "PUT":
            opts = self._options(req)
            obj = reg.update(rt, namespace, name, self._json_body(req, rt), opts)
            h._send_json(200, obj, opts.warnings)
        elif req.method == "PATCH":
            if req.content_type == _APPLY_PATCH:
                raise errors.unsupported_media_type(req.content_type, list(PATCH_TYPES))
            if req.content_type not in PATCH_TYPES:
                raise errors.unsupported_media_type(req.content_type, list(PATCH_TYPES))
            try:
                patch = json.loads(req.body or b"null")
            except ValueError as exc:
                raise errors.bad_request(f"error decoding patch: {exc}") from None
            opts = self._options(req)
            obj = reg.patch(rt, namespace, name, req.content_type, patch, opts)
            h._send_json(200, obj, opts.warnings)
        elif req.method == "DELETE":
            opts = self._options(req)
            preconditions = None
            if req.body.strip():
                try:
                    delete_options = json.loads(req.body)
                except ValueError:
                    raise errors.bad_request("malformed DeleteOptions body") from None
                if isinstance(delete_options, dict):
                    preconditions = delete_options.get("preconditions")
                    if delete_options.get("dryRun") == ["All"]:
                        opts.dry_run = True
            h._send_json(200, reg.delete(rt, namespace, name, preconditions, opts))
        else:
            raise errors.method_not_allowed(req.method)

    def _watch(self, h: _Handler, req: _Request, rt: ResourceType, namespace: str | None, name: str | None) -> None:
        field_selector = req.arg("fieldSelector")
        if name is not None:  # .../watch/.../NAME: a watch on one object
            field_selector = f"metadata.name={name}" + (f",{field_selector}" if field_selector else "")
        matcher = self.registry.matcher(rt, req.arg("labelSelector"), field_selector)
        send_initial = req.arg("sendInitialEvents")
        watch = self.registry.watch(
            rt, namespace, matcher, req.arg("resourceVersion"), req.flag("allowWatchBookmarks"),
            send_initial.lower() == "true" if send_initial else None,
        )
        timeout = float(req.int_arg("timeoutSeconds")) or self.max_watch_seconds
        with self._lock:
            if self.stopping:
                watch.close()
                raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down")
            self._watches.add(watch)
        try:
            h.stream_watch(watch, req, timeout)
        finally:
            with self._lock:
                self._watches.discard(watch)

