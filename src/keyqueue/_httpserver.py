"""The HTTP/1.1 layer of the test API server and the pipeline lab's trigger server: aiohttp's low-level server on
an asyncio event loop in one background thread, with the limits that keep one client from exhausting it.

aiohttp (``aiohttp.web.Server``) parses requests with llhttp (C: chunk framing costs linear time, also for
64 k one-byte chunks), keeps connections alive, closes idle ones and streams request bodies. This module adds what
it lacks, thinly:

* ``max_connections``: a connection beyond the limit is closed at once (no byte is read from it);
* ``header_timeout``: aiohttp's keep-alive timer runs from the moment a connection opens and again from the end of
  each response, and it closes the connection if the next request's headers are not complete by then (slowloris
  included), so the header timeout and the idle keep-alive timeout are one value, ``header_timeout``;
* :func:`read_body`: the request body, read as it arrives with a byte limit (chunked or not; 413 as soon as the
  limit is crossed, or as soon as a first chunk declares more than the limit) and a deadline for the whole body
  (408);
* errors that aiohttp answers itself (a malformed request line, an unknown method, oversized headers) go through
  ``error_body`` so that the API server can answer them with a Kubernetes ``Status``.

Handlers are coroutines run on the server's loop; blocking work belongs in an executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["BackgroundHTTPServer", "BodyError", "HTTPLimits", "read_body"]

log = logging.getLogger(__name__)

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
ErrorBody = Callable[[int, str], tuple[bytes, str]]


@dataclass(frozen=True)
class HTTPLimits:
    """Per-server limits. Times are seconds, sizes bytes.

    ``header_timeout``: a connection whose next request headers are not complete this long after it opened or after
    its previous response ended is closed (this is also the idle keep-alive timeout). ``body_timeout``: the whole
    request body must arrive within this long after its headers. ``max_body``: a larger body is refused with 413.
    ``max_connections``: connections open at once; more are closed on arrival. ``max_header_bytes``: the longest
    request line or header field.
    """

    header_timeout: float = 30.0
    body_timeout: float = 60.0
    max_body: int = 3 * 1024 * 1024
    max_connections: int = 4096
    max_header_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        for label in ("header_timeout", "body_timeout"):
            value = getattr(self, label)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise ValueError(f"{label} must be a positive finite number of seconds, got "
                                 f"{type(value).__name__}: {value!r}")
        for label in ("max_body", "max_connections", "max_header_bytes"):
            value = getattr(self, label)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{label} must be a positive int, got {type(value).__name__}: {value!r}")


class BodyError(Exception):
    """The request body could not be read: ``code`` is 413 (too large), 408 (too slow) or 400 (malformed)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def read_body(request: web.BaseRequest, limits: HTTPLimits) -> bytes:
    """Read the whole request body, counting bytes as they arrive.

    Raises :class:`BodyError` (413 once more than ``limits.max_body`` bytes arrived, whatever the framing; 408 if the
    body is not complete within ``limits.body_timeout``; 400 if its framing is broken). After a ``BodyError`` the
    rest of the body is unread: the caller must close the connection (:func:`close_after`).
    """
    if not request.body_exists:
        return b""
    length = request.content_length
    if length is not None and length > limits.max_body:
        raise BodyError(413, f"request body of {length} bytes exceeds the limit of {limits.max_body} bytes")
    content = request.content
    if content.is_eof():  # all of it arrived with the headers (the common small body): no timer, no wait
        try:
            data = content.read_nowait(-1)
        except Exception as exc:  # a payload error aiohttp recorded
            raise BodyError(400, f"request body: {type(exc).__name__}: {exc}") from None
        if len(data) > limits.max_body:
            raise BodyError(413, f"request body exceeds the limit of {limits.max_body} bytes")
        return data
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout):
            protocol = request.protocol
            if isinstance(protocol, _Protocol) and "chunked" in request.headers.get("Transfer-Encoding", "").lower():
                first = await _first_chunk(protocol, content, limits.max_body)
                if not first:
                    return b""
                size, parts = len(first), [first]
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limits.max_body:
                    raise BodyError(413, f"request body exceeds the limit of {limits.max_body} bytes")
                parts.append(chunk)
    except TimeoutError:
        raise BodyError(408, f"request body not complete within {limits.body_timeout:g} s") from None
    except BodyError:
        raise
    except Exception as exc:  # aiohttp's payload errors (broken chunk framing, connection lost)
        raise BodyError(400, f"request body: {type(exc).__name__}: {exc}") from None
    return b"".join(parts)


_RECENT = 512  # bytes of a connection's input kept for _declared_chunk: the end of a request head and a chunk line
_FIRST_CHUNK = re.compile(rb"\r\n\r\n([0-9A-Fa-f]+)[^\r\n]*(?:\r\n?)?$")


def _declared_chunk(recent: bytes) -> int | None:
    """The size a chunked body's first chunk declares, from the connection's latest input while none of the body
    was delivered yet (the input then ends with the request head and the chunk-size line, maybe only part of it:
    more hex digits can only make the size larger). ``None`` if no chunk-size line is there."""
    match = _FIRST_CHUNK.search(recent)
    return int(match.group(1), 16) if match is not None else None


async def _first_chunk(protocol: _Protocol, content: Any, limit: int) -> bytes:
    """The first data of a chunked body, or 413 as soon as its first chunk declares more than ``limit`` bytes
    (llhttp reads the declared size but delivers nothing until data arrives: without this, a client that declares
    a huge chunk and waits would get no answer until the body deadline)."""
    loop = asyncio.get_running_loop()
    too_large: asyncio.Future[int] = loop.create_future()

    def check() -> None:
        declared = _declared_chunk(protocol.recent) if content.total_bytes == 0 else None
        if declared is not None and declared > limit and not too_large.done():
            too_large.set_result(declared)

    check()
    protocol.on_data = check
    read = asyncio.ensure_future(content.readany())
    try:
        await asyncio.wait((read, too_large), return_when=asyncio.FIRST_COMPLETED)
    finally:
        protocol.on_data = None
        if not read.done():
            read.cancel()
    if too_large.done():
        raise BodyError(413, f"a request body chunk of {too_large.result()} bytes exceeds the limit of {limit} "
                             "bytes")
    data: bytes = read.result()
    if len(data) > limit:
        raise BodyError(413, f"request body exceeds the limit of {limit} bytes")
    return data


class _Protocol(RequestHandler):
    """aiohttp's connection protocol plus the connection limit and error bodies of :class:`BackgroundHTTPServer`."""

    def __init__(self, owner: BackgroundHTTPServer, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._owner = owner
        self._counted = False
        self.recent = b""  #: the end of this connection's input (see _declared_chunk)
        self.on_data: Callable[[], None] | None = None  #: called after each piece of input was parsed

    def data_received(self, data: bytes) -> None:
        self.recent = (self.recent + data[-_RECENT:])[-_RECENT:]
        super().data_received(data)
        if self.on_data is not None:
            self.on_data()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        owner = self._owner
        if owner.open_connections >= owner.limits.max_connections:
            owner.refused_connections += 1
            cast(asyncio.Transport, transport).abort()  # connection_lost follows; it finds nothing to undo
            return
        owner.open_connections += 1
        owner.transports.add(transport)
        self._counted = True
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._counted:
            self._counted = False
            self._owner.open_connections -= 1
            if self.transport is not None:
                self._owner.transports.discard(self.transport)
            super().connection_lost(exc)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        text = message or (str(exc) if exc is not None else "")
        if status >= 500 and exc is not None:
            log.error("HTTP server error %s", text, exc_info=exc)
        body, content_type = self._owner.error_body(status, text or "bad request")
        resp = web.Response(status=status, body=body, content_type=content_type.split(";")[0])
        resp.force_close()
        return resp


class _Server(web.Server):
    def __init__(self, owner: BackgroundHTTPServer, handler: Handler, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._owner = owner
        self._proto_kwargs = kwargs

    def __call__(self) -> RequestHandler:
        return _Protocol(self._owner, self, loop=self._loop, **self._proto_kwargs)


def _default_error_body(code: int, message: str) -> tuple[bytes, str]:
    return (message + "\n").encode("utf-8", "replace"), "text/plain"


class BackgroundHTTPServer:
    """An aiohttp server for ``handler`` on ``host:port``, served by an event loop in a daemon thread.

    :meth:`start` blocks until the socket listens (``OSError`` if the port is taken); :meth:`stop` calls
    ``before_stop`` on the loop (to end long-lived responses such as watch streams), closes the listener and every
    connection, waits up to ``timeout`` s for handlers, calls ``after_stop`` on the loop (to release what the
    handlers used, e.g. a client session) and joins the thread. A stopped server can be started again.
    ``error_body(code, message) -> (body, content_type)`` renders the errors aiohttp answers itself.
    """

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: HTTPLimits | None = None,
        ssl_context: Any = None,
        error_body: ErrorBody = _default_error_body,
        name: str = "http",
        before_stop: Callable[[], Awaitable[None]] | None = None,
        after_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.limits = limits or HTTPLimits()
        self.ssl_context = ssl_context
        self.error_body = error_body
        self.name = name
        self.before_stop = before_stop
        self.after_stop = after_stop
        self.open_connections = 0  # touched on the loop thread only
        self.transports: set[asyncio.BaseTransport] = set()  # the open connections (loop thread only)
        self.refused_connections = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.BaseRunner | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.loop is not None

    def start(self) -> None:
        """Bind and serve; ``port`` 0 picks a free port, remembered for a restart."""
        with self._lock:
            if self.loop is not None:
                raise RuntimeError(f"{self.name} server already running")
            loop = asyncio.new_event_loop()
            started: list[BaseException | None] = []
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                try:
                    loop.run_until_complete(self._start_site())
                except BaseException as exc:
                    started.append(exc)
                    ready.set()
                    loop.close()
                    return
                started.append(None)
                ready.set()
                try:
                    loop.run_forever()
                finally:
                    loop.close()

            thread = threading.Thread(target=serve, name=f"{self.name} :{self.port}", daemon=True)
            thread.start()
            ready.wait()
            if started[0] is not None:
                thread.join()
                raise started[0]
            self.loop, self._thread = loop, thread

    async def _start_site(self) -> None:
        limits = self.limits
        server = _Server(self, self.handler, keepalive_timeout=limits.header_timeout,
                         max_line_size=limits.max_header_bytes, max_field_size=limits.max_header_bytes,
                         access_log=None)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context, backlog=1024,
                           reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    def connection_sockets(self, timeout: float = 5.0) -> list[socket.socket]:
        """The sockets of the open connections (a snapshot taken on the loop)."""
        loop = self.loop
        if loop is None:
            return []

        async def collect() -> list[socket.socket]:
            return [t.get_extra_info("socket") for t in self.transports]

        return asyncio.run_coroutine_threadsafe(collect(), loop).result(timeout)

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on the loop (thread-safe; nothing happens if the server is not running)."""
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(fn)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and wait (up to ``timeout`` s) for it; idempotent."""
        with self._lock:
            loop, thread, runner = self.loop, self._thread, self._runner
            self.loop = self._thread = self._runner = None
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            if self.before_stop is not None:
                with contextlib.suppress(Exception):
                    await self.before_stop()
            if runner is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(runner.cleanup(), timeout)
            if self.after_stop is not None:
                with contextlib.suppress(Exception):
                    await self.after_stop()

        fut = asyncio.run_coroutine_threadsafe(shutdown(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout + 1.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
