"""Watch requests: each a chunked stream of JSON lines from one registry watch.

The stream has a bounded buffer: a watcher that stops reading has its watch ended, as kube-apiserver does.  An idle
watch that asked for them gets BOOKMARKs; a stopping server ends every stream cleanly with its last chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Final

from aiohttp import web

from .. import errors
from ..objects import ResourceType, to_table
from ..registry import parse_resource_version
from .base import ServerBase
from .request import _Request
from .threads import _WatchStream

__all__ = ["MAX_WATCH_SECONDS", "WatchRoutes"]

_LIVENESS_POLL: Final = 1.0  # seconds between checks that an idle watch's client is still there
MAX_WATCH_SECONDS: Final = 2**31 - 1  # the largest timeoutSeconds accepted (int32, as in ListOptions)


class WatchRoutes(ServerBase):
    """The watch handler, the streaming of its events, and the end of every open stream at stop."""

    async def _end_streams(self) -> None:
        for stream in list(self._streams):
            stream.end()
        deadline = time.monotonic() + 2.0
        while self._streams and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

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
