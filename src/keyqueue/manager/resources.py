"""Resources named ``"group/version/plural"``, resolved through the API server's discovery documents.

``"v1/configmaps"`` is the core group; ``"apps/v1/deployments"`` and ``"example.com/v1/widgets"`` name a group.
:class:`ResourceResolver` asks the server (``GET /api/v1`` or ``GET /apis/<group>/<version>``) for the kind and
scope of a plural, caches the answer, and raises :class:`UnknownResource` naming the resource and the closest names
the server serves. :func:`list_func` builds the list/watch call an :class:`~keyqueue.informer.Informer` needs for
any resource, through the official client's ``ApiClient`` (its configuration, authentication and TLS).
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Resource", "ResourceResolver", "UnknownResource", "list_func", "parse_resource"]


class UnknownResource(LookupError):
    """The server does not serve this resource. ``resource`` is the name asked for; ``close_matches`` the served
    names most like it (``difflib``), best first, possibly empty."""

    def __init__(self, resource: str, close_matches: list[str], detail: str = "") -> None:
        hint = f"; did you mean {', '.join(repr(m) for m in close_matches)}?" if close_matches else ""
        super().__init__(f"unknown resource {resource!r}{detail}{hint}")
        self.resource = resource
        self.close_matches = close_matches


@dataclass(frozen=True, slots=True)
class Resource:
    """A resolved resource: ``group`` (``""`` for core), ``version``, ``plural``, its ``kind`` and whether it is
    ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def name(self) -> str:
        """``"group/version/plural"`` (``"version/plural"`` for the core group)."""
        return f"{self.group_version}/{self.plural}"

    @property
    def group_version(self) -> str:
        """``apiVersion`` of its objects: ``"group/version"``, or ``"v1"`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        """The collection's URL path, in ``namespace`` (ignored for a cluster-scoped resource) or across all."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


def parse_resource(resource: str) -> tuple[str, str, str]:
    """``"v1/configmaps"`` → ``("", "v1", "configmaps")``; ``"apps/v1/deployments"`` → ``("apps", "v1",
    "deployments")``. Raises ``TypeError`` for a non-``str`` and ``ValueError`` for any other shape."""
    if not isinstance(resource, str):
        raise TypeError(f"resource must be a str 'group/version/plural', got {type(resource).__name__}: "
                        f"{resource!r:.80}")
    parts = resource.split("/")
    if len(parts) == 2 and all(parts):
        return "", parts[0], parts[1]
    if len(parts) == 3 and all(parts):
        return parts[0], parts[1], parts[2]
    raise ValueError(f"resource must be 'group/version/plural' (or 'v1/plural' for the core group), got "
                     f"{resource!r}")


def _get_json(api_client: Any, path: str, timeout: float) -> Any:
    """GET ``path`` through ``api_client``; the decoded JSON. Raises the client's ``ApiException``."""
    request = api_client.param_serialize(method="GET", resource_path=path,
                                         header_params={"Accept": "application/json"},
                                         auth_settings=["BearerToken"])
    resp = api_client._call_with_legacy_options(request, {}, None, False, timeout, True)
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


class ResourceResolver:
    """Resolves ``"group/version/plural"`` names through discovery, once per group-version (thread-safe).

    ``resolve`` raises :class:`UnknownResource` when the group-version or the plural is not served (a 404 from
    discovery), and lets other API errors (the server down, 403) propagate as the client's ``ApiException`` or
    ``urllib3`` error. Subresources (``pods/status``) are not resources an informer can watch: unknown here.
    """

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        self._api_client = api_client
        self._timeout = timeout
        self._lock = threading.Lock()
        self._by_gv: dict[tuple[str, str], dict[str, Resource]] = {}

    def _group_version(self, group: str, version: str) -> dict[str, Resource] | None:
        """The resources of one group-version (``None`` if it is not served)."""
        with self._lock:
            cached = self._by_gv.get((group, version))
        if cached is not None:
            return cached
        from kubernetes.client import ApiException

        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = _get_json(self._api_client, path, self._timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        found = {
            r["name"]: Resource(group, version, r["name"], r.get("kind", ""), bool(r.get("namespaced")))
            for r in doc.get("resources") or () if "/" not in r.get("name", "/")
        }
        with self._lock:
            self._by_gv[(group, version)] = found
        return found

    def resolve(self, resource: str) -> Resource:
        """The :class:`Resource` named ``resource``. Raises ``TypeError``/``ValueError`` for a malformed name,
        :class:`UnknownResource` for one the server does not serve (with the closest served names)."""
        group, version, plural = parse_resource(resource)
        served = self._group_version(group, version)
        if served is not None and plural in served:
            return served[plural]
        detail = "" if served is not None else f" (the server does not serve {group + '/' if group else ''}{version})"
        raise UnknownResource(resource, difflib.get_close_matches(resource, self.served_names(), n=5, cutoff=0.6),
                              detail)

    def served_names(self) -> list[str]:
        """Every ``"group/version/plural"`` the server serves (one discovery request per group-version)."""
        names: list[str] = []
        gvs: list[tuple[str, str]] = [("", v) for v in _get_json(self._api_client, "/api", self._timeout)
                                      .get("versions") or ()]
        for g in _get_json(self._api_client, "/apis", self._timeout).get("groups") or ():
            gvs.extend((g["name"], v["version"]) for v in g.get("versions") or ())
        for group, version in gvs:
            served = self._group_version(group, version) or {}
            names.extend(r.name for r in served.values())
        return sorted(names)


def list_func(api_client: Any, resource: Resource, namespace: str | None = None) -> Callable[..., Any]:
    """A list/watch function for :class:`~keyqueue.informer.Informer` on ``resource`` (in ``namespace``, or all
    namespaces / cluster-scoped when ``None``), with the keyword arguments of the official client's list methods
    (``watch``, ``resource_version``, ``allow_watch_bookmarks``, ``timeout_seconds``, ``limit``, ``_continue``,
    ``label_selector``, ``field_selector``, ``_preload_content``, ``_request_timeout``). It returns the raw
    response (the informer decodes it) and raises the client's ``ApiException`` for a non-2xx answer."""
    path = resource.path(namespace)
    names = {"watch": "watch", "resource_version": "resourceVersion", "allow_watch_bookmarks": "allowWatchBookmarks",
             "timeout_seconds": "timeoutSeconds", "limit": "limit", "_continue": "continue",
             "label_selector": "labelSelector", "field_selector": "fieldSelector"}

    def call(*, _preload_content: bool = False, _request_timeout: Any = None, **params: Any) -> Any:
        query = []
        for key, value in params.items():
            if key not in names:
                raise TypeError(f"unexpected list argument {key!r}")
            if value is None or value == "":
                continue
            query.append((names[key], value))
        request = api_client.param_serialize(
            method="GET", resource_path=path, query_params=query,
            header_params={"Accept": "application/json;stream=watch" if params.get("watch") else "application/json"},
            auth_settings=["BearerToken"],
        )
        return api_client._call_with_legacy_options(request, {"200": "object"}, None, _preload_content,
                                                    _request_timeout, True)

    call.__name__ = resource.name
    return call
