"""What one API server serves: the built-in resource types plus the custom resources of its CRDs.

Every :class:`~.registry.Registry` owns one :class:`Catalogue` (so every :class:`~.server.APIServer`, and every
``TestAPIServer`` of a test suite, has its own): a CustomResourceDefinition stored through one server never shows
in another server of the same process.  Routing (:meth:`Catalogue.resource_for`), the registry's namespace
deletion (:meth:`Catalogue.namespaced`), discovery and OpenAPI are all read from it.  The discovery and OpenAPI
documents are computed on first use and again after every change of what is served.

Thread-safe: the served mapping is replaced as a whole under a lock on every change (copy on write), so a reader
always sees one consistent state.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import discovery, openapiv2
from .objects import BUILTINS, REVIEWS, ResourceType

__all__ = ["Catalogue"]


@dataclass(frozen=True, slots=True)
class _Documents:
    """The discovery and OpenAPI documents of one state of the catalogue."""

    group_list: dict[str, Any]
    openapi: dict[str, bytes]  # by index path (``api/v1``, ``apis/<group>/<version>``)
    hashes: dict[str, str]


class Catalogue:
    """The resource types one server serves, by group version and resource name."""

    def __init__(self, builtins: Sequence[ResourceType] = BUILTINS) -> None:
        self._lock = threading.Lock()
        served: dict[str, dict[str, ResourceType]] = {}
        for rt in builtins:
            served.setdefault(rt.api_version, {})[rt.name] = rt
        self._builtins = {gv: dict(types) for gv, types in served.items()}
        self._served: Mapping[str, Mapping[str, ResourceType]] = served
        self._custom: dict[str, tuple[ResourceType, ...]] = {}  # CRD name -> the types it serves
        self._revisions: dict[str, int] = {}  # CRD name -> the storage revision of the last change applied
        self._documents: _Documents | None = None
        # /openapi/v2 (JSON, protobuf), built on first request for the served state it was built from
        self._v2: tuple[Mapping[str, Mapping[str, ResourceType]], bytes, bytes] | None = None

    # ------------------------------------------------------------------ lookups
    def served(self) -> Mapping[str, Mapping[str, ResourceType]]:
        """A consistent snapshot: group version -> resource name -> type (do not modify)."""
        with self._lock:
            return self._served

    def resource_for(self, group_version: str, name: str) -> ResourceType | None:
        """The resource ``name`` of ``group_version`` (``v1``, ``coordination.k8s.io/v1``), or ``None``."""
        return self.served().get(group_version, {}).get(name)

    def namespaced(self) -> tuple[ResourceType, ...]:
        """Resources stored inside a namespace (deleted with it), one per storage: built-in types without the
        converted versions (``events.k8s.io`` Events are core Events), and each CRD's storage version."""
        out = []
        for types in self.served().values():
            for rt in types.values():
                if not rt.namespaced or rt in REVIEWS or rt.renames:
                    continue
                if rt.custom is not None and rt.custom.storage_version != rt.version:
                    continue
                out.append(rt)
        return tuple(out)

    def custom(self, crd_name: str) -> tuple[ResourceType, ...]:
        """The types (one per served version) the CRD ``crd_name`` serves now; ``()`` if none."""
        with self._lock:
            return self._custom.get(crd_name, ())

    def name_conflict(self, crd_name: str, group: str, names: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(reason, message)`` as kube's naming controller reports them if a name of the CRD ``crd_name`` in
        ``group`` (plural, singular, kind, a short name) is served already by another CRD or a built-in type of the
        group; ``None`` if all are free."""
        served = self.served()
        with self._lock:
            others = [rt for name, types in self._custom.items() if name != crd_name for rt in types]
        others += [rt for gv, types in served.items() if gv.startswith(group + "/") for rt in types.values()
                   if rt.custom is None]
        for rt in others:
            if rt.group != group:
                continue
            taken = {rt.name, rt.singular}
            if names.get("plural") in taken:
                return "PluralConflict", f'"{names["plural"]}" is already in use'
            if names.get("singular") in taken:
                return "SingularConflict", f'"{names["singular"]}" is already in use'
            short = set(names.get("shortNames") or ()) & (set(rt.short_names) | taken)
            if short:
                return "ShortNamesConflict", f'"{sorted(short)[0]}" is already in use'
            if names.get("kind") == rt.kind:
                return "KindConflict", f'"{rt.kind}" is already in use'
            if names.get("listKind") == rt.list_kind:
                return "ListKindConflict", f'"{rt.list_kind}" is already in use'
        return None

    # ------------------------------------------------------------------ changes
    def set_custom(self, crd_name: str, types: Sequence[ResourceType], revision: int = 0) -> bool:
        """Serve ``types`` (the served versions of the CRD ``crd_name``, as stored at ``revision``) instead of what
        it served before; returns False (and changes nothing) if a change of a later revision was applied already
        (two writers of one CRD may get here in either order).  A resource name taken by a built-in type or
        another CRD in the same group version is not replaced."""
        with self._lock:
            if revision and revision <= self._revisions.get(crd_name, 0):
                return False
            self._revisions[crd_name] = revision
            custom = dict(self._custom)
            custom[crd_name] = tuple(types)
            self._rebuild(custom)
            return True

    def remove_custom(self, crd_name: str, revision: int = 0) -> tuple[ResourceType, ...]:
        """Stop serving the CRD ``crd_name`` (deleted at ``revision``; an earlier state arriving later is then
        ignored by :meth:`set_custom`); returns the types it served."""
        with self._lock:
            self._revisions[crd_name] = max(revision, self._revisions.get(crd_name, 0))
            custom = dict(self._custom)
            removed = custom.pop(crd_name, ())
            self._rebuild(custom)
            return removed

    def _rebuild(self, custom: dict[str, tuple[ResourceType, ...]]) -> None:
        served = {gv: dict(types) for gv, types in self._builtins.items()}
        for types in custom.values():
            for rt in types:
                served.setdefault(rt.api_version, {}).setdefault(rt.name, rt)
        self._custom = custom
        self._served = served
        self._documents = None

    # ------------------------------------------------------------------ documents
    def _docs(self) -> tuple[Mapping[str, Mapping[str, ResourceType]], _Documents]:
        with self._lock:
            served, docs = self._served, self._documents
        if docs is None:
            openapi = {discovery.doc_path(gv): json.dumps(discovery.openapi_v3_doc(served, gv),
                                                          separators=(",", ":")).encode() for gv in served}
            docs = _Documents(discovery.api_group_list(served), openapi,
                              {path: hashlib.sha512(doc).hexdigest().upper()[:128] for path, doc in openapi.items()})
            with self._lock:
                if self._served is served:  # unchanged meanwhile: keep them
                    self._documents = docs
        return served, docs

    def api_group_list(self) -> dict[str, Any]:
        """``/apis``: every named group with its versions (preferred first)."""
        return self._docs()[1].group_list

    def api_group(self, group: str) -> dict[str, Any] | None:
        """``/apis/<group>``, or ``None`` for a group not served."""
        return discovery.api_group(self.served(), group)

    def api_resource_list(self, group_version: str) -> dict[str, Any] | None:
        """``/api/v1`` or ``/apis/<group>/<version>``, or ``None`` for a group version not served."""
        return discovery.api_resource_list(self.served(), group_version)

    def openapi_v3_root(self) -> dict[str, Any]:
        """The ``/openapi/v3`` index pointing at each group version's document by content hash."""
        hashes = self._docs()[1].hashes
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={h}"} for path, h in hashes.items()}}

    def openapi_v2_bytes(self, protobuf: bool) -> bytes:
        """The ``/openapi/v2`` document of everything served: JSON, or gnostic protobuf (:mod:`.openapiv2`)."""
        served = self.served()
        cached = self._v2
        if cached is None or cached[0] is not served:
            schemas: dict[str, Any] = {}
            for gv in served:
                schemas.update(discovery.openapi_v3_doc(served, gv)["components"]["schemas"])
            doc = openapiv2.swagger_document(schemas, discovery.GIT_VERSION)
            cached = (served, json.dumps(doc, separators=(",", ":")).encode(), openapiv2.encode_document(doc))
            self._v2 = cached  # a plain reference swap: a racing builder stores an equal document
        return cached[2] if protobuf else cached[1]

    def openapi_v3_bytes(self, path: str) -> bytes | None:
        """The encoded OpenAPI v3 document at ``/openapi/v3/<path>``, or ``None`` if none."""
        return self._docs()[1].openapi.get(path)
