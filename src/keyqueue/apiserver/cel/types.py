"""CEL types of structural-schema values, with the size bounds kube's cost estimator uses.

:func:`schema_type` is kube's ``SchemaDeclType``: ``integer`` is ``int``, ``number`` ``double``, a ``string`` with
``format: byte`` ``bytes``, ``x-kubernetes-int-or-string`` ``dyn``, ``additionalProperties`` a map, ``properties``
an object with exactly those fields (the root of a resource also has ``apiVersion``, ``kind``,
``metadata.name`` and ``metadata.generateName``); an ``array``'s bound is ``maxItems`` or, without it, how many of
the smallest item fit in a 3 MiB request; a ``string``'s bound is ``4 * maxLength`` bytes or 3 MiB.
:func:`value_type` gives the same for an actual value with its actual sizes (the runtime cost).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["DYN", "MAX_REQUEST_BYTES", "CelType", "escape", "max_cardinality", "schema_type", "simple",
           "value_type"]

#: kube's request size limit, the bound of every unbounded list, map and string.
MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024


@dataclass(frozen=True, eq=False)
class CelType:
    """``kind``: ``bool int uint double string bytes null list map object dyn optional timestamp duration
    type`` or a library type (``quantity url ip cidr``); ``elem`` the item/value/wrapped type, ``fields`` an
    object's, ``size`` the largest length (strings, bytes) or number of elements (lists, maps)."""

    kind: str
    elem: CelType | None = None
    fields: Mapping[str, CelType] = field(default_factory=dict)
    size: int = 0

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.elem})"
        if self.kind == "map":
            return f"map(string, {self.elem})"
        if self.kind == "optional":
            return f"optional_type({self.elem})"
        return self.kind


_RESERVED: Final = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
                              "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
                              "void", "while"})
_ESCAPES: Final = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_IDENT: Final = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def escape(name: str) -> str | None:
    """kube's escaping of a property name for CEL (``namespace`` -> ``__namespace__``, ``a-b`` -> ``a__dash__b``,
    ``__`` -> ``__underscores__``, ``.`` -> ``__dot__``, ``/`` -> ``__slash__``); None if it cannot be
    escaped."""
    if name in _RESERVED:
        return f"__{name}__"
    out, i = [], 0
    while i < len(name):
        if name.startswith("__", i):
            out.append(_ESCAPES["__"])
            i += 2
        elif name[i] in _ESCAPES:
            out.append(_ESCAPES[name[i]])
            i += 1
        else:
            out.append(name[i])
            i += 1
    escaped = "".join(out)
    return escaped if _IDENT.fullmatch(escaped) else None


_SIMPLE: Final = {k: CelType(k) for k in ("bool", "int", "uint", "double", "null", "dyn", "timestamp", "duration",
                                          "type", "quantity", "url", "ip", "cidr")}
DYN: Final = _SIMPLE["dyn"]


def simple(kind: str, size: int = 0) -> CelType:
    """The type ``kind`` (``string``/``bytes``/``list``... get ``size``)."""
    if size or kind not in _SIMPLE:
        return CelType(kind, size=size)
    return _SIMPLE[kind]


def _min_json_size(schema: Mapping[str, Any] | None) -> int:
    """kube's ``estimateMinSizeJSON``: the fewest bytes a value of ``schema`` takes in JSON."""
    if not schema:
        return 1
    kind = schema.get("type")
    if kind == "boolean":
        return 4
    if kind in ("number", "integer"):
        return 1
    if kind == "string":
        return {"duration": 3, "date": 12, "date-time": 21}.get(str(schema.get("format", "")), 2)
    if kind == "array":
        return 2
    if kind == "object":
        size = 2
        props = schema.get("properties") or {}
        for name in schema.get("required") or ():
            prop = props.get(name)
            if isinstance(prop, Mapping) and "default" not in prop:
                size += len(name) + _min_json_size(prop) + 4
        return size
    return 1


def max_cardinality(schema: Mapping[str, Any]) -> int:
    """kube's ``MaxCardinality``: how often a value of ``schema`` fits in one request."""
    return MAX_REQUEST_BYTES // (_min_json_size(schema) + 1)


def _string_type(schema: Mapping[str, Any]) -> CelType:
    fmt = schema.get("format")
    if fmt == "byte":
        return CelType("bytes", size=int(schema.get("maxLength", MAX_REQUEST_BYTES - 2)))
    if "maxLength" in schema:
        return CelType("string", size=max(int(schema["maxLength"]), 0) * 4)
    size = {"duration": 32, "date": 12, "date-time": 32}.get(str(fmt or ""), MAX_REQUEST_BYTES - 2)
    return CelType("string", size=size)


def schema_type(schema: Mapping[str, Any], resource_root: bool = False) -> CelType | None:
    """The CEL type of values of ``schema`` (None where kube exposes nothing to CEL)."""
    if schema.get("x-kubernetes-int-or-string"):
        return CelType("dyn", size=MAX_REQUEST_BYTES - 2)
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return None
        elem = schema_type(items, bool(items.get("x-kubernetes-embedded-resource")))
        if elem is None:
            return None
        bound = (max(int(schema["maxItems"]), 0) if "maxItems" in schema
                 else (MAX_REQUEST_BYTES - 2) // (_min_json_size(items) + 1))
        return CelType("list", elem, size=bound)
    if kind == "object" or resource_root:
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and not resource_root:
            elem = schema_type(extra, bool(extra.get("x-kubernetes-embedded-resource")))
            if elem is None:
                return None
            bound = (max(int(schema["maxProperties"]), 0) if "maxProperties" in schema
                     else (MAX_REQUEST_BYTES - 2) // (_min_json_size(extra) + 6))
            return CelType("map", elem, size=bound)
        fields: dict[str, CelType] = {}
        for name, prop in (schema.get("properties") or {}).items():
            if isinstance(prop, Mapping):
                sub = schema_type(prop, bool(prop.get("x-kubernetes-embedded-resource")))
                escaped = escape(name)
                if sub is not None and escaped is not None:
                    fields[escaped] = sub
        if resource_root:
            string = CelType("string", size=MAX_REQUEST_BYTES - 2)
            fields.setdefault("apiVersion", string)
            fields.setdefault("kind", string)
            meta = fields.get("metadata")
            meta_fields = dict(meta.fields) if meta is not None and meta.kind == "object" else {}
            meta_fields.setdefault("name", string)
            meta_fields.setdefault("generateName", string)
            fields["metadata"] = CelType("object", fields=meta_fields)
        return CelType("object", fields=fields)
    if kind == "string":
        return _string_type(schema)
    if kind == "boolean":
        return _SIMPLE["bool"]
    if kind == "number":
        return _SIMPLE["double"]
    if kind == "integer":
        return _SIMPLE["int"]
    return None


def value_type(value: Any) -> CelType:
    """A type for an actual JSON value, its sizes the actual ones (lists and maps typed by their largest item)."""
    if isinstance(value, bool):
        return _SIMPLE["bool"]
    if isinstance(value, int):
        return _SIMPLE["int"]
    if isinstance(value, float):
        return _SIMPLE["double"]
    if isinstance(value, str):
        return CelType("string", size=len(value.encode()))
    if isinstance(value, list):
        return CelType("list", _widest([value_type(v) for v in value]), size=len(value))
    if isinstance(value, dict):
        return CelType("object", fields={e: value_type(v) for k, v in value.items() if (e := escape(k))},
                       size=len(value))
    return _SIMPLE["null"]


def _widest(types: list[CelType]) -> CelType:
    if not types:
        return DYN
    best = max(types, key=lambda t: t.size)
    if best.kind == "object":
        merged: dict[str, CelType] = {}
        for t in types:
            for k, v in t.fields.items():
                if k not in merged or v.size > merged[k].size:
                    merged[k] = v
        return CelType("object", fields=merged, size=best.size)
    return best
