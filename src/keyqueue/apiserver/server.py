"""The HTTP front end: Kubernetes REST paths for every resource of the registry's :class:`~.catalogue.Catalogue`.

Served by aiohttp on one asyncio event loop (:mod:`keyqueue._httpserver`, which adds the connection limit, and the
header, idle and body limits), HTTP/1.1 keep-alive and ``TCP_NODELAY`` (asyncio's default).  Storage calls that
may block (etcd) run in a bounded pool of threads (:class:`_StoragePool`); the in-memory backend is called on the
loop.  Request bodies are
always read in full (DELETE's too), counted as they arrive, so a keep-alive connection never desynchronises and
no body beyond 3 MiB is held.  Answers are JSON; every error, also one aiohttp answers itself (a malformed
request, an unknown method), is a ``Status`` object; watches are chunked streams of JSON lines, each with a bounded
buffer: a watcher that stops reading has its watch ended, as kube-apiserver does.

Paths: ``/api/v1/...`` for the core group and ``/apis/{group}/{version}/...`` for a resource type whose ``group``
is set, each as ``[namespaces/{ns}/]{resource}[/{name}]`` and ``watch/...`` (namespaced types also list across
namespaces at ``{resource}``).  A custom resource whose CRD version declares the ``status`` subresource also has
``{resource}/{name}/status`` (get, update, patch); ``scale`` is not served (404).  Custom resources accept JSON and
merge patches only (a strategic merge patch is 415, as in kube).

Server-side apply (``application/apply-patch+yaml``) is answered with 415
Unsupported Media Type; kubectl then reports that server-side apply is not
available.  Protobuf *request* bodies of ConfigMaps, Namespaces and the self reviews are accepted
(``kubectl create configmap|namespace`` and ``kubectl auth`` send them); responses are always JSON,
which every client accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import queue
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs

from aiohttp import web

from keyqueue._httpserver import BackgroundHTTPServer, BodyError, HTTPLimits, read_body

from . import discovery, errors
from .errors import APIError
from .gc import GarbageCollector
from .managedfields import manager_from
from .objects import NAMESPACES, REVIEWS, SELF_SUBJECT_REVIEWS, SELF_SUBJECT_RULES_REVIEWS, ResourceType, to_table
from .patch import JSON_PATCH, MERGE_PATCH, PATCH_TYPES
from .protobuf import PROTOBUF, decode_object
from .registry import ObjectWatch, Registry, WriteOptions, parse_resource_version
from .storage import DEFAULT_WATCH_BUFFER

__all__ = ["MAX_JSON_DEPTH", "MAX_WATCH_SECONDS", "APIServer"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_APPLY_PATCH: Final = "application/apply-patch+yaml"
_UNAUTHENTICATED_PATHS: Final = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_LIVENESS_POLL: Final = 1.0  # seconds between checks that an idle watch's client is still there
_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_READY_TIMEOUT: Final = 2.0  # seconds /readyz waits for storage
MAX_JSON_DEPTH: Final = 100  # nesting of a request body's JSON (kube-apiserver's decoder also caps it)
MAX_WATCH_SECONDS: Final = 2**31 - 1  # the largest timeoutSeconds accepted (int32, as in ListOptions)
_REASONS: Final = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
                   408: "Timeout", 413: "RequestEntityTooLarge", 414: "RequestURITooLong", 415: "UnsupportedMediaType",
                   422: "Invalid", 431: "RequestHeaderFieldsTooLarge", 501: "BadRequest"}


def _status_body(code: int, message: str) -> tuple[bytes, str]:
    """A ``Status`` for an error aiohttp answers itself (malformed request, unknown method, ...)."""
    if code == 501:  # llhttp's "unknown method" is a client error here
        code = 405
    reason = _REASONS.get(code, "BadRequest" if code < 500 else "InternalError")
    status = APIError(code, reason, message).status()
    return json.dumps(status, separators=(",", ":")).encode(), "application/json"


def check_json(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """400 if a decoded JSON value nests deeper than ``max_depth``, holds a string that is not valid Unicode (a lone
    surrogate) or a non-finite number.  Iterative: a deep value cannot exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise errors.bad_request("invalid JSON: a string holds a lone UTF-16 surrogate") from None
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise errors.bad_request("invalid JSON: a number is out of range")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise errors.bad_request(f"invalid JSON: nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def _loads(raw: bytes, what: str) -> Any:
    try:
        value = json.loads(raw or b"null")
    except (ValueError, RecursionError) as exc:
        raise errors.bad_request(f"{what}: {type(exc).__name__}: {str(exc)[:200]}") from None
    check_json(value)
    return value


class _Request:
    """The parts of one request the routes need."""

    __slots__ = ("body", "content_type", "http", "method", "path", "query", "table", "table_include")

    def __init__(self, http: web.BaseRequest, path: str, query: dict[str, list[str]], body: bytes) -> None:
        self.http = http
        self.method = http.method
        self.path = path
        self.query = query
        self.body = body
        self.content_type = http.headers.get("Content-Type", "").split(";")[0].strip().lower()
        self.table = _wants_table(http.headers.get("Accept", ""))
        self.table_include = self.arg("includeObject", "Metadata")

    def arg(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return self.arg(name).lower() in ("true", "1")

    def int_arg(self, name: str, maximum: int = 2**63 - 1) -> int:
        """A non-negative integer query parameter (0 if absent); 400 if malformed, negative or above ``maximum``."""
        raw = self.arg(name, "0") or "0"
        value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 19 else -1
        if not 0 <= value <= maximum:
            raise errors.bad_request(f"invalid {name}: {json.dumps(raw[:100])}: must be an integer within "
                                     f"0..{maximum}")
        return value


def _verb(method: str, named: bool, watch: bool) -> str:
    """The API verb of a request (as discovery lists verbs)."""
    if method == "GET":
        return "watch" if watch else "get" if named else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]


def _wants_table(accept: str) -> bool:
    for part in accept.split(","):
        params = {p.strip().split("=", 1)[0]: p.strip().split("=", 1)[-1] for p in part.split(";")[1:]}
        if params.get("as") == "Table" and params.get("g", "meta.k8s.io") == "meta.k8s.io":
            return True
    return False


def _json_response(code: int, obj: Any, warnings: list[str] | None = None) -> web.Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    resp = web.Response(status=code, body=body, content_type="application/json")
    resp.headers["Cache-Control"] = "no-cache, private"
    for w in warnings or ():
        resp.headers.add("Warning", '299 - "' + w.replace('"', '\\"') + '"')
    return resp


class _StoragePool:
    """At most ``threads`` threads that run blocking storage calls for the event loop.

    :meth:`run` queues the call and returns an asyncio future, which the thread that ran it resolves with one
    ``call_soon_threadsafe`` -- two hand-offs per call and no :class:`concurrent.futures.Future` in between (what
    ``loop.run_in_executor`` adds: about half its cost per call, measured).  Threads start as calls need them.  A
    call whose awaiting task was cancelled still runs to its end; its result is dropped.  :meth:`shutdown` refuses
    new calls, cancels the queued ones that no thread has started and waits for the running ones.
    """

    def __init__(self, threads: int, name: str) -> None:
        self._max_threads = threads
        self._name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[..., Any],
                                             tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._outstanding = 0  # calls queued or running (under _lock)
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args)`` (from the loop's thread); ``RuntimeError`` after :meth:`shutdown`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the storage pool is shut down")
            self._queue.put((loop, fut, fn, args))
            self._outstanding += 1
            if self._outstanding > len(self._threads) and len(self._threads) < self._max_threads:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
        return fut

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, fut, fn, args = item
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting task, as an executor does
                self._deliver(loop, _fail, fut, exc)
            else:
                self._deliver(loop, _succeed, fut, result)
            finally:
                with self._lock:
                    self._outstanding -= 1
            del item, fut, args  # hold nothing of a finished call while waiting for the next

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, how: Callable[[asyncio.Future[Any], Any], None],
                 fut: asyncio.Future[Any], value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(how, fut, value)

    def shutdown(self) -> None:
        """Refuse new calls, cancel the queued ones, wait for the running ones (idempotent)."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._deliver(item[0], _cancel, item[1], None)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()


def _succeed(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _cancel(fut: asyncio.Future[Any], _value: Any) -> None:
    fut.cancel()


class _WatchStream:
    """Loop-side state of one watch response: woken by the storage thread that queued an event."""

    def __init__(self, loop: asyncio.AbstractEventLoop, watch: ObjectWatch, request: web.BaseRequest) -> None:
        self.loop = loop
        self.watch = watch
        self.request = request
        self.wake = asyncio.Event()
        self.ended = False

    def notify(self) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is over anyway
            self.loop.call_soon_threadsafe(self._on_loop)

    def _on_loop(self) -> None:
        self.wake.set()
        if self.watch.overflowed:  # the client stopped reading: its write may be stuck, so cut the connection
            transport = self.request.transport
            if transport is not None:
                transport.abort()

    def end(self) -> None:
        self.ended = True
        self.wake.set()


class APIServer:
    """Serves the Kubernetes REST API subset for one :class:`Registry` on one loopback port.

    :meth:`start` binds and serves from a background thread (an asyncio loop); :meth:`stop` stops accepting, ends
    open watches (their streams end cleanly with the last chunk), closes every connection and waits for the
    server's thread and its storage threads.  A stopped server can be started again; with ``port`` fixed it binds
    the same port.

    ``token``: if set, every request except ``/version`` and the health checks
    needs ``Authorization: Bearer <token>`` (401 otherwise).  ``ssl_context``:
    serve HTTPS.  ``bookmark_interval``: how often an idle watch that asked for
    bookmarks gets a BOOKMARK.  ``max_watch_seconds``: watches without
    ``timeoutSeconds`` end after this long (kube-apiserver: 30-60 min).
    ``limits``: connection, header, idle and body limits (:class:`~keyqueue._httpserver.HTTPLimits`).
    ``watch_buffer``: events one watch may hold undelivered before the server ends it (a client that stops
    reading).  ``storage_threads``: the bound of the thread pool that runs blocking storage calls.

    ``user``: the user name a request with the token is authenticated as (in the groups ``system:masters`` and
    ``system:authenticated``), as ``SelfSubjectReview`` (``kubectl auth whoami``) reports it; without a token
    every request is ``system:anonymous``.  Nothing is authorized: every ``SelfSubjectAccessReview``
    (``kubectl auth can-i``) answers allowed.

    ``/healthz`` and ``/livez`` answer 200 while the server runs; ``/readyz`` answers 200 only if storage answers
    within 2 s (503 otherwise).
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

    def start(self) -> None:
        """Bind (port 0 = a free port, remembered for restarts) and serve in a daemon thread."""
        with self._lock:
            if self._http is not None:
                raise RuntimeError("API server already running")
            self.stopping = False
            self.registry.serve_stored_crds()  # a server (re)started on storage that has CRDs serves them
            executor = _StoragePool(self.storage_threads, "apiserver-storage")
            http = BackgroundHTTPServer(self._handle, self.host, self.port, limits=self.limits,
                                        ssl_context=self.ssl_context, error_body=_status_body,
                                        name="apiserver", before_stop=self._end_streams)
            try:
                http.start()
            except BaseException:
                executor.shutdown()
                raise
            self.port = http.port
            self._http, self._executor = http, executor
            self._gc = GarbageCollector(self.registry)
            self._gc.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving; blocks until the server's threads ended (up to ``timeout`` s each).  Idempotent."""
        with self._lock:
            http, executor, gc = self._http, self._executor, self._gc
            self._http = self._executor = self._gc = None
            if http is None:
                return
            self.stopping = True
        if gc is not None:
            gc.stop(timeout)
        http.stop(timeout)
        if executor is not None:
            executor.shutdown()

    async def _end_streams(self) -> None:
        for stream in list(self._streams):
            stream.end()
        deadline = time.monotonic() + 2.0
        while self._streams and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a storage call: on the loop for a non-blocking backend, else in the bounded thread pool."""
        if not self._blocking:
            return fn(*args)
        executor = self._executor
        if executor is None:
            raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down")
        try:
            fut = executor.run(fn, *args)
        except RuntimeError:
            raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down") from None
        return await fut

    # ------------------------------------------------------------------ request plumbing
    async def _handle(self, http: web.BaseRequest) -> web.StreamResponse:
        try:
            body = await read_body(http, self.limits)
        except BodyError as exc:
            resp = _json_response(exc.code, APIError(exc.code, _REASONS.get(exc.code, "BadRequest"),
                                                     str(exc)).status())
            resp.force_close()  # the rest of the body was not read: the connection is done
            return resp
        try:
            path = http.path.rstrip("/") or "/"
            request = _Request(http, path, parse_qs(http.query_string, keep_blank_values=True), body)
            self._authorize(http, path)
            return await self.route(request)
        except APIError as exc:
            return _json_response(exc.code, exc.status())
        except UnicodeError as exc:
            return _json_response(400, errors.bad_request(f"invalid text in the request: {exc}").status())
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("internal error serving %s %s", http.method, http.path_qs)
            return _json_response(500, errors.internal_error(repr(exc)).status())

    def _authorize(self, http: web.BaseRequest, path: str) -> None:
        token = self._token_bytes
        if token is None or path in _UNAUTHENTICATED_PATHS:
            return
        header = http.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise errors.unauthorized()
        given = header[7:].strip().encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, token):
            raise errors.unauthorized()

    # ------------------------------------------------------------------ routing
    async def route(self, req: _Request) -> web.StreamResponse:
        if req.method not in _METHODS:
            raise errors.method_not_allowed(req.method)
        parts = [p for p in req.path.split("/") if p]
        if req.method == "GET":
            static = await self._static(req, parts)
            if static is not None:
                return static
        if len(parts) >= 3 and parts[0] == "api":
            group_version, rest = parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise errors.path_not_found()
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
            if req.method != "GET":
                raise errors.method_not_allowed(req.method)
            if not rest:
                raise errors.path_not_found()
        if group_version == "v1" and len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "finalize":
            if req.method != "PUT" or watch_path:  # the namespace finalize subresource: update only
                raise errors.method_not_allowed(req.method)
            opts = self._options(req)
            body = self._json_body(req, NAMESPACES)
            obj = await self._call(self.registry.finalize_namespace, rest[1], body, opts)
            return _json_response(200, obj, opts.warnings)
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        catalogue = self.registry.catalogue
        rt = catalogue.resource_for(group_version, rest[0])
        subresource = ""
        if (len(rest) == 3 and rest[2] == "status" and not watch_path and rt is not None and rt.custom is not None
                and rt.custom.status):  # a custom resource's status subresource (scale is not served)
            subresource, rest = "status", rest[:2]
        if namespace is not None:
            if rt is None or not rt.namespaced or len(rest) > 2:
                raise errors.path_not_found()
        elif rt is None or len(rest) > 2 or (rt.namespaced and len(rest) == 2):
            raise errors.path_not_found()
        name = rest[1] if len(rest) == 2 else None
        verb = _verb(req.method, name is not None, watch_path or req.flag("watch"))
        if verb not in rt.discovery_verbs or (subresource and verb not in ("get", "update", "patch")):
            raise errors.method_not_allowed(req.method)
        if watch_path or (req.method == "GET" and name is None and req.flag("watch")):
            return await self._watch(req, rt, namespace, name)
        if name is None:
            return await self._collection(req, rt, namespace)
        return await self._item(req, rt, namespace, name, subresource)

    async def _static(self, req: _Request, parts: list[str]) -> web.StreamResponse | None:
        if len(parts) > 5:
            return None
        path = "/" + "/".join(parts)
        catalogue = self.registry.catalogue
        if path == "/version":
            return _json_response(200, discovery.version_info())
        if path == "/api":
            return _json_response(200, discovery.api_versions(f"{self.host}:{self.port}"))
        if path == "/apis":
            return _json_response(200, catalogue.api_group_list())
        if path == "/openapi/v3":
            return _json_response(200, catalogue.openapi_v3_root())
        if path.startswith("/openapi/v3/") and (doc := catalogue.openapi_v3_bytes(path[12:])) is not None:
            return web.Response(status=200, body=doc, content_type="application/json")
        if parts[:1] == ["apis"] and len(parts) == 2 and (group := catalogue.api_group(parts[1])) is not None:
            return _json_response(200, group)
        if (len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis"):
            resources = catalogue.api_resource_list("/".join(parts[1:]))
            if resources is not None:
                return _json_response(200, resources)
            return None
        if path in ("/healthz", "/livez"):
            return web.Response(status=200, body=b"ok", content_type="text/plain", charset="utf-8")
        if path == "/readyz":
            return await self._readyz()
        return None

    async def _readyz(self) -> web.StreamResponse:
        backend = self.registry.backend
        try:
            if self._blocking:
                await asyncio.wait_for(self._call(backend.check, _READY_TIMEOUT), _READY_TIMEOUT + 0.5)
            else:
                backend.check(_READY_TIMEOUT)
        except Exception as exc:
            text = f"[-]storage failed: {type(exc).__name__}: {exc}\nreadyz check failed\n"
            return web.Response(status=503, body=text.encode(), content_type="text/plain", charset="utf-8")
        return web.Response(status=200, body=b"ok", content_type="text/plain", charset="utf-8")

    @staticmethod
    def _options(req: _Request) -> WriteOptions:
        dry_run = req.query.get("dryRun", [])
        if any(v != "All" for v in dry_run):
            raise errors.bad_request(f"unsupported dryRun value {dry_run!r}: only All is supported")
        return WriteOptions(dry_run=bool(dry_run), field_validation=req.arg("fieldValidation", "Warn"),
                            field_manager=manager_from(req.arg("fieldManager"), req.http.headers.get("User-Agent", "")))

    @staticmethod
    def _json_body(req: _Request, rt: ResourceType) -> Any:
        if req.content_type == PROTOBUF:
            return decode_object(req.body)
        if req.content_type not in ("application/json", "", "*/*"):
            raise errors.unsupported_media_type(req.content_type, ["application/json", PROTOBUF])
        return _loads(req.body, f"{rt.kind} in version \"{rt.api_version}\" cannot be handled as a {rt.kind}")

    async def _collection(self, req: _Request, rt: ResourceType, namespace: str | None) -> web.StreamResponse:
        reg = self.registry
        if req.method == "GET":
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            limit = req.int_arg("limit")
            items, meta = await self._call(reg.list_objects, rt, namespace, matcher, req.arg("resourceVersion"),
                                           req.arg("resourceVersionMatch"), limit, req.arg("continue"))
            if req.table:
                for obj in items:
                    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
                return _json_response(200, to_table(rt, items, meta["resourceVersion"], time.time(),
                                                    req.table_include,
                                                    {k: v for k, v in meta.items() if k != "resourceVersion"}))
            return _json_response(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                                        "items": items})
        if req.method == "POST":
            if rt.namespaced and namespace is None:
                raise errors.method_not_allowed("POST")
            opts = self._options(req)
            body = self._json_body(req, rt)
            if rt in REVIEWS:
                return _json_response(201, self._review(req, rt, body, opts), opts.warnings)
            obj = await self._call(reg.create, rt, namespace, body, opts)
            return _json_response(201, obj, opts.warnings)
        if req.method == "DELETE" and rt.namespaced and namespace is not None:
            opts, _preconditions = self._delete_options(req)  # as kube: preconditions apply to single deletes
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            items, meta = await self._call(reg.delete_collection, rt, namespace, matcher, opts)
            return _json_response(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                                        "items": items})
        raise errors.method_not_allowed(req.method)

    @staticmethod
    def _delete_options(req: _Request) -> tuple[WriteOptions, dict[str, Any] | None]:
        """A delete's options (query and ``DeleteOptions`` body): dry run, ``propagationPolicy`` (or the
        deprecated ``orphanDependents``; 422 for an unknown one or both) and the preconditions."""
        opts = APIServer._options(req)
        preconditions = None
        policy = req.arg("propagationPolicy")
        if req.body.strip():
            delete_options = _loads(req.body, "malformed DeleteOptions body")
            if isinstance(delete_options, dict):
                preconditions = delete_options.get("preconditions")
                if delete_options.get("dryRun") == ["All"]:
                    opts.dry_run = True
                policy = delete_options.get("propagationPolicy") or policy
                orphan = delete_options.get("orphanDependents")
                if isinstance(orphan, bool):  # the deprecated spelling of Orphan / Background
                    if policy:
                        raise errors.invalid("DeleteOptions", "deleteoptions", "", [(
                            "FieldValueInvalid", "propagationPolicy",
                            f"Invalid value: {json.dumps(policy)}: orphanDependents and deletionPropagation "
                            "cannot be both set")])
                    policy = "Orphan" if orphan else "Background"
        # the garbage collector (gc.py) acts on the finalizers the policy sets
        if policy not in ("", "Orphan", "Background", "Foreground"):
            raise errors.invalid("DeleteOptions", "deleteoptions", "", [(
                "FieldValueNotSupported", "propagationPolicy",
                f"Unsupported value: {json.dumps(policy)}: supported values: \"Foreground\", "
                "\"Background\", \"Orphan\"")])
        if preconditions is not None and not isinstance(preconditions, dict):
            raise errors.bad_request("DeleteOptions.preconditions must be an object")
        opts.propagation_policy = str(policy)
        return opts, preconditions

    async def _item(self, req: _Request, rt: ResourceType, namespace: str | None, name: str,
                    subresource: str = "") -> web.StreamResponse:
        reg = self.registry
        if req.method == "GET":
            obj = await self._call(reg.get, rt, namespace, name)
            if req.table:
                return _json_response(200, to_table(rt, [obj], obj["metadata"].get("resourceVersion", ""),
                                                    time.time(), req.table_include))
            return _json_response(200, obj)
        if req.method == "PUT":
            opts = self._options(req)
            body = self._json_body(req, rt)
            obj = await self._call(reg.update, rt, namespace, name, body, opts, subresource)
            return _json_response(200, obj, opts.warnings)
        if req.method == "PATCH":
            # Custom resources take no strategic merge patch (as in kube: their schema has no patch strategies).
            accepted = [JSON_PATCH, MERGE_PATCH] if rt.custom is not None else list(PATCH_TYPES)
            if req.content_type not in accepted:  # server-side apply (_APPLY_PATCH) included
                raise errors.unsupported_media_type(req.content_type, accepted)
            patch = _loads(req.body, "error decoding patch")
            opts = self._options(req)
            obj = await self._call(reg.patch, rt, namespace, name, req.content_type, patch, opts, subresource)
            return _json_response(200, obj, opts.warnings)
        if req.method == "DELETE":
            opts, preconditions = self._delete_options(req)
            return _json_response(200, await self._call(reg.delete, rt, namespace, name, preconditions, opts))
        raise errors.method_not_allowed(req.method)

    # ------------------------------------------------------------------ reviews
    def _user_info(self, http: web.BaseRequest) -> dict[str, Any]:
        """Who the request is from: :attr:`user` when it carried the server's token, else ``system:anonymous``
        (a server without a token takes every request as anonymous, and allows it)."""
        if self._token_bytes is not None and http.headers.get("Authorization", "").startswith("Bearer "):
            return {"username": self.user, "groups": ["system:masters", "system:authenticated"]}
        return {"username": "system:anonymous", "groups": ["system:unauthenticated"]}

    def _review(self, req: _Request, rt: ResourceType, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """Answer a SelfSubjectAccessReview (every request is allowed: no authorization), a SelfSubjectRulesReview
        (every verb on everything) or a SelfSubjectReview (the requester's user info).  Nothing is stored; 422 for
        an access review that names neither or both of ``resourceAttributes`` and ``nonResourceAttributes``, and
        for a rules review without ``spec.namespace``."""
        obj = self.registry.decode_body(rt, body, opts)
        meta = obj["metadata"]
        meta.pop("namespace", None)
        meta["creationTimestamp"] = None
        if rt is SELF_SUBJECT_REVIEWS:
            obj["status"] = {"userInfo": self._user_info(req.http)}
            return obj
        if rt is SELF_SUBJECT_RULES_REVIEWS:
            if not (obj.get("spec") or {}).get("namespace"):
                raise errors.invalid(rt.kind, rt.qualified_name, "", [
                    ("FieldValueRequired", "spec.namespace", "Required value")])
            obj["status"] = {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            }
            return obj
        spec = obj.get("spec") or {}
        if "resourceAttributes" in spec and "nonResourceAttributes" in spec:
            raise errors.invalid(rt.kind, rt.qualified_name, "", [(
                "FieldValueInvalid", "spec.nonResourceAttributes",
                "Invalid value: cannot be specified in combination with resourceAttributes")])
        if "resourceAttributes" not in spec and "nonResourceAttributes" not in spec:
            raise errors.invalid(rt.kind, rt.qualified_name, "", [(
                "FieldValueRequired", "spec.resourceAttributes",
                "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified")])
        obj["spec"] = spec
        obj["status"] = {"allowed": True, "reason": "keyqueue's test API server allows every request"}
        return obj

    # ------------------------------------------------------------------ watch
    async def _watch(self, req: _Request, rt: ResourceType, namespace: str | None,
                     name: str | None) -> web.StreamResponse:
        # Every parameter is checked before anything is opened: a bad request leaves nothing behind.
        field_selector = req.arg("fieldSelector")
        if name is not None:  # .../watch/.../NAME: a watch on one object
            field_selector = f"metadata.name={name}" + (f",{field_selector}" if field_selector else "")
        matcher = self.registry.matcher(rt, req.arg("labelSelector"), field_selector)
        timeout = float(req.int_arg("timeoutSeconds", MAX_WATCH_SECONDS)) or self.max_watch_seconds
        send_initial = req.arg("sendInitialEvents")
        if send_initial.lower() not in ("", "true", "false"):
            raise errors.bad_request(f"invalid sendInitialEvents: {json.dumps(send_initial[:100])}")
        allow_bookmarks = req.flag("allowWatchBookmarks")
        resource_version = req.arg("resourceVersion")
        if resource_version not in ("", "0"):
            parse_resource_version(resource_version)
        if self.stopping:
            raise errors.APIError(503, "ServiceUnavailable", "the server is shutting down")
        watch = await self._call(
            self.registry.watch, rt, namespace, matcher, resource_version, allow_bookmarks,
            send_initial.lower() == "true" if send_initial else None, self.watch_buffer,
        )
        stream = _WatchStream(asyncio.get_running_loop(), watch, req.http)
        self._streams.add(stream)
        try:
            watch.set_listener(stream.notify)
            return await self._stream_watch(stream, req, timeout)
        finally:
            self._streams.discard(stream)
            watch.set_listener(None)
            await self._call(watch.close)

    async def _stream_watch(self, stream: _WatchStream, req: _Request, timeout: float) -> web.StreamResponse:
        http = req.http
        watch = stream.watch
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        await resp.prepare(http)
        now = time.monotonic()
        deadline = now + timeout
        next_bookmark = now + self.bookmark_interval
        try:
            while not stream.ended:
                stream.wake.clear()
                try:
                    events = watch.next(0)
                except EOFError:
                    break
                if events:
                    await resp.write(self._encode_events(watch.rt, events, req))
                    next_bookmark = time.monotonic() + self.bookmark_interval
                    continue
                now = time.monotonic()
                if now >= deadline:
                    break
                if now >= next_bookmark:
                    next_bookmark = now + self.bookmark_interval
                    bookmark = watch.bookmark()
                    if bookmark is not None:
                        await resp.write(self._encode_events(watch.rt, [bookmark], req))
                    continue
                transport = http.transport
                if transport is None or transport.is_closing():
                    return resp  # the client is gone
                wait = min(deadline, next_bookmark, now + _LIVENESS_POLL) - now
                try:
                    async with asyncio.timeout(max(0.0, wait)):
                        await stream.wake.wait()
                except TimeoutError:
                    pass
            await resp.write_eof()
        except (ConnectionError, RuntimeError):  # the client went away (or the write hit a closed transport)
            resp.force_close()
        return resp

    @staticmethod
    def _encode_events(rt: ResourceType, events: list[dict[str, Any]], req: _Request) -> bytes:
        lines = []
        for event in events:
            if req.table and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                obj = event["object"]
                event = {"type": event["type"], "object": to_table(
                    rt, [obj], obj["metadata"]["resourceVersion"], time.time(), req.table_include)}
            lines.append(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        return b"".join(lines)
