"""From an HTTP request to its handler: the body read, the token checked, the path routed, errors as ``Status``."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Final
from urllib.parse import parse_qs

from aiohttp import web

from keyqueue._httpserver import BodyError, read_body

from .. import errors
from ..errors import APIError
from ..objects import NAMESPACES
from .crud import CrudRoutes
from .request import _REASONS, _json_response, _Request, _verb
from .static import StaticRoutes
from .watch import WatchRoutes

__all__ = ["Router"]

log = logging.getLogger(__name__)

_UNAUTHENTICATED_PATHS: Final = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


class Router(WatchRoutes, CrudRoutes, StaticRoutes):
    """Every request: read, authenticated and routed to the handler of its path and verb."""

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
        if len(rest) == 3 and not watch_path and rt is not None and (
                (rest[2] == "status" and (rt.status or (rt.custom is not None and rt.custom.status)))
                or (rest[2] == "scale" and rt.scale)):  # a CR's scale subresource is not served
            subresource, rest = rest[2], rest[:2]
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
