"""One request as the routes see it, and the answers they give.

:class:`_Request` is a request's path, query and body, with whether it asks for a Table; a JSON body is checked
(depth, Unicode, finite numbers: :func:`check_json`); every answer is JSON, every error a ``Status`` object, also one
aiohttp answers itself (a malformed request, an unknown method: :func:`_status_body`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from aiohttp import web

from .. import errors
from ..errors import APIError

__all__ = ["MAX_JSON_DEPTH", "check_json"]

MAX_JSON_DEPTH: Final = 100  # nesting of a request body's JSON (kube-apiserver's decoder also caps it)
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
