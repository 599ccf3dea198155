"""``metadata.managedFields``: who owns which field of an object, as kube-apiserver's field manager records it
(structured-merge-diff semantics; the field-set operations are in :mod:`.typed`, server-side apply in
:mod:`.apply`).

Every write is made by a *manager*: the request's ``fieldManager``, else the User-Agent up to its first ``/``
(``kubectl/v1.37.0 ...`` → ``kubectl``), as kube derives it.  Each entry is kube's ``ManagedFieldsEntry``:
``manager``, ``operation`` (``Apply`` for server-side apply, ``Update`` for everything else — a create too),
``apiVersion`` of the request, ``time`` (of the entry's last change), ``fieldsType: FieldsV1``, ``fieldsV1`` (the
field set in kube's format, see :mod:`.typed`; ``".": {}`` marks a map, list or list item that is itself owned)
and ``subresource`` (``status`` for a write through ``/status``).  An entry is identified by its manager,
operation, subresource and — for ``Update`` only — apiVersion.  ``apiVersion``, ``kind`` and the server-set
metadata (name, namespace, uid, resourceVersion, generation, creationTimestamp, selfLink, managedFields) are never
owned, nor a Namespace's ``status``.

An ``Update`` (structured-merge-diff's ``Updater.Update``) compares the object before and after the write: the
fields it added or changed move to the writer's entry (and leave every other manager's), fields it removed leave
every entry, and an entry left with no field is dropped.  A write that changes nothing keeps managedFields as they
are (no new time).  What a client sends in ``managedFields`` is ignored.  Not done: conversion of field sets
between API versions (an entry keeps the field names of the version it was written through).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from .errors import invalid
from .objects import NAMESPACES, ResourceType
from .typed import MISSING, Comparison, Node, compare, node_of

__all__ = ["MAX_MANAGER_LENGTH", "Managers", "encode_fields", "managed_fields", "manager_from", "parse_fields",
           "strip", "strip_paths", "writable_paths"]

#: kube's ``FieldManagerMaxLength``.
MAX_MANAGER_LENGTH: Final = 128
_STRIPPED_META: Final = frozenset({"name", "namespace", "creationTimestamp", "selfLink", "uid", "generation",
                                   "managedFields", "resourceVersion"})
_Path = tuple[str, ...]
_Id = tuple[str, str, str, str]  # manager, operation, apiVersion ("" for Apply), subresource


def manager_from(field_manager: str, user_agent: str) -> str:
    """The manager of a write: ``fieldManager`` if given, else the User-Agent's prefix before the first ``/``.
    A 422 (kind ``CreateOptions``, as kube) for a ``fieldManager`` over 128 characters or with non-printable
    ones."""
    if field_manager:
        causes = []
        if len(field_manager) > MAX_MANAGER_LENGTH:
            causes.append(("FieldValueTooLong", "fieldManager",
                           f"Too long: may not be more than {MAX_MANAGER_LENGTH} bytes"))
        if not field_manager.isprintable():
            causes.append(("FieldValueInvalid", "fieldManager",
                           f"Invalid value: {json.dumps(field_manager)}: must only contain printable characters"))
        if causes:
            raise invalid("CreateOptions", "createoptions", "", causes)
        return field_manager
    return user_agent.split("/", 1)[0].strip()[:MAX_MANAGER_LENGTH]


def strip(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without what nobody owns: ``apiVersion``, ``kind``, the server-set metadata, a Namespace's
    status (kube's managed-fields stripper)."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if rt is NAMESPACES:
        out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: v for k, v in meta.items() if k not in _STRIPPED_META}
    return out


def strip_paths(rt: ResourceType, paths: set[_Path]) -> set[_Path]:
    """``paths`` without what nobody owns (see :func:`strip`), for a field set made from a whole object."""
    def owned(path: _Path) -> bool:
        if path[0] in ("f:apiVersion", "f:kind") or (rt is NAMESPACES and path[0] == "f:status"):
            return False
        return not (path[0] == "f:metadata" and len(path) > 1 and path[1][2:] in _STRIPPED_META)

    return {p for p in paths if p and owned(p)}


def encode_fields(paths: set[_Path]) -> dict[str, Any]:
    """A field set as ``fieldsV1``: nested ``f:``/``k:``/``v:`` keys, ``".": {}`` where a path with children is
    itself a member; keys sorted as kube sorts them (``.`` first)."""
    root: dict[str, Any] = {}
    members: set[int] = set()
    for path in paths:
        node = root
        for part in path:
            node = node.setdefault(part, {})
        members.add(id(node))

    def finish(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {".": {}} if node and id(node) in members else {}
        for key in sorted(node):
            out[key] = finish(node[key])
        return out

    return finish(root)


def parse_fields(fields: Any, prefix: _Path = ()) -> set[_Path]:
    """The field set of a ``fieldsV1`` value (see :func:`encode_fields`); anything not a map is empty."""
    out: set[_Path] = set()
    if not isinstance(fields, Mapping):
        return out
    for key, child in fields.items():
        if key == ".":
            out.add(prefix)
        elif isinstance(child, Mapping) and child:
            out |= parse_fields(child, (*prefix, str(key)))
        else:
            out.add((*prefix, str(key)))
    return out


class Managers:
    """The entries of an object's ``managedFields``, with their field sets, by identity."""

    def __init__(self, entries: Any) -> None:
        self.entries: dict[_Id, dict[str, Any]] = {}
        self.sets: dict[_Id, set[_Path]] = {}
        self.changed: set[_Id] = set()  # entries whose fieldsV1 must be encoded again
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, Mapping):
                key = self.identity(entry)
                self.entries[key] = dict(entry)
                self.sets[key] = parse_fields(entry.get("fieldsV1"))

    @staticmethod
    def identity(entry: Mapping[str, Any]) -> _Id:
        operation = str(entry.get("operation", ""))
        return (str(entry.get("manager", "")), operation,
                "" if operation == "Apply" else str(entry.get("apiVersion", "")), str(entry.get("subresource", "")))

    def take(self, writer: _Id, comparison: Comparison, taken: set[_Path]) -> None:
        """Every manager but ``writer`` loses ``taken`` and the removed fields (structured-merge-diff's
        ``update``, after any conflict was forgiven)."""
        for key, paths in self.sets.items():
            if key == writer:
                continue
            left = paths - taken - comparison.removed
            if left != paths:
                self.sets[key] = left
                self.changed.add(key)

    def put(self, key: _Id, paths: set[_Path], api_version: str, now: str | None) -> None:
        """Set the field set of ``key`` (created if new); ``now``: a new ``time``."""
        entry = self.entries.get(key)
        if entry is None:
            manager, operation, _version, subresource = key
            entry = self.entries[key] = {"manager": manager, "operation": operation}
            if subresource:
                entry["subresource"] = subresource
            now = now or ""
        entry["apiVersion"] = api_version
        if now:
            entry["time"] = now
        self.sets[key] = paths
        self.changed.add(key)

    def encode(self) -> list[dict[str, Any]]:
        """The ``managedFields`` list: entries with no field dropped, in kube's order (Apply entries first, then
        by time, manager, apiVersion, subresource)."""
        out = []
        for key, entry in self.entries.items():
            paths = self.sets[key]
            if not paths:
                continue
            if key in self.changed:
                entry = {k: v for k, v in entry.items() if k not in ("fieldsType", "fieldsV1", "subresource")}
                entry["fieldsType"] = "FieldsV1"
                entry["fieldsV1"] = encode_fields(paths)
                if key[3]:
                    entry["subresource"] = key[3]
            out.append(entry)
        out.sort(key=lambda e: (str(e.get("operation", "")), str(e.get("time", "")), str(e.get("manager", "")),
                                str(e.get("apiVersion", "")), str(e.get("subresource", ""))))
        return out


def writable_paths(rt: ResourceType, paths: set[_Path], subresource: str) -> set[_Path]:
    """The part of a field set a write through ``subresource`` can set (kube's reset fields): ``/status`` only
    ``status``; the main endpoint all but ``status`` when that is a subresource."""
    has_status = rt.status if rt.custom is None else rt.custom.status
    if subresource == "status":
        return {p for p in paths if p[:1] == ("f:status",)}
    if has_status:
        return {p for p in paths if p[:1] != ("f:status",)}
    return paths


def managed_fields(rt: ResourceType, old: Mapping[str, Any] | None, new: Mapping[str, Any], manager: str,
                   now: str, subresource: str = "") -> list[dict[str, Any]]:
    """The ``managedFields`` of ``new`` after ``manager`` wrote it (an ``Update``) over ``old`` (``None`` for a
    create) at ``now`` (RFC 3339), through ``subresource`` (``""`` or ``status``).  ``manager`` ``""`` (a write by
    the server itself) takes fields away from others but gets no entry."""
    old_entries = ((old or {}).get("metadata") or {}).get("managedFields") or []
    node: Node = node_of(rt)
    comparison = compare(node, strip(rt, old) if old is not None else MISSING, strip(rt, new))
    if old is not None and comparison.empty():
        return [dict(e) for e in old_entries if isinstance(e, Mapping)]
    managers = Managers(old_entries)
    mine: _Id = (manager, "Update", rt.api_version, subresource)
    managers.take(mine, comparison, comparison.changed)
    if manager:
        changed = comparison.changed
        previous = managers.sets.get(mine, set())
        paths = (previous - comparison.removed) | changed
        if changed:
            managers.put(mine, paths, rt.api_version, now)
        elif paths != previous:
            managers.sets[mine] = paths
            managers.changed.add(mine)
    return managers.encode()
