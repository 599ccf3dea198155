"""Field specs of built-in types derived from the official Kubernetes Python client's models.

Each model class of ``kubernetes.client.models`` (``V1Deployment``, ``V1PodSpec``, ...) lists its attributes with
their types (``openapi_types``: ``"str"``, ``"int"``, ``"List[V1Container]"``, ``"Dict[str, str]"``, a model
name) and their JSON names (``attribute_map``).  That is enough to build the field spec :mod:`.schemas` describes:
which fields exist (unknown ones are reported for ``fieldValidation``), their JSON types (a wrong one is a 400), and
the OpenAPI schema kubectl reads.  The client is generated from kube's own OpenAPI document, so the fields are those
of the Kubernetes release it was generated for.

What the models do not say, and how it is filled in:

* which Go fields are pointers: integers and booleans are kept when zero/false (``replicas: 0`` is not "unset"),
  empty strings (but those of fields the model marks required, which have no ``omitempty``), maps and lists are
  dropped as ``omitempty`` drops them;
* ``IntOrString`` (``targetPort``, ``maxSurge``) and ``RawExtension`` are ``object`` in the models: any JSON value;
* resource quantities (``resources.limits``, a claim's ``capacity``) are ``Dict[str, str]`` in the models, but kube
  accepts a JSON number too (``cpu: 1``): it is kept as its string (``"1"``);
* ``metadata`` (also a pod template's) is the hand-written ObjectMeta spec every type shares; ``datetime`` is a
  ``metav1.Time`` string.

Specs are built on first use and cached (thread-safe: building twice gives equal specs, the last one is kept).
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Final

__all__ = ["describe", "model_spec"]

_ATOMS: Final = {"str": "string", "bytes": "string", "int": ("ptr", "integer"), "bool": ("ptr", "boolean"),
                 "float": "any", "object": "any", "datetime": "time", "date": "string"}
#: Map fields whose values are resource quantities (a JSON string or number).
_QUANTITY_MAPS: Final = frozenset({"limits", "requests", "capacity", "allocatedResources", "overhead", "hard", "used"})
_LIST: Final = re.compile(r"(?:List|list)\[(.+)\]")
_DICT: Final = re.compile(r"(?:Dict\[str, (.+)\]|dict\(str, (.+)\))")
_cache: dict[str, Any] = {}


def _models() -> Any:
    return importlib.import_module("kubernetes.client.models")


def _type_spec(type_name: str, json_name: str, meta: Any, building: frozenset[str]) -> Any:
    if type_name in _ATOMS:
        return _ATOMS[type_name]
    match = _LIST.fullmatch(type_name)
    if match is not None:
        return ("list", _type_spec(match.group(1), "", meta, building))
    match = _DICT.fullmatch(type_name)
    if match is not None:
        inner = match.group(1) or match.group(2)
        if inner == "str" and json_name in _QUANTITY_MAPS:
            return ("map", "quantity")
        return ("map", _type_spec(inner, "", meta, building))
    if type_name == "V1ObjectMeta":
        return meta
    if type_name in building:  # a recursive type (none of the served kinds has one): any value
        return "any"
    return _class_spec(type_name, meta, building | {type_name})


def _class_spec(name: str, meta: Any, building: frozenset[str]) -> dict[str, Any]:
    cls = getattr(_models(), name)
    attrs: dict[str, str] = cls.attribute_map
    types: dict[str, str] = cls.openapi_types
    fields = getattr(cls, "model_fields", {})  # pydantic models (client 35+) say which fields are required
    out: dict[str, Any] = {}
    for attr in sorted(types, key=lambda a: attrs[a]):
        spec = _type_spec(types[attr], attrs[attr], meta, building)
        if spec == "string" and attr in fields and fields[attr].is_required():
            spec = ("ptr", "string")  # a required Go string has no omitempty: "" is kept
        out[attrs[attr]] = spec
    return out


def model_spec(model: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The field spec of the client model ``model`` (``V1Deployment``): ``kind``, ``apiVersion`` and ``metadata``
    (``meta``, the shared ObjectMeta spec) first, then the other fields by JSON name.  Raises ``AttributeError``
    for a model the installed client does not have."""
    spec = _cache.get(model)
    if spec is None:
        fields = _class_spec(model, meta, frozenset({model}))
        head = {k: fields.pop(k) for k in ("kind", "apiVersion", "metadata") if k in fields}
        spec = _cache[model] = {**head, **fields}
    return spec


def _inner(type_name: str) -> str:
    """The element type of a list or map type name, else the name itself."""
    match = _LIST.fullmatch(type_name) or _DICT.fullmatch(type_name)
    if match is None:
        return type_name
    return _inner(next(g for g in match.groups() if g))


def describe(schema: dict[str, Any], model: str) -> None:
    """Add the client model's documentation to ``schema`` (an OpenAPI schema of ``model``'s field spec, changed in
    place): each field's ``description``, as kube's OpenAPI has it, which ``kubectl explain`` shows.  ObjectMeta
    and recursive types are left as they are."""
    _describe(schema, model, frozenset())


def _describe(schema: dict[str, Any], model: str, seen: frozenset[str]) -> None:
    cls = getattr(_models(), model, None)
    if cls is None or model in seen:
        return
    seen |= {model}
    fields = getattr(cls, "model_fields", {})
    properties = schema.get("properties") or {}
    for attr, type_name in cls.openapi_types.items():
        prop = properties.get(cls.attribute_map[attr])
        if not isinstance(prop, dict) or "allOf" in prop:  # metadata: a reference to the shared ObjectMeta
            continue
        description = getattr(fields.get(attr), "description", None)
        if description:
            prop["description"] = description
        inner = _inner(type_name)
        if inner not in _ATOMS:  # a model: describe its fields too
            target = prop.get("items") or prop.get("additionalProperties") or prop
            if isinstance(target, dict) and "properties" in target:
                _describe(target, inner, seen)
