"""An object in and out: a request body decoded into its type's shape, and the stored form converted to the served.

Decoding follows Go's ``encoding/json``: unknown fields are dropped (and reported, for ``fieldValidation``),
``null`` means "unset", empty values of ``omitempty`` fields are dropped, and a value of the wrong JSON type is a
400 error.  A custom resource is decoded, pruned and defaulted by its :class:`~keyqueue.apiserver.custom.CustomSchema`.
A type that shares its storage with another version (:attr:`~.resources.ResourceType.renames`) is converted on
every write (:func:`to_stored`) and read (:func:`from_stored`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final

from ..custom import CustomSchema
from ..errors import APIError, bad_request
from .resources import ResourceType, stored_type
from .schemas import _OBJECT_META, _OWNER_REFERENCE, _Spec, canonical, schema_of
from .times import normalize_time

__all__ = ["decode_meta", "decode_typed", "from_stored", "to_stored"]

_JSON_TYPE_NAMES: Final = {str: "string", bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def _type_error(rt: ResourceType, path: str, value: object, want: str) -> APIError:
    got = _JSON_TYPE_NAMES.get(type(value), "value")
    path = re.sub(r"\[\d+\]", "", path)  # Go's message names the field without list indices
    return bad_request(
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: json: cannot unmarshal {got} '
        f"into Go struct field {rt.kind}.{path} of type {want}"
    )


def _decode(rt: ResourceType, spec: _Spec, value: Any, path: str, unknown: list[str]) -> Any:
    if spec == "any":
        return value
    if spec == "string":
        if not isinstance(value, str):
            raise _type_error(rt, path, value, "string")
        return value
    if spec in ("microtime", "time"):
        if not isinstance(value, str):
            raise _type_error(rt, path, value, "string")
        canonical_time = normalize_time(value, spec == "microtime")
        if canonical_time is None:
            layout = "2006-01-02T15:04:05.000000Z07:00" if spec == "microtime" else "2006-01-02T15:04:05Z07:00"
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: parsing time "{value}" '
                f'as "{layout}": cannot parse it ({path})'
            )
        return canonical_time
    if spec == "quantity":
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _type_error(rt, path, value, "resource.Quantity")
        return value if isinstance(value, str) else format(value, "g")
    if spec == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(rt, path, value, "int64")
        return value
    if isinstance(spec, tuple) and spec[0] == "ptr":
        return _decode(rt, spec[1], value, path, unknown)
    if spec == "boolean":
        if not isinstance(value, bool):
            raise _type_error(rt, path, value, "bool")
        return value
    if isinstance(spec, tuple) and spec[0] == "map":
        if not isinstance(value, dict):
            raise _type_error(rt, path, value, "map[string]string")
        return {k: _decode(rt, spec[1], v, path, unknown) for k, v in value.items() if v is not None}
    if isinstance(spec, tuple) and spec[0] == "list":
        if not isinstance(value, list):
            raise _type_error(rt, path, value, "[]" + ("string" if spec[1] == "string" else "object"))
        # unknown fields inside a list are named with the item's index, as kube's strict decoding names them
        return [_decode(rt, spec[1], v, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise _type_error(rt, path, value, "object")
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key not in spec:
                unknown.append(sub)
                continue
            if item is None:
                continue
            decoded = _decode(rt, spec[key], item, sub, unknown)
            # Go's `omitempty`: empty strings, maps, lists and zero integers vanish
            # (booleans are pointers in these types, so `false` stays).
            keep = spec is _OWNER_REFERENCE or (isinstance(spec[key], tuple) and spec[key][0] == "ptr")
            if decoded in ("", 0, {}, []) and not isinstance(decoded, bool) and not keep:
                continue
            out[key] = decoded
        return out
    raise AssertionError(f"bad spec {spec!r}")  # pragma: no cover


def decode_typed(rt: ResourceType, body: Any) -> tuple[dict[str, Any], list[str]]:
    """Decode a JSON value into ``rt``'s shape.

    Returns the object without unknown fields and the dotted paths of the
    unknown fields that were dropped.  ``null`` values are dropped like unset
    fields.  Raises a 400 :class:`APIError` for a non-object body, a value of
    the wrong JSON type, invalid base64 in ``binaryData``, a malformed
    MicroTime (``spec.acquireTime``/``spec.renewTime`` of a Lease), or a
    ``kind`` or ``apiVersion`` other than ``rt``'s.
    """
    if rt.custom is not None:
        return _decode_custom(rt, rt.custom, body)
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request must be a {rt.kind} object")
    unknown: list[str] = []
    obj: dict[str, Any] = _decode(rt, schema_of(rt), body, "", unknown)
    kind = obj.get("kind") or rt.kind
    version = obj.get("apiVersion") or rt.api_version
    if version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({version}) does not match the expected API version ({rt.api_version})"
        )
    if kind != rt.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
    obj.setdefault("metadata", {})
    for key, value in (obj.get("binaryData") or {}).items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(
                f'{rt.kind} in version "v1" cannot be handled as a {rt.kind}: illegal base64 data in binaryData[{key}]'
            ) from None
    return obj, unknown


def _decode_custom(rt: ResourceType, custom: CustomSchema, body: Any) -> tuple[dict[str, Any], list[str]]:
    """``body`` (a decoded JSON value) as an object of the custom resource ``rt``: returns it pruned and defaulted
    (:meth:`CustomSchema.complete`), and the paths of the unknown fields that were pruned.  400 for a body that is not
    an object, ``metadata`` of the wrong shape, or a ``kind``/``apiVersion`` other than ``rt``'s."""
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request must be a {rt.kind} object")
    kind = body.get("kind") or rt.kind
    version = body.get("apiVersion") or rt.api_version
    if version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({version}) does not match the expected API version ({rt.api_version})")
    if kind != rt.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
    unknown: list[str] = []
    meta = decode_meta(rt, body.get("metadata") or {}, unknown)
    rest = {k: v for k, v in body.items() if k not in ("kind", "apiVersion", "metadata")}
    obj: dict[str, Any] = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
    return custom.complete(obj, rest, unknown), unknown


def decode_meta(rt: ResourceType, value: Any, unknown: list[str]) -> dict[str, Any]:
    """``metadata`` decoded as ``ObjectMeta`` (400 for a value of the wrong type; unknown fields dropped and their
    paths added to ``unknown``)."""
    out: dict[str, Any] = _decode(rt, _OBJECT_META, value, "metadata", unknown)
    return out


def to_stored(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` (of ``rt``) in the form its storage holds: :attr:`ResourceType.renames` undone, the stored
    type's ``kind`` and ``apiVersion``; a custom resource with the ``apiVersion`` of its CRD's storage version (no
    conversion: the strategy ``None``).  Other types are returned as they are (a shallow copy)."""
    if rt.custom is not None:
        return {**obj, "apiVersion": f"{rt.group}/{rt.custom.storage_version}"}
    if not rt.renames:
        return dict(obj)
    served_to_stored = {served: stored for stored, served in rt.renames}
    out = {served_to_stored.get(k, k): v for k, v in obj.items()}
    target = stored_type(rt)
    out["kind"], out["apiVersion"] = target.kind, target.api_version
    return out


def from_stored(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object as ``rt`` serves it (the inverse of :func:`to_stored`), in ``rt``'s field order; a custom
    resource with ``rt``'s ``apiVersion`` and its schema's defaults applied (kube defaults on every read)."""
    if rt.custom is not None:  # pruned to the served version's schema and defaulted, as kube decodes from storage
        head = {"apiVersion": rt.api_version, "kind": obj.get("kind", rt.kind), "metadata": obj.get("metadata", {})}
        return rt.custom.complete(head, {k: v for k, v in obj.items() if k not in head}, [])
    if not rt.renames:
        return obj
    stored_to_served = dict(rt.renames)
    out = {stored_to_served.get(k, k): v for k, v in obj.items()}
    out["kind"], out["apiVersion"] = rt.kind, rt.api_version
    return canonical(rt, out)
