"""``metadata.managedFields`` for create, update and patch, as kube-apiserver's field manager writes them for
non-apply operations.

Every write is made by a *manager*: the request's ``fieldManager``, else the User-Agent up to its first ``/``
(``kubectl/v1.37.0 ...`` → ``kubectl``), as kube derives it.  The write compares the object before and after it:
the fields it added or changed move to the writer's entry (and leave every other manager's), fields it removed
leave every entry, and an entry left with no field is dropped.  Each entry is kube's ``ManagedFieldsEntry``:
``manager``, ``operation: Update`` (a create is an ``Update`` too, as in kube), ``apiVersion`` of the request,
``time`` (of the entry's last change), ``fieldsType: FieldsV1`` and ``fieldsV1`` in kube's format: ``f:<field>``
for struct and map fields, ``v:<json>`` for the items of ``metadata.finalizers`` (a set), ``k:{"uid":...}`` for
``metadata.ownerReferences`` (a map keyed by uid), other lists atomic, ``".": {}`` marking a map or list that is
itself owned.  ``apiVersion``, ``kind`` and the server-set metadata (name, namespace, uid, resourceVersion,
generation, creationTimestamp, selfLink, managedFields) are never owned, nor a Namespace's ``status``.

A write that changes nothing keeps managedFields as they are (no new time).  What a client sends in
``managedFields`` is ignored.  Not done: server-side apply (``operation: Apply``; PATCH
``application/apply-patch+yaml`` stays 415) and conversion of field sets between API versions (an entry keeps
the field names of the version it was written through).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from .errors import invalid
from .objects import CONFIGMAPS, NAMESPACES, ResourceType, schema_of

__all__ = ["MAX_MANAGER_LENGTH", "managed_fields", "manager_from"]

#: kube's ``FieldManagerMaxLength``.
MAX_MANAGER_LENGTH: Final = 128
_STRIPPED_META: Final = frozenset({"name", "namespace", "creationTimestamp", "selfLink", "uid", "generation",
                                   "managedFields", "resourceVersion"})
_Path = tuple[str, ...]


class _Member:
    """The value of a map or list that is owned as a whole (``".": {}``); all members compare equal."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MEMBER"


_MEMBER: Final = _Member()


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


def _flatten(rt: ResourceType, obj: Mapping[str, Any]) -> dict[_Path, Any]:
    """Every ownable path of ``obj`` with its value (``_MEMBER`` for a map or list owned as a whole)."""
    out: dict[_Path, Any] = {}
    spec = schema_of(rt) if rt.custom is None else _custom_spec(rt.custom.schema)
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and rt is NAMESPACES):
            continue
        if key == "metadata" and isinstance(value, Mapping):
            meta = {k: v for k, v in value.items() if k not in _STRIPPED_META}
            _walk(spec.get("metadata"), meta, ("f:metadata",), ("metadata",), out)
            continue
        _walk(spec.get(key, "any"), value, ("f:" + key,), (key,), out)
    return out


def _custom_spec(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A custom resource's field spec for :func:`_walk`, from its CRD's structural schema: an object with
    ``properties`` is a struct (each field owned on its own), one with ``additionalProperties`` a map, anything
    else (lists included: atomic unless a list type says otherwise, which is not followed here) a value owned
    whole; ``metadata`` is ObjectMeta as for every type."""

    def convert(node: Any) -> Any:
        if not isinstance(node, Mapping):
            return "any"
        if isinstance(node.get("properties"), Mapping):
            return {str(k): convert(v) for k, v in node["properties"].items()}
        if isinstance(node.get("additionalProperties"), Mapping):
            return ("map", convert(node["additionalProperties"]))
        return "any"

    top = convert(schema)
    spec: dict[str, Any] = top if isinstance(top, dict) else {}
    return {**spec, "metadata": schema_of(CONFIGMAPS)["metadata"]}


def _walk(spec: Any, value: Any, path: _Path, where: tuple[str, ...], out: dict[_Path, Any]) -> None:
    if isinstance(spec, tuple) and spec[0] == "ptr":
        spec = spec[1]
    if isinstance(spec, dict) and isinstance(value, dict):
        if where != ("metadata",) and not value:
            out[path] = json.dumps(value)
        for key, item in value.items():
            _walk(spec.get(key, "any"), item, (*path, "f:" + str(key)), (*where, str(key)), out)
        return
    if isinstance(spec, tuple) and spec[0] == "map" and isinstance(value, dict):
        out[path] = _MEMBER
        for key, item in value.items():
            _walk(spec[1], item, (*path, "f:" + str(key)), (*where, str(key)), out)
        return
    if isinstance(value, list) and where == ("metadata", "finalizers"):
        out[path] = _MEMBER
        for item in value:
            out[(*path, "v:" + json.dumps(item))] = True
        return
    if isinstance(value, list) and where == ("metadata", "ownerReferences"):
        out[path] = _MEMBER
        for item in value:
            if not isinstance(item, Mapping):
                continue
            item_path = (*path, "k:" + json.dumps({"uid": item.get("uid", "")}, separators=(",", ":")))
            out[item_path] = _MEMBER
            for key, field_value in item.items():
                out[(*item_path, "f:" + str(key))] = field_value
        return
    # a scalar compares as itself; an atomic list or unknown value by its JSON
    out[path] = value if isinstance(value, (str, int, float)) else json.dumps(value, sort_keys=True)


def _serialize(paths: set[_Path], flat: Mapping[_Path, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
        if flat.get(path) is _MEMBER:
            node["."] = {}
    return _sorted(root)


def _sorted(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted(node[k]) for k in sorted(node, key=lambda k: (k != ".", k))}


def _parse(fields: Any, prefix: _Path = ()) -> set[_Path]:
    out: set[_Path] = set()
    if not isinstance(fields, Mapping):
        return out
    for key, child in fields.items():
        if key == ".":
            out.add(prefix)
        elif isinstance(child, Mapping) and child:
            out |= _parse(child, (*prefix, str(key)))
        else:
            out.add((*prefix, str(key)))
    return out


def _entry_id(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(entry.get("manager", "")), str(entry.get("operation", "")), str(entry.get("apiVersion", ""))


def managed_fields(rt: ResourceType, old: Mapping[str, Any] | None, new: Mapping[str, Any], manager: str,
                   now: str) -> list[dict[str, Any]]:
    """The ``managedFields`` of ``new`` after ``manager`` wrote it over ``old`` (``None`` for a create) at
    ``now`` (RFC 3339).  ``manager`` ``""`` (a write by the server itself) takes fields away from others but
    gets no entry."""
    old_entries = [e for e in ((old or {}).get("metadata") or {}).get("managedFields") or ()
                   if isinstance(e, Mapping)]
    old_flat = _flatten(rt, old) if old is not None else {}
    new_flat = _flatten(rt, new)
    if old is not None and old_flat == new_flat:
        return [dict(e) for e in old_entries]
    changed = {p for p, v in new_flat.items() if p not in old_flat or old_flat[p] != v}
    removed = set(old_flat) - set(new_flat)
    mine_id = (manager, "Update", rt.api_version)
    mine: set[_Path] = set()
    mine_entry: Mapping[str, Any] | None = None
    taken = changed | removed
    entries: list[dict[str, Any]] = []
    for entry in old_entries:
        paths = _parse(entry.get("fieldsV1"))
        if manager and _entry_id(entry) == mine_id:
            mine, mine_entry = paths, entry
            continue
        if paths.isdisjoint(taken):
            entries.append(dict(entry))  # untouched: kept as it is (no re-encoding)
            continue
        paths -= taken
        if paths:
            entries.append({**entry, "fieldsV1": _serialize(paths, new_flat)})
    if manager:
        paths = (mine | changed) - removed
        if paths:
            fields = (mine_entry["fieldsV1"] if mine_entry is not None and paths == mine
                      else _serialize(paths, new_flat))
            entries.append({"manager": manager, "operation": "Update", "apiVersion": rt.api_version, "time": now,
                            "fieldsType": "FieldsV1", "fieldsV1": fields})
    # kube's order: Apply entries first, then by time, then by manager
    entries.sort(key=lambda e: (e.get("operation") != "Apply", str(e.get("time", "")), str(e.get("manager", ""))))
    return entries
