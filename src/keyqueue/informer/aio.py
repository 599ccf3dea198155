"""A list-watch informer for asyncio: one task per informer, no thread (:class:`Informer`).

The same protocol and guarantees as the threaded :class:`keyqueue.informer.Informer` (paged list, then a watch
from its resourceVersion with bookmarks; a stream the server ends is re-opened at once; a broken one after an
exponential backoff with jitter; 410 Gone relists, synthesising :class:`~keyqueue.informer.DeletedFinalStateUnknown`
for what vanished; an optional resync), with the requests made by ``aiohttp`` on the running event loop. The
official ``kubernetes`` client is blocking, so it is used only for its configuration: :class:`Transport` reads the
host, TLS files and bearer token (refreshed before each request, as the client does) of an ``ApiClient``'s
``configuration``. Handlers are plain callables run on the event loop, one event at a time, in order (the usual
one is ``queue.add(key)``); one that raises is logged and counted.

Needs ``aiohttp`` (installed with the ``apiserver`` and ``testing`` extras; the ``manager`` extra names it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

from keyqueue.informer.informer import Backoff, HandlerRegistration, InformerStats
from keyqueue.informer.store import DeletedFinalStateUnknown, IndexFunc, KeyFunc, Obj, Store, meta_namespace_key

__all__ = ["APIStatusError", "Informer", "Transport"]

log = logging.getLogger("keyqueue.informer")

_GONE: Final = 410


class APIStatusError(Exception):
    """The server answered a list or watch with a non-2xx status (``status``)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class _Gone(Exception):
    pass


class Transport:
    """GET requests with an ``ApiClient``'s configuration (host, TLS, bearer token) on one ``aiohttp`` session,
    made lazily in the event loop of the first request. :meth:`close` (a coroutine) closes the session."""

    def __init__(self, api_client: Any) -> None:
        self._config = api_client.configuration
        self._session: Any = None
        self._ssl: ssl.SSLContext | bool | None = None

    def _ssl_context(self) -> ssl.SSLContext | bool:
        c = self._config
        if not c.host.startswith("https"):
            return False
        if not c.verify_ssl:
            return False
        ctx = ssl.create_default_context(cafile=c.ssl_ca_cert) if c.ssl_ca_cert else ssl.create_default_context()
        if c.cert_file:
            ctx.load_cert_chain(c.cert_file, c.key_file)
        if c.assert_hostname is False:
            ctx.check_hostname = False
        return ctx

    def _headers(self, watch: bool) -> dict[str, str]:
        headers = {"Accept": "application/json;stream=watch" if watch else "application/json"}
        for auth in self._config.auth_settings().values():  # calls the refresh hook (exec plugins, token files)
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    @contextlib.asynccontextmanager
    async def get(self, path: str, params: Mapping[str, str], *, watch: bool, connect_timeout: float,
                  read_timeout: float) -> AsyncIterator[Any]:
        """``GET path?params``; yields the ``aiohttp`` response (status 2xx) or raises :class:`APIStatusError`."""
        import aiohttp

        if self._session is None or self._session.closed:
            if self._ssl is None:
                self._ssl = self._ssl_context()
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        url = self._config.host.rstrip("/") + path
        async with self._session.get(url, params=dict(params), headers=self._headers(watch), timeout=timeout,
                                     auto_decompress=True) as resp:
            if not 200 <= resp.status < 300:
                raise APIStatusError(resp.status, await resp.text())
            yield resp

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class Informer:
    """List, watch and cache one resource at ``path`` (e.g. ``/api/v1/namespaces/ns/configmaps``) in a task of
    the running event loop, and call handlers on every change.

    ``transport`` is a :class:`Transport` (several informers share one, and its connection pool). ``params``
    are extra query parameters of every list and watch (``labelSelector``, ``fieldSelector``). Options as
    :class:`keyqueue.informer.Informer`: ``resync_period``, ``watch_timeout``, ``read_timeout``,
    ``connect_timeout``, ``list_timeout``, ``page_size``, ``backoff``, ``indexers``, ``key_func``.

    :meth:`start` needs a running loop; :meth:`stop` and :meth:`wait_for_cache_sync` are coroutines of it. An
    informer runs once.
    """

    def __init__(
        self,
        transport: Transport,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        name: str = "",
        resync_period: float = 0.0,
        watch_timeout: float = 300.0,
        read_timeout: float | None = None,
        connect_timeout: float = 5.0,
        list_timeout: float = 60.0,
        page_size: int = 500,
        backoff: Backoff | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: KeyFunc = meta_namespace_key,
    ) -> None:
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"path must be an absolute URL path, got {type(path).__name__}: {path!r:.80}")
        for label, value in (("resync_period", resync_period), ("watch_timeout", watch_timeout),
                             ("connect_timeout", connect_timeout), ("list_timeout", list_timeout)):
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or \
                    (label != "resync_period" and value == 0):
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        self._transport = transport
        self._path = path
        self._params = dict(params or {})
        self.name = name or path
        self._resync_period = float(resync_period)
        self._watch_timeout = float(watch_timeout)
        self._read_timeout = read_timeout
        self._connect_timeout = float(connect_timeout)
        self._list_timeout = float(list_timeout)
        self._page_size = page_size
        self._backoff = backoff if backoff is not None else Backoff()
        self.store = Store(key_func=key_func, indexers=indexers)
        self._key_func = key_func
        self._handlers: tuple[HandlerRegistration, ...] = ()
        self._stats = InformerStats()
        self._rv = ""
        self._synced = False
        self._synced_event: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopped = False

    # -- handlers ----------------------------------------------------------------------------------------------

    def add_event_handler(
        self,
        on_add: Callable[[Any], None] | None = None,
        on_update: Callable[[Any, Any], None] | None = None,
        on_delete: Callable[[Any], None] | None = None,
    ) -> HandlerRegistration:
        """Register callbacks (any may be ``None``). If the informer has synced, ``on_add`` is called at once for
        every cached object, before this returns. Call it on the informer's event loop (or before start)."""
        reg = HandlerRegistration(on_add, on_update, on_delete)
        self._handlers = (*self._handlers, reg)
        if self._synced and on_add is not None:
            for obj in self.store.list():
                self._call(on_add, obj)
        return reg

    def remove_event_handler(self, registration: HandlerRegistration) -> None:
        """Unregister; the callbacks are not called again."""
        self._handlers = tuple(h for h in self._handlers if h is not registration)

    def _call(self, func: Callable[..., None], *args: Any) -> None:
        try:
            func(*args)
        except Exception:
            self._stats.handler_errors += 1
            log.exception("informer %s: handler %r raised", self.name, func)

    def _fire(self, kind: str, *args: Any) -> None:
        for h in self._handlers:
            func = h.on_add if kind == "add" else h.on_update if kind == "update" else h.on_delete
            if func is not None:
                self._call(func, *args)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the informer's task (and the resync task) in the running loop. Raises ``RuntimeError`` if started
        before or without a running loop."""
        loop = asyncio.get_running_loop()
        if self._started:
            raise RuntimeError(f"informer {self.name!r} was already started")
        self._started = True
        self._synced_event = asyncio.Event()
        self._tasks.append(loop.create_task(self._run(), name=f"informer {self.name}"))
        if self._resync_period > 0:
            self._tasks.append(loop.create_task(self._resync_loop(), name=f"informer-resync {self.name}"))

    async def stop(self) -> None:
        """Cancel the informer's tasks (an open request is closed) and wait for them. Idempotent. Handlers are not
        called after this returns; the store keeps its contents."""
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def has_synced(self) -> bool:
        """True once the first list has been applied (and its ``on_add`` calls made)."""
        return self._synced

    async def wait_for_cache_sync(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`has_synced` (``True``) or ``timeout`` seconds passed (``False``). Call after
        :meth:`start`."""
        if self._synced:
            return True
        if self._synced_event is None:
            raise RuntimeError(f"informer {self.name!r} was not started")
        try:
            await asyncio.wait_for(self._synced_event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def last_sync_resource_version(self) -> str:
        return self._rv

    def stats(self) -> InformerStats:
        """A snapshot of the counters."""
        snap = dataclasses.replace(self._stats)
        snap.last_resource_version = self._rv
        return snap

    # -- the task ----------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        need_list = True
        gone_at = -1
        while True:
            try:
                if need_list:
                    await self._list_and_replace()
                    need_list = False
                    self._backoff.reset()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                status = getattr(exc, "status", None)
                if isinstance(exc, _Gone) or (status == _GONE and not need_list):
                    self._stats.gone += 1
                    log.info("informer %s: resourceVersion %s expired (410): relisting", self.name, self._rv)
                    need_list = True
                    progress = self._stats.events + self._stats.bookmarks
                    if progress == gone_at:
                        await asyncio.sleep(self._backoff.next())
                    gone_at = progress
                    continue
                if not need_list:
                    self._stats.watch_errors += 1
                delay = self._backoff.next()
                log.warning("informer %s: %s failed (%s: %s); retrying in %.2fs", self.name,
                            "list" if need_list else "watch", type(exc).__name__, str(exc)[:300], delay)
                await asyncio.sleep(delay)

    async def _list_and_replace(self) -> None:
        items: list[Obj] = []
        cont, rv = "", ""
        while True:
            params = dict(self._params)
            if self._page_size:
                params["limit"] = str(self._page_size)
            if cont:
                params["continue"] = cont
            try:
                async with self._transport.get(self._path, params, watch=False, connect_timeout=self._connect_timeout,
                                               read_timeout=self._list_timeout) as resp:
                    body = json.loads(await resp.read())
            except APIStatusError as exc:
                if cont and exc.status == _GONE:  # the continue token expired: start over
                    items, cont = [], ""
                    continue
                raise
            kind = body.get("kind", "")
            item_kind = kind[:-4] if kind.endswith("List") else ""
            api_version = body.get("apiVersion", "")
            for obj in body.get("items") or []:
                if item_kind:
                    obj.setdefault("kind", item_kind)
                if api_version:
                    obj.setdefault("apiVersion", api_version)
                items.append(obj)
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            cont = meta.get("continue") or ""
            if not cont:
                break
        old = self.store.replace(items)
        self._rv = rv
        self._stats.lists += 1
        for obj in items:
            prev = old.get(self._key_func(obj))
            if prev is None:
                self._fire("add", obj)
            else:
                self._fire("update", prev, obj)
        if old:
            kept = {self._key_func(obj) for obj in items}
            for key, obj in old.items():
                if key not in kept:
                    self._stats.tombstones += 1
                    self._fire("delete", DeletedFinalStateUnknown(key, obj))
        self._synced = True
        assert self._synced_event is not None
        self._synced_event.set()

    async def _watch(self) -> None:
        timeout_seconds = max(1, int(self._watch_timeout * random.uniform(1.0, 1.25)))
        read_timeout = self._read_timeout if self._read_timeout is not None else 1.25 * self._watch_timeout + 10
        params = {**self._params, "watch": "true", "resourceVersion": self._rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        opened = time.monotonic()
        lines = 0
        async with self._transport.get(self._path, params, watch=True, connect_timeout=self._connect_timeout,
                                       read_timeout=read_timeout) as resp:
            self._stats.watches += 1
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                *complete, buf = buf.split(b"\n")
                for line in complete:
                    if not line.strip():
                        continue
                    lines += 1
                    self._apply(json.loads(line))
                    if lines == 1:
                        self._backoff.reset()
            if buf.strip():
                self._apply(json.loads(buf))
        self._stats.watch_ends += 1
        if lines == 0 and time.monotonic() - opened < 1.0:
            await asyncio.sleep(self._backoff.next())  # a server that ends every stream at once: do not spin

    def _apply(self, event: dict[str, Any]) -> None:
        etype, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            log.warning("informer %s: watch event without an object: %r", self.name, event)
            return
        if etype == "BOOKMARK":
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self._rv = str(rv)
            self._stats.bookmarks += 1
            return
        if etype == "ERROR":
            if obj.get("code") == _GONE:
                raise _Gone(obj.get("message", ""))
            raise APIStatusError(int(obj.get("code") or 500), f"watch ERROR event: {obj.get('message')}")
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: unknown watch event type %r", self.name, etype)
            return
        key = self._key_func(obj)
        rv = str(obj["metadata"].get("resourceVersion", ""))
        self._stats.events += 1
        if etype == "DELETED":
            self.store.delete_key(key)
            if rv:
                self._rv = rv
            self._fire("delete", obj)
            return
        old = self.store.add(obj)
        if rv:
            self._rv = rv
        if old is None:
            self._fire("add", obj)
        else:
            self._fire("update", old, obj)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._resync_period)
            if not self._synced:
                continue
            self._stats.resyncs += 1
            for obj in self.store.list():
                self._fire("update", obj, obj)

    def __repr__(self) -> str:
        return (f"<aio Informer {self.name!r} synced={self._synced} rv={self._rv!r} objects={len(self.store)} "
                f"stopped={self._stopped}>")
