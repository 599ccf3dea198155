"""A small decoder for the Kubernetes protobuf encoding of ConfigMaps, Namespaces and the self-reviews.

``kubectl create configmap``, ``kubectl create namespace`` and ``kubectl auth can-i|whoami`` send their bodies
as ``application/vnd.kubernetes.protobuf``: the 4-byte magic ``k8s\\x00``
followed by a ``runtime.Unknown`` message (field 1 ``typeMeta``, field 2 the raw
object).  This module turns such a body into the equivalent JSON dict, which
then goes through the same decoding and validation as a JSON body.

gogo-protobuf writes empty strings, zero integers and zero timestamps
explicitly; they are skipped here so that they read as "unset", as they would in
JSON (otherwise an empty ``metadata.namespace`` would look like a mismatch and a
``generation: 0`` would appear).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Final

from .errors import bad_request

__all__ = ["PROTOBUF", "decode_object"]

PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
_MAGIC: Final = b"k8s\x00"


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise _Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """Yield ``(field number, value)``: an int for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise _Malformed("truncated field")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")


def _int64(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise _Malformed("expected a varint")
    return value - (1 << 64) if value >= 1 << 63 else value


def _str(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _Malformed("expected a string")
    return value.decode()


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise _Malformed("expected bytes")
    return value


def _map_entry(value: int | bytes, as_bytes: bool = False) -> tuple[str, Any]:
    key, item = "", b"" if as_bytes else ""
    for number, v in _fields(_bytes(value)):
        if number == 1:
            key = _str(v)
        elif number == 2:
            item = _bytes(v) if as_bytes else _str(v)
    return key, item


def _time(value: int | bytes) -> str | None:
    seconds = 0
    for number, v in _fields(_bytes(value)):
        if number == 1:
            seconds = _int64(v)
    if seconds == 0:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_reference(value: int | bytes) -> dict[str, Any]:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    out: dict[str, Any] = {}
    for number, v in _fields(_bytes(value)):
        if number in names and (s := _str(v)):
            out[names[number]] = s
        elif number == 6:
            out["controller"] = bool(v)
        elif number == 7:
            out["blockOwnerDeletion"] = bool(v)
    return out


_META_STRINGS: Final = {1: "name", 2: "generateName", 3: "namespace", 4: "selfLink", 5: "uid", 6: "resourceVersion"}


def _object_meta(value: int | bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, v in _fields(_bytes(value)):
        if number in _META_STRINGS:
            if s := _str(v):
                out[_META_STRINGS[number]] = s
        elif number in (7, 10):
            if n := _int64(v):
                out["generation" if number == 7 else "deletionGracePeriodSeconds"] = n
        elif number in (8, 9):
            if t := _time(v):
                out["creationTimestamp" if number == 8 else "deletionTimestamp"] = t
        elif number in (11, 12):
            k, item = _map_entry(v)
            out.setdefault("labels" if number == 11 else "annotations", {})[k] = item
        elif number == 13:
            out.setdefault("ownerReferences", []).append(_owner_reference(v))
        elif number == 14:
            out.setdefault("finalizers", []).append(_str(v))
        # 17 managedFields: skipped (the registry drops a client's managedFields and writes its own)
    return out


def _configmap(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1"}
    for number, v in _fields(raw):
        if number == 1:
            out["metadata"] = _object_meta(v)
        elif number == 2:
            k, item = _map_entry(v)
            out.setdefault("data", {})[k] = item
        elif number == 3:
            k, blob = _map_entry(v, as_bytes=True)
            out.setdefault("binaryData", {})[k] = base64.b64encode(blob).decode()
        elif number == 4:
            out["immutable"] = bool(v)
    return out


def _namespace(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1"}
    for number, v in _fields(raw):
        if number == 1:
            out["metadata"] = _object_meta(v)
        elif number == 2:
            finalizers = [_str(f) for n, f in _fields(_bytes(v)) if n == 1]
            if finalizers:
                out["spec"] = {"finalizers": finalizers}
        elif number == 3:
            phase = next((_str(p) for n, p in _fields(_bytes(v)) if n == 1), "")
            if phase:
                out["status"] = {"phase": phase}
    return out


# Table-driven messages: field number -> (JSON name, "string" | "meta" | a nested layout).
_Layout = dict[int, tuple[str, Any]]
_SELECTOR_ATTRIBUTES: Final[_Layout] = {1: ("rawSelector", "string")}
_RESOURCE_ATTRIBUTES: Final[_Layout] = {
    1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"), 4: ("version", "string"),
    5: ("resource", "string"), 6: ("subresource", "string"), 7: ("name", "string"),
    8: ("fieldSelector", _SELECTOR_ATTRIBUTES), 9: ("labelSelector", _SELECTOR_ATTRIBUTES),
}
_ACCESS_REVIEW: Final[_Layout] = {
    1: ("metadata", "meta"),
    2: ("spec", {1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                 2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")})}),
}
_RULES_REVIEW: Final[_Layout] = {1: ("metadata", "meta"), 2: ("spec", {1: ("namespace", "string")})}
_SUBJECT_REVIEW: Final[_Layout] = {1: ("metadata", "meta")}


def _message(raw: bytes, layout: _Layout) -> dict[str, Any]:
    """Decode a message of ``layout``; unknown fields (a review's status, ...) are skipped, empty strings too."""
    out: dict[str, Any] = {}
    for number, v in _fields(raw):
        if number not in layout:
            continue
        name, kind = layout[number]
        if kind == "string":
            if text := _str(v):
                out[name] = text
        elif kind == "meta":
            out[name] = _object_meta(v)
        else:
            out[name] = _message(_bytes(v), kind)
    return out


def _typed(api_version: str, kind: str, layout: _Layout) -> Callable[[bytes], dict[str, Any]]:
    def decode(raw: bytes) -> dict[str, Any]:
        return {"kind": kind, "apiVersion": api_version, **_message(raw, layout)}
    return decode


_DECODERS: Final[dict[tuple[str, str], Callable[[bytes], dict[str, Any]]]] = {
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Namespace"): _namespace,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"):
        _typed("authorization.k8s.io/v1", "SelfSubjectAccessReview", _ACCESS_REVIEW),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"):
        _typed("authorization.k8s.io/v1", "SelfSubjectRulesReview", _RULES_REVIEW),
    ("authentication.k8s.io/v1", "SelfSubjectReview"):
        _typed("authentication.k8s.io/v1", "SelfSubjectReview", _SUBJECT_REVIEW),
}


def decode_object(body: bytes) -> dict[str, Any]:
    """Decode a ``k8s\\x00``-enveloped ConfigMap, Namespace, SelfSubjectAccessReview, SelfSubjectRulesReview or
    SelfSubjectReview into its JSON form.

    Raises a 400 :class:`~keyqueue.apiserver.errors.APIError` for a malformed
    body or another kind.
    """
    if not body.startswith(_MAGIC):
        raise bad_request("provided protobuf body does not start with the k8s magic prefix")
    try:
        api_version = kind = ""
        raw = b""
        for number, v in _fields(body[len(_MAGIC) :]):
            if number == 1:
                for n, tv in _fields(_bytes(v)):
                    if n == 1:
                        api_version = _str(tv)
                    elif n == 2:
                        kind = _str(tv)
            elif number == 2:
                raw = _bytes(v)
        decoder = _DECODERS.get((api_version or "v1", kind))
        if decoder is None:
            raise bad_request(f"protobuf bodies of kind {api_version}/{kind} are not supported by this server")
        return decoder(raw)
    except (_Malformed, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed protobuf body: {exc}") from None
