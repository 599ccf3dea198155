"""The pipeline's HTTP server: aiohttp on an event loop thread, serving ``POST /trigger/{name}`` (each trigger a
coroutine on that loop) and ``GET /metrics``, ``/stats``, ``/healthz``. The same server runs in the pipeline's
process and, for ``POST /trigger`` only, in :mod:`keyqueue.lab.trigger_process`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from keyqueue.lab.api_writer import ApiWriter, TriggerError

__all__ = ["TriggerServer", "TriggerTarget", "trigger_answer"]


def _error_json(code: int, message: str) -> tuple[bytes, str]:
    return json.dumps({"error": message}).encode() + b"\n", "application/json"


def _json_response(code: int, obj: Any) -> Any:
    from aiohttp import web

    return web.Response(status=code, body=json.dumps(obj, separators=(",", ":")).encode() + b"\n",
                        content_type="application/json")


class TriggerTarget(Protocol):
    """What the trigger server serves: a :class:`~keyqueue.lab.pipeline.Pipeline`, or the trigger process's side
    (:mod:`keyqueue.lab.trigger_process`)."""

    async def trigger_async(self, name: str) -> dict[str, Any]: ...

    def metrics_text(self) -> bytes | None: ...

    def summary(self) -> dict[str, Any]: ...


class TriggerServer:
    """The trigger server: aiohttp on an event loop thread (:class:`keyqueue._httpserver.BackgroundHTTPServer`,
    with its connection, header, idle and body limits); each trigger is a coroutine on that loop
    (:meth:`~keyqueue.lab.pipeline.Pipeline.trigger_async`: its API write is awaited there, no thread is involved).
    :meth:`refuse` makes new triggers answer 503 (the first step of a stop); :meth:`stop` lets triggers in flight
    finish (up to ``timeout``), then closes the writer's connections. ``triggers_at``: triggers are served elsewhere
    (the pipeline's own server while a trigger process serves them): ``POST /trigger/...`` answers 404 naming that
    URL. ``endpoints=False``: only ``POST /trigger`` and ``GET /healthz`` (the trigger process)."""

    def __init__(self, pipeline: TriggerTarget, port: int, writer: ApiWriter | None, *, name: str = "trigger-server",
                 triggers_at: str = "", endpoints: bool = True) -> None:
        from keyqueue._httpserver import BackgroundHTTPServer, HTTPLimits

        self.pipeline = pipeline
        self.writer = writer
        self.limits = HTTPLimits(max_body=64 * 1024)
        self.accepting = True
        self.triggers_at = triggers_at
        self.endpoints = endpoints
        self.http = BackgroundHTTPServer(self._handle, "127.0.0.1", port, limits=self.limits, error_body=_error_json,
                                         name=name, after_stop=writer.close if writer is not None else None)

    def start(self) -> None:
        self.http.start()

    @property
    def port(self) -> int:
        return self.http.port

    def refuse(self) -> None:
        """From now on ``POST /trigger/...`` answers 503; triggers already running finish."""
        self.accepting = False

    def stop(self, timeout: float = 5.0) -> None:
        self.accepting = False
        self.http.stop(timeout)

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the server's loop and wait for its result (from any other thread)."""
        loop = self.http.loop
        if loop is None:
            coro.close()
            raise TriggerError(503, "the pipeline is stopping: no new triggers")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        from keyqueue._httpserver import BodyError, read_body

        try:
            await read_body(request, self.limits)
        except BodyError as exc:
            resp = _json_response(exc.code, {"error": str(exc)})
            resp.force_close()
            return resp
        path = request.path
        pipeline = self.pipeline
        if request.method == "POST":
            if not path.startswith("/trigger/"):
                return _json_response(404, {"error": f"no such endpoint: POST {path} (use POST /trigger/{{name}})"})
            if self.triggers_at:
                return _json_response(404, {"error": f"triggers are served by the trigger process: POST "
                                                     f"{self.triggers_at}{path}"})
            if not self.accepting:
                return _json_response(503, {"error": "the pipeline is stopping: no new triggers"})
            try:
                result = await pipeline.trigger_async(path[len("/trigger/"):])
            except TriggerError as exc:
                return _json_response(exc.status, {"error": str(exc)})
            return _json_response(200, result)
        if request.method != "GET":
            return _json_response(405, {"error": f"method {request.method} not allowed"})
        if path == "/healthz":
            return web.Response(status=200, body=b"ok\n", content_type="text/plain")
        if not self.endpoints:
            return _json_response(404, {"error": f"no such endpoint: GET {path} (the pipeline process serves it)"})
        if path == "/metrics":
            text = pipeline.metrics_text()
            if text is None:
                return web.Response(status=501, body=b"prometheus_client is not installed\n",
                                    content_type="text/plain")
            return web.Response(status=200, body=text, headers={"Content-Type": "text/plain; version=0.0.4; "
                                                                                "charset=utf-8"})
        if path == "/stats":
            return _json_response(200, pipeline.summary())
        return _json_response(404, {"error": f"no such endpoint: GET {path}"})


def trigger_answer(name: str, key: str, action: str, rv: int, seq: int, t_start: int, t_api: int, t_done: int,
                   t_end: int) -> dict[str, Any]:
    """The JSON answer of ``POST /trigger/{name}``."""
    return {"name": name, "key": key, "action": action, "resourceVersion": str(rv), "seq": seq,
            "api_ms": (t_done - t_api) / 1e6, "took_ms": (t_end - t_start) / 1e6}
