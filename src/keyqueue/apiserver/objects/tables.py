"""The ``meta.k8s.io/v1`` Table form kubectl asks for: each type's columns and the cells of its objects."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .printers import KIND_COLUMNS
from .resources import ResourceType
from .times import age, parse_time

__all__ = ["to_table"]


_NAME_COLUMN: Final = {
    "name": "Name", "type": "string", "format": "name", "priority": 0,
    "description": "Name must be unique within a namespace.",
}
_AGE_COLUMN: Final = {
    "name": "Age", "type": "string", "format": "", "priority": 0,
    "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}
_Cell = Callable[[Mapping[str, Any], float], Any]


def _column(name: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": kind, "format": "", "priority": priority, "description": description}


def _name_cell(obj: Mapping[str, Any], now: float) -> Any:
    return (obj.get("metadata") or {}).get("name", "")


def _since(value: Any, now: float) -> str:
    when = parse_time(value) if isinstance(value, str) else None
    return age(now - when) if when is not None else "<unknown>"


def _date_cell(value: str, now: float) -> str:
    """A CRD's ``date`` printer column, as kube-apiserver fills it: the age of an RFC 3339 time, ``<unknown>`` for
    an empty one, ``<invalid>`` for one that does not parse."""
    if value in ("", "null"):
        return "<unknown>"
    when = parse_time(value)
    return age(now - when) if when is not None else "<invalid>"


def _age_cell(obj: Mapping[str, Any], now: float) -> Any:
    return _since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def _path_cell(*path: str) -> _Cell:
    def cell(obj: Mapping[str, Any], now: float) -> Any:
        value: Any = obj
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        return "" if value is None else value
    return cell


def _event_cells(regarding: str, note: str, last: str, first: str, count: str) -> list[tuple[dict[str, Any], _Cell]]:
    """kube's event printer columns, for the field names of one Event version."""
    def last_seen(obj: Mapping[str, Any], now: float) -> Any:
        series = obj.get("series") or {}
        for value in (series.get("lastObservedTime"), obj.get(last), obj.get("eventTime")):
            if value:
                return _since(value, now)
        return "<unknown>"

    def involved(obj: Mapping[str, Any], now: float) -> Any:
        ref = obj.get(regarding) or {}
        return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"

    def repeats(obj: Mapping[str, Any], now: float) -> Any:
        return int((obj.get("series") or {}).get("count") or obj.get(count) or 1)

    return [
        (_column("Last Seen", "string", "Time of the last occurrence."), last_seen),
        (_column("Type", "string", "Type of this event (Normal, Warning)."), _path_cell("type")),
        (_column("Reason", "string", "Why the action was taken."), _path_cell("reason")),
        (_column("Object", "string", "The object this event is about."), involved),
        (_column("Message", "string", "A human-readable description."), _path_cell(note)),
        (_column("First Seen", "string", "Time of the first occurrence.", 1),
         lambda obj, now: _since(obj.get(first) or obj.get("eventTime"), now)),
        (_column("Count", "integer", "The number of times this event has occurred.", 1), repeats),
        (dict(_NAME_COLUMN, priority=1), _name_cell),
    ]


_NAME_AND_AGE: Final[list[tuple[dict[str, Any], _Cell]]] = [(_NAME_COLUMN, _name_cell), (_AGE_COLUMN, _age_cell)]
#: The Table columns per type (by qualified name) with the cell of each; other types show Name and Age.
_COLUMNS: Final[dict[str, list[tuple[dict[str, Any], _Cell]]]] = {
    "configmaps": [
        (_NAME_COLUMN, _name_cell),
        (_column("Data", "integer", "Number of keys in data and binaryData."),
         lambda obj, now: len(obj.get("data") or {}) + len(obj.get("binaryData") or {})),
        (_AGE_COLUMN, _age_cell),
    ],
    "namespaces": [
        (_NAME_COLUMN, _name_cell),
        (_column("Status", "string", "The status of the namespace"), _path_cell("status", "phase")),
        (_AGE_COLUMN, _age_cell),
    ],
    "leases.coordination.k8s.io": [
        (_NAME_COLUMN, _name_cell),
        (_column("Holder", "string", "holderIdentity contains the identity of the holder of a current lease."),
         _path_cell("spec", "holderIdentity")),
        (_AGE_COLUMN, _age_cell),
    ],
    "customresourcedefinitions.apiextensions.k8s.io": [
        (_NAME_COLUMN, _name_cell),
        (_column("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this "
                 "object was created."), _path_cell("metadata", "creationTimestamp")),
    ],
    "events": _event_cells("involvedObject", "message", "lastTimestamp", "firstTimestamp", "count"),
    "events.events.k8s.io": _event_cells("regarding", "note", "deprecatedLastTimestamp",
                                         "deprecatedFirstTimestamp", "deprecatedCount"),
}


def _columns(rt: ResourceType) -> list[tuple[dict[str, Any], _Cell]]:
    """The Table columns of ``rt``: its own, a CRD's ``additionalPrinterColumns`` after Name, else Name and Age."""
    if rt.custom is not None and rt.custom.printer_columns:
        return [(_NAME_COLUMN, _name_cell), *rt.custom.columns(_date_cell)]
    return _COLUMNS.get(rt.qualified_name) or KIND_COLUMNS.get(rt.qualified_name, _NAME_AND_AGE)


def _row(rt: ResourceType, obj: Mapping[str, Any], now: float, include_object: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    row: dict[str, Any] = {"cells": [cell(obj, now) for _, cell in _columns(rt)]}
    if include_object == "Object":
        row["object"] = obj
    elif include_object != "None":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    return row


def to_table(
    rt: ResourceType,
    objs: Sequence[Mapping[str, Any]],
    resource_version: str,
    now: float,
    include_object: str = "Metadata",
    list_meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objs`` with the type's columns (Name, Data|Status|Holder, Age; kube's
    event columns for Events)."""
    meta = dict(list_meta or {})
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [d for d, _ in _columns(rt)],
        "rows": [_row(rt, o, now, include_object) for o in objs],
    }
