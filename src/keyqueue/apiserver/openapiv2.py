"""``/openapi/v2``: the Swagger 2.0 document kube-apiserver also serves, as JSON or as gnostic protobuf.

kubectl reads OpenAPI v3 first; it falls back to v2 for ``kubectl explain --output=plaintext-openapiv2`` and when
a v3 document is missing.  client-go asks for ``application/com.github.proto-openapi.spec.v2.v1.0+protobuf`` (the
``openapi.v2.Document`` message of gnostic's ``OpenAPIv2.proto``) and cannot read JSON there, so both encodings
are served.  The document holds the definitions only (``paths`` is empty): built from the same component schemas as
the v3 documents, with ``#/components/schemas/`` references turned into ``#/definitions/`` ones and a single-ref
``allOf`` into a plain ``$ref`` (Swagger 2.0 has no ``allOf`` wrappers in kube's documents).  Vendor extensions
(``x-kubernetes-group-version-kind``, by which kubectl finds a kind's schema) are written as YAML (JSON is YAML) in
``openapi.v2.Any``, as gnostic does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["PROTOBUF_V2", "PROTOBUF_V2_OLD", "encode_document", "swagger_document"]

#: The media type of the protobuf document (client-go also asks for its older spelling with ``@v1.0``, which Go's
#: MIME parser refuses in a ``Content-Type``; kube answers both with this one).
PROTOBUF_V2: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
PROTOBUF_V2_OLD: Final = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_V3_REF: Final = "#/components/schemas/"


def _convert(schema: Any) -> Any:
    """A v3 component schema as a Swagger 2.0 schema."""
    if isinstance(schema, list):
        return [_convert(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = "#/definitions/" + value.removeprefix(_V3_REF)
        elif key == "allOf" and isinstance(value, list) and len(value) == 1 and "$ref" in value[0]:
            out["$ref"] = _convert(value[0])["$ref"]
        else:
            out[key] = _convert(value)
    return out


def swagger_document(schemas: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The Swagger 2.0 document of the component ``schemas`` (of every served group version)."""
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": version}, "paths": {},
            "definitions": {name: _convert(schema) for name, schema in sorted(schemas.items())}}


# ----------------------------------------------------------------------------- protobuf encoding


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings and messages)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string(number: int, value: str) -> bytes:
    return _field(number, value.encode()) if value else b""


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3) + b"\x01" if value else b""


def _named(number: int, name: str, value: bytes) -> bytes:
    """A gnostic ``Named*`` pair: name 1, value 2."""
    return _field(number, _string(1, name) + _field(2, value))


def _any(value: Any) -> bytes:
    """``openapi.v2.Any`` holding ``value`` as YAML (field 2)."""
    return _string(2, json.dumps(value))


def _schema(schema: Mapping[str, Any]) -> bytes:
    """``openapi.v2.Schema`` (field numbers from gnostic's ``OpenAPIv2.proto``)."""
    out = bytearray()
    out += _string(1, str(schema.get("$ref", "")))
    out += _string(2, str(schema.get("format", "")))
    out += _string(4, str(schema.get("description", "")))
    if "default" in schema:
        out += _field(5, _any(schema["default"]))
    for name in schema.get("required") or ():
        out += _field(19, str(name).encode())
    for value in schema.get("enum") or ():
        out += _field(20, _any(value))
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        out += _field(21, _field(1, _schema(extra)))
    elif isinstance(extra, bool):
        out += _field(21, _bool(2, extra))
    if schema.get("type"):
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        out += _field(22, b"".join(_field(1, str(t).encode()) for t in types))
    if isinstance(schema.get("items"), Mapping):
        out += _field(23, _field(1, _schema(schema["items"])))
    for sub in schema.get("allOf") or ():
        out += _field(24, _schema(sub))
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        out += _field(25, b"".join(_named(1, name, _schema(sub)) for name, sub in properties.items()))
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _named(31, key, _any(value))
    return bytes(out)


def encode_document(doc: Mapping[str, Any]) -> bytes:
    """``doc`` (from :func:`swagger_document`) as an ``openapi.v2.Document`` message."""
    info = _string(1, doc["info"]["title"]) + _string(2, doc["info"]["version"])
    definitions = b"".join(_named(1, name, _schema(schema)) for name, schema in doc["definitions"].items())
    return _string(1, doc["swagger"]) + _field(2, info) + _field(8, b"") + _field(9, definitions)
