"""The paths that name no resource: ``/version``, discovery, OpenAPI and the health checks."""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web

from .. import discovery
from ..openapiv2 import PROTOBUF_V2, PROTOBUF_V2_OLD
from .base import ServerBase
from .request import _json_response, _Request

__all__ = ["StaticRoutes"]

_READY_TIMEOUT: Final = 2.0  # seconds /readyz waits for storage


class StaticRoutes(ServerBase):
    """``GET`` of the discovery documents, OpenAPI, ``/version``, ``/healthz``, ``/livez`` and ``/readyz``."""

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
        if path == "/openapi/v2":
            accept = req.http.headers.get("Accept", "")
            protobuf = PROTOBUF_V2 in accept or PROTOBUF_V2_OLD in accept
            body = catalogue.openapi_v2_bytes(protobuf)
            if protobuf:
                return web.Response(status=200, body=body, headers={"Content-Type": PROTOBUF_V2})
            return web.Response(status=200, body=body, content_type="application/json")
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
