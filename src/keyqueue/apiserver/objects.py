"""The served resources: their schema, decoding, validation and table form.

This module holds the per-resource rules that kube-apiserver gets from its
type definitions and registry strategies, restricted to ConfigMaps,
Namespaces and Events (core ``v1``), Events (``events.k8s.io/v1``, stored as core Events), Leases
(``coordination.k8s.io/v1``) and the self access reviews (answered, never stored).  A type is a
:class:`ResourceType` plus its field spec; the registry, the routes, discovery and OpenAPI are generic over them:

* decoding a JSON body into the typed shape: unknown fields are dropped (and
  reported, for ``fieldValidation``), ``null`` means "unset", empty values of
  ``omitempty`` fields are dropped, and a value of the wrong JSON type is a 400
  error, as with Go's ``encoding/json``;
* validation (422 Invalid): object names, ConfigMap keys, labels, annotations,
  immutable ConfigMaps, immutable ``metadata.uid``, Lease durations and
  transitions;
* a canonical field order, so that equal objects encode to equal bytes (a no-op
  update is detected by comparing bytes, as kube-apiserver does);
* the ``meta.k8s.io/v1`` Table form kubectl asks for.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from .custom import CustomSchema
from .errors import APIError, bad_request, invalid
from .validation import event_causes, event_update_causes, namespace_finalizer_causes, owner_reference_causes

__all__ = [
    "BUILTINS",
    "CONFIGMAPS",
    "CRDS",
    "EVENTS",
    "EVENTS_V1",
    "LEASES",
    "NAMESPACES",
    "REVIEWS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "SELF_SUBJECT_REVIEWS",
    "SELF_SUBJECT_RULES_REVIEWS",
    "ResourceType",
    "age",
    "canonical",
    "decode_meta",
    "decode_typed",
    "field_value",
    "format_time",
    "from_stored",
    "normalize_time",
    "parse_time",
    "schema_of",
    "stored_type",
    "to_stored",
    "to_table",
    "validate",
    "validate_update",
]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """A served resource: ``GET /api/v1/[namespaces/NS/]<name>`` for the core group (``group == ""``),
    ``GET /apis/<group>/<version>/[namespaces/NS/]<name>`` otherwise."""

    name: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    field_selectors: frozenset[str]
    group: str = ""
    version: str = "v1"
    #: The verbs served (``deletecollection`` is added for namespaced types that serve ``delete``).  A type that
    #: serves only ``create`` is a review: it is answered, never stored (:data:`REVIEWS`).
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    #: ``(stored field, served field)`` pairs of top-level fields: a type that shares its storage with another
    #: version (``events.k8s.io/v1`` Events are stored as core ``v1`` Events) is converted on every read and
    #: write by renaming these fields (:func:`to_stored`, :func:`from_stored`).
    renames: tuple[tuple[str, str], ...] = ()
    #: Field selectors whose value is not at the field's own dotted path: ``(selector, path)``.
    field_paths: tuple[tuple[str, str], ...] = ()
    #: For a custom resource (a version of a CustomResourceDefinition): its schema and subresources, which
    #: decoding, validation, defaults, pruning, the table form and OpenAPI follow instead of a built-in spec.
    custom: CustomSchema | None = None

    @property
    def storage_name(self) -> str:
        """The resource's part of its storage keys: ``configmaps``; ``<group>/<plural>`` for a custom resource
        (as kube-apiserver lays out CRs: ``/registry/<group>/<plural>/<namespace>/<name>``)."""
        return f"{self.group}/{self.name}" if self.custom is not None else self.name

    @property
    def discovery_verbs(self) -> list[str]:
        """The verbs as discovery lists them (sorted, ``deletecollection`` included where served)."""
        verbs = set(self.verbs)
        if self.namespaced and "delete" in verbs:
            verbs.add("deletecollection")
        return sorted(verbs)

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of the objects: ``v1`` or ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_name(self) -> str:
        """The resource as error messages name it: ``configmaps``, ``leases.coordination.k8s.io``."""
        return f"{self.name}.{self.group}" if self.group else self.name

    @property
    def path_prefix(self) -> str:
        """The URL prefix of the resource's group version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


_NAME_NAMESPACE: Final = frozenset({"metadata.name", "metadata.namespace"})
CONFIGMAPS: Final = ResourceType("configmaps", "configmap", "ConfigMap", True, ("cm",), _NAME_NAMESPACE)
NAMESPACES: Final = ResourceType(
    "namespaces", "namespace", "Namespace", False, ("ns",), frozenset({"metadata.name", "status.phase"})
)
LEASES: Final = ResourceType("leases", "lease", "Lease", True, (), _NAME_NAMESPACE, "coordination.k8s.io")
SELF_SUBJECT_ACCESS_REVIEWS: Final = ResourceType(
    "selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview", False, (), frozenset(),
    "authorization.k8s.io", verbs=("create",))
SELF_SUBJECT_RULES_REVIEWS: Final = ResourceType(
    "selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview", False, (), frozenset(),
    "authorization.k8s.io", verbs=("create",))
SELF_SUBJECT_REVIEWS: Final = ResourceType(
    "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", False, (), frozenset(),
    "authentication.k8s.io", verbs=("create",))
_EVENT_RENAMES: Final = (
    ("involvedObject", "regarding"), ("message", "note"), ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"), ("reportingComponent", "reportingController"),
)
_REFERENCE_FIELDS: Final = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
EVENTS: Final = ResourceType(
    "events", "event", "Event", True, ("ev",),
    _NAME_NAMESPACE | {f"involvedObject.{f}" for f in _REFERENCE_FIELDS}
    | {"reason", "reportingComponent", "source", "type"},
    field_paths=(("source", "source.component"),),
)
#: ``events.k8s.io/v1`` Events: the same objects as core ``v1`` Events (one storage), with renamed fields.
EVENTS_V1: Final = ResourceType(
    "events", "event", "Event", True, (),
    _NAME_NAMESPACE | {f"regarding.{f}" for f in _REFERENCE_FIELDS} | {"reason", "reportingController", "type"},
    "events.k8s.io", renames=_EVENT_RENAMES,
)
CRDS: Final = ResourceType(
    "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", False, ("crd", "crds"),
    frozenset({"metadata.name"}), "apiextensions.k8s.io")
#: Types whose create is answered (computed from the request) and never stored.
REVIEWS: Final = (SELF_SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_RULES_REVIEWS, SELF_SUBJECT_REVIEWS)
#: The built-in resource types, in discovery order.  What one server serves is its
#: :class:`~.catalogue.Catalogue`: these, plus the custom resources of the CRDs stored in it.
BUILTINS: Final = (CONFIGMAPS, NAMESPACES, EVENTS, LEASES, EVENTS_V1, CRDS, *REVIEWS)

# ----------------------------------------------------------------------------- schema
# A field spec is a type name, ("map", spec), ("list", spec), ("ptr", spec) or a
# dict of fields (in the Go struct's order, which is also the JSON output order).
# ("ptr", spec) is a Go pointer field: an empty value ("", 0) is kept, not
# dropped by ``omitempty``.  "microtime" is a ``metav1.MicroTime`` string, "time" a ``metav1.Time`` one (both
# written back in kube's canonical UTC form).
_Spec = Any

_OWNER_REFERENCE: Final[dict[str, _Spec]] = {
    "apiVersion": "string",
    "kind": "string",
    "name": "string",
    "uid": "string",
    "controller": "boolean",
    "blockOwnerDeletion": "boolean",
}
_OBJECT_META: Final[dict[str, _Spec]] = {
    "name": "string",
    "generateName": "string",
    "namespace": "string",
    "selfLink": "string",
    "uid": "string",
    "resourceVersion": "string",
    "generation": "integer",
    "creationTimestamp": "string",
    "deletionTimestamp": "string",
    "deletionGracePeriodSeconds": ("ptr", "integer"),
    "labels": ("map", "string"),
    "annotations": ("map", "string"),
    "ownerReferences": ("list", _OWNER_REFERENCE),
    "finalizers": ("list", "string"),
    "managedFields": ("list", "any"),
}
_ATTRIBUTE_SELECTOR: Final[dict[str, _Spec]] = {
    "rawSelector": "string",
    "requirements": ("list", {"key": "string", "operator": "string", "values": ("list", "string")}),
}
_USER_INFO: Final[dict[str, _Spec]] = {
    "username": "string", "uid": "string", "groups": ("list", "string"), "extra": ("map", ("list", "string")),
}
_OBJECT_REFERENCE: Final[dict[str, _Spec]] = {
    "kind": "string", "namespace": "string", "name": "string", "uid": "string", "apiVersion": "string",
    "resourceVersion": "string", "fieldPath": "string",
}
_EVENT_SOURCE: Final[dict[str, _Spec]] = {"component": "string", "host": "string"}
_EVENT_SERIES: Final[dict[str, _Spec]] = {"count": "integer", "lastObservedTime": "microtime"}
_CRD_NAMES: Final[dict[str, _Spec]] = {
    "plural": "string", "singular": "string", "shortNames": ("list", "string"), "kind": "string",
    "listKind": "string", "categories": ("list", "string"),
}
# Keyed by ResourceType.qualified_name (``events`` and ``events.events.k8s.io`` are different shapes).
_SCHEMAS: Final[dict[str, dict[str, _Spec]]] = {
    "events": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "involvedObject": _OBJECT_REFERENCE,
        "reason": "string",
        "message": "string",
        "source": _EVENT_SOURCE,
        "firstTimestamp": "time",
        "lastTimestamp": "time",
        "count": "integer",
        "type": "string",
        "eventTime": "microtime",
        "series": _EVENT_SERIES,
        "action": "string",
        "related": _OBJECT_REFERENCE,
        "reportingComponent": "string",
        "reportingInstance": "string",
    },
    "events.events.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "eventTime": "microtime",
        "series": _EVENT_SERIES,
        "reportingController": "string",
        "reportingInstance": "string",
        "action": "string",
        "reason": "string",
        "regarding": _OBJECT_REFERENCE,
        "related": _OBJECT_REFERENCE,
        "note": "string",
        "type": "string",
        "deprecatedSource": _EVENT_SOURCE,
        "deprecatedFirstTimestamp": "time",
        "deprecatedLastTimestamp": "time",
        "deprecatedCount": "integer",
    },
    "selfsubjectaccessreviews.authorization.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "spec": {
            "resourceAttributes": {
                "namespace": "string", "verb": "string", "group": "string", "version": "string",
                "resource": "string", "subresource": "string", "name": "string",
                "fieldSelector": _ATTRIBUTE_SELECTOR, "labelSelector": _ATTRIBUTE_SELECTOR,
            },
            "nonResourceAttributes": {"path": "string", "verb": "string"},
        },
        "status": {"allowed": "boolean", "denied": "boolean", "reason": "string", "evaluationError": "string"},
    },
    "selfsubjectrulesreviews.authorization.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "spec": {"namespace": "string"},
        "status": {
            "resourceRules": ("list", {"verbs": ("list", "string"), "apiGroups": ("list", "string"),
                                       "resources": ("list", "string"), "resourceNames": ("list", "string")}),
            "nonResourceRules": ("list", {"verbs": ("list", "string"), "nonResourceURLs": ("list", "string")}),
            "incomplete": "boolean",
            "evaluationError": "string",
        },
    },
    "selfsubjectreviews.authentication.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "status": {"userInfo": _USER_INFO},
    },
    "configmaps": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "immutable": "boolean",
        "data": ("map", "string"),
        "binaryData": ("map", "string"),
    },
    "namespaces": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "spec": {"finalizers": ("list", "string")},
        "status": {
            "phase": "string",
            "conditions": (
                "list",
                {"type": "string", "status": "string", "lastTransitionTime": "string", "reason": "string",
                 "message": "string"},
            ),
        },
    },
    "customresourcedefinitions.apiextensions.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "spec": {
            "group": "string",
            "names": _CRD_NAMES,
            "scope": "string",
            "versions": ("list", {
                "name": "string",
                "served": "boolean",
                "storage": "boolean",
                "deprecated": "boolean",
                "deprecationWarning": ("ptr", "string"),
                "schema": {"openAPIV3Schema": "any"},
                "subresources": {"status": ("ptr", "any"), "scale": ("ptr", "any")},
                "additionalPrinterColumns": ("list", {
                    "name": "string", "type": "string", "format": "string", "description": "string",
                    "priority": "integer", "jsonPath": "string"}),
                "selectableFields": ("list", {"jsonPath": "string"}),
            }),
            "conversion": {"strategy": "string", "webhook": ("ptr", "any")},
            "preserveUnknownFields": "boolean",
        },
        "status": {
            "conditions": ("list", {"type": "string", "status": "string", "lastTransitionTime": "string",
                                    "reason": "string", "message": "string"}),
            "acceptedNames": _CRD_NAMES,
            "storedVersions": ("list", "string"),
        },
    },
    "leases.coordination.k8s.io": {
        "kind": "string",
        "apiVersion": "string",
        "metadata": _OBJECT_META,
        "spec": {
            "holderIdentity": ("ptr", "string"),
            "leaseDurationSeconds": ("ptr", "integer"),
            "acquireTime": ("ptr", "microtime"),
            "renewTime": ("ptr", "microtime"),
            "leaseTransitions": ("ptr", "integer"),
            "strategy": ("ptr", "string"),
            "preferredHolder": ("ptr", "string"),
        },
    },
}

_JSON_TYPE_NAMES: Final = {str: "string", bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def _type_error(rt: ResourceType, path: str, value: object, want: str) -> APIError:
    got = _JSON_TYPE_NAMES.get(type(value), "value")
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
        return [_decode(rt, spec[1], v, path, unknown) for v in value]
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
    obj: dict[str, Any] = _decode(rt, _SCHEMAS[rt.qualified_name], body, "", unknown)
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


def stored_type(rt: ResourceType) -> ResourceType:
    """The type whose shape ``rt``'s objects are stored in: ``rt`` itself unless it has
    :attr:`ResourceType.renames` (then the unrenamed type of the same resource name)."""
    if not rt.renames:
        return rt
    return next(t for t in BUILTINS if t.name == rt.name and t.group != rt.group and not t.renames)


def schema_of(rt: ResourceType) -> dict[str, Any]:
    """The field spec ``rt``'s objects are decoded with (see the comment above ``_OBJECT_META``)."""
    return _SCHEMAS[rt.qualified_name]


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


def field_value(rt: ResourceType, obj: Mapping[str, Any], selector: str) -> str:
    """The value a field selector ``selector`` (one of ``rt.field_selectors``) compares: the string at its
    dotted path (or the path :attr:`ResourceType.field_paths` names), ``""`` if unset."""
    path = dict(rt.field_paths).get(selector, selector)
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def canonical(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``obj`` with fields in Go struct order and map keys sorted (the JSON output order); a custom
    resource with every key sorted (kube encodes them as maps)."""
    if rt.custom is not None:
        return rt.custom.canonical(obj)
    return _order(_SCHEMAS[rt.qualified_name], obj)  # type: ignore[no-any-return]


def _order(spec: _Spec, value: Any) -> Any:
    if isinstance(spec, dict) and isinstance(value, Mapping):
        out = {k: _order(spec[k], value[k]) for k in spec if k in value}
        for k in value:  # fields the schema does not know (kept as they are)
            if k not in spec:
                out[k] = value[k]
        return out
    if isinstance(spec, tuple) and spec[0] == "ptr":
        return _order(spec[1], value)
    if isinstance(spec, tuple) and spec[0] == "map" and isinstance(value, Mapping):
        return {k: _order(spec[1], value[k]) for k in sorted(value)}
    if isinstance(spec, tuple) and spec[0] == "list" and isinstance(value, list):
        return [_order(spec[1], v) for v in value]
    return value


# ----------------------------------------------------------------------------- validation

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_MSG_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_MSG_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_MSG_CONFIG_KEY = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_MSG_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_MSG_LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MAX_CONFIGMAP_BYTES: Final = 1024 * 1024
MAX_ANNOTATION_BYTES: Final = 256 * 1024

_Cause = tuple[str, str, str]  # (reason, field, message)


def _bad(field: str, value: str, message: str) -> _Cause:
    return ("FieldValueInvalid", field, f'Invalid value: "{value}": {message}')


def _name_causes(rt: ResourceType, name: str) -> list[_Cause]:
    if rt is not NAMESPACES:
        if len(name) > 253:
            return [_bad("metadata.name", name, "must be no more than 253 characters")]
        if not _DNS1123_SUBDOMAIN.fullmatch(name):
            return [_bad("metadata.name", name, _MSG_SUBDOMAIN)]
    else:
        if len(name) > 63:
            return [_bad("metadata.name", name, "must be no more than 63 characters")]
        if not _DNS1123_LABEL.fullmatch(name):
            return [_bad("metadata.name", name, _MSG_LABEL)]
    return []


def _qualified_name_causes(field: str, key: str) -> list[_Cause]:
    prefix, _, name = key.rpartition("/")
    causes: list[_Cause] = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        causes.append(_bad(field, key, "prefix part " + _MSG_SUBDOMAIN))
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART.fullmatch(name):
        causes.append(_bad(field, key, _MSG_NAME_PART if name and len(name) <= 63 else
                           "name part must be non-empty and no more than 63 characters"))
    return causes


def validate(rt: ResourceType, obj: Mapping[str, Any], *, creating: bool = True) -> None:
    """Raise a 422 :class:`APIError` if ``obj`` (already decoded) is invalid (``creating``: also the rules only a
    create checks, as kube's ``ValidateEventCreate``)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    causes: list[_Cause] = []
    if not name:
        causes.append(("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    else:
        causes.extend(_name_causes(rt, name))
    for key, value in (meta.get("labels") or {}).items():
        causes.extend(_qualified_name_causes("metadata.labels", key))
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            causes.append(_bad("metadata.labels", value, _MSG_LABEL_VALUE if len(value) <= 63 else
                               "must be no more than 63 characters"))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        causes.extend(_qualified_name_causes("metadata.annotations", key.lower()))
    if sum(len(k) + len(v) for k, v in annotations.items()) > MAX_ANNOTATION_BYTES:
        causes.append(("FieldValueTooLong", "metadata.annotations",
                       f"Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"))
    causes.extend(owner_reference_causes(meta.get("ownerReferences")))
    if rt is CONFIGMAPS:
        causes.extend(_configmap_causes(obj))
    if rt is LEASES:
        causes.extend(_lease_causes(obj))
    if rt.custom is not None:
        causes.extend(rt.custom.causes(obj))
    if rt is NAMESPACES:
        causes.extend(namespace_finalizer_causes((obj.get("spec") or {}).get("finalizers") or ()))
    if creating and stored_type(rt) is EVENTS:
        causes.extend(event_causes(to_stored(rt, obj), core_request=rt is EVENTS))
    causes.extend(_int64_causes(obj))
    if causes:
        raise invalid(invalid_kind(rt), rt.qualified_name, name, causes)


def invalid_kind(rt: ResourceType) -> str:
    """How a 422 message names ``rt``'s kind: ``ConfigMap``; ``Widget.example.com`` for a custom resource and
    ``CustomResourceDefinition.apiextensions.k8s.io`` (kube's group-qualified kind)."""
    return f"{rt.kind}.{rt.group}" if rt.custom is not None or rt is CRDS else rt.kind


_LEASE_STRATEGIES: Final = ("OldestEmulationVersion",)


def _lease_causes(obj: Mapping[str, Any]) -> list[_Cause]:
    """kube's ``ValidateLeaseSpec``."""
    spec: Mapping[str, Any] = obj.get("spec") or {}
    causes: list[_Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        causes.append(("FieldValueInvalid", "spec.leaseDurationSeconds",
                       f"Invalid value: {duration}: must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        causes.append(("FieldValueInvalid", "spec.leaseTransitions",
                       f"Invalid value: {transitions}: must be greater than or equal to 0"))
    strategy = spec.get("strategy")
    if strategy is not None and strategy not in _LEASE_STRATEGIES:
        causes.append(("FieldValueNotSupported", "spec.strategy",
                       f'Unsupported value: "{strategy}": supported values: "OldestEmulationVersion"'))
    if spec.get("preferredHolder") and strategy is None:
        causes.append(("FieldValueForbidden", "spec.preferredHolder",
                       "Forbidden: preferredHolder can only be set if strategy is set"))
    return causes


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _has_out_of_range_int(obj: Mapping[str, Any]) -> bool:
    """True if an integer outside int64 is anywhere in ``obj`` (``managedFields`` left out, as below)."""
    stack: list[Any] = [v for k, v in obj.items() if k != "managedFields"]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is int:
            if not _INT64_MIN <= value <= _INT64_MAX:
                return True
        elif kind is dict:
            stack.extend(v for k, v in value.items() if k != "managedFields")
        elif kind is list:
            stack.extend(value)
        elif isinstance(value, Mapping | list | int) and not isinstance(value, bool):
            return True  # an unusual container or int subclass: let the full walk decide
    return False


def _int64_causes(obj: Mapping[str, Any]) -> list[_Cause]:
    """Integers Kubernetes keeps as int64 (``metadata.generation``, ...) must fit: anywhere in the object, an
    integer outside int64 would be stored and then break every client that reads it."""
    if not _has_out_of_range_int(obj):  # the common case, without building a path per value
        return []
    causes: list[_Cause] = []
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                causes.append(_bad(path, f"{str(value)[:20]}...", "must be a 64-bit signed integer"))
        elif isinstance(value, Mapping):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items()
                         if k != "managedFields")  # written by the server, never a client's integer
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    return causes


def _config_key_causes(field: str, key: str) -> list[_Cause]:
    path = f"{field}[{key}]"
    if len(key) > 253:
        return [_bad(path, key, "must be no more than 253 characters")]
    if not _CONFIG_KEY.fullmatch(key):
        return [_bad(path, key, _MSG_CONFIG_KEY)]
    if key in (".", "..") or key.startswith(".."):
        return [_bad(path, key, "must not be '.'" if key == "." else "must not start with '..'")]
    return []


def _configmap_causes(obj: Mapping[str, Any]) -> list[_Cause]:
    data: Mapping[str, str] = obj.get("data") or {}
    binary: Mapping[str, str] = obj.get("binaryData") or {}
    causes: list[_Cause] = []
    total = 0
    for key, value in data.items():
        causes.extend(_config_key_causes("data", key))
        total += len(value.encode())
    for key, value in binary.items():
        causes.extend(_config_key_causes("binaryData", key))
        if key in data:
            causes.append(_bad(f"binaryData[{key}]", key, "duplicate of key present in data"))
        total += len(value) * 3 // 4
    if total > MAX_CONFIGMAP_BYTES:
        causes.append(("FieldValueTooLong", "", f"Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes"))
    return causes


def validate_update(rt: ResourceType, new: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    """Raise a 422 :class:`APIError` if changing ``old`` into ``new`` is not allowed."""
    validate(rt, new, creating=False)
    name = str(new["metadata"].get("name", ""))
    causes: list[_Cause] = []
    if stored_type(rt) is EVENTS:
        causes.extend(event_update_causes(to_stored(rt, new), to_stored(rt, old), core_request=rt is EVENTS))
    new_uid, old_uid = new["metadata"].get("uid", ""), old["metadata"].get("uid", "")
    if new_uid != old_uid:
        causes.append(_bad("metadata.uid", new_uid, "field is immutable"))
    if rt is CONFIGMAPS and old.get("immutable"):
        why = "Forbidden: field is immutable when `immutable` is set"
        if not new.get("immutable"):
            causes.append(("FieldValueForbidden", "immutable", why))
        if new.get("data") != old.get("data"):
            causes.append(("FieldValueForbidden", "data", why))
        if new.get("binaryData") != old.get("binaryData"):
            causes.append(("FieldValueForbidden", "binaryData", why))
    if causes:
        raise invalid(invalid_kind(rt), rt.qualified_name, name, causes)


# ----------------------------------------------------------------------------- time and tables


def format_time(ts: float) -> str:
    """RFC 3339 in UTC with second precision, like ``metav1.Time``."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_RFC3339: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")


def normalize_time(value: str, micro: bool) -> str | None:
    """An RFC 3339 time as kube writes it back: UTC, ``Z``, with six fraction digits for a ``MicroTime``
    (``micro``) and none for a ``Time``; ``None`` if malformed."""
    if not _RFC3339.fullmatch(value):
        return None
    match = re.search(r"\.(\d+)", value)
    head = value[: match.start()] + value[match.end():] if match else value
    try:
        parsed = datetime.fromisoformat(head.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None
    if not micro:
        return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.") + (match.group(1)[:6] if match else "").ljust(6, "0") + "Z"


def parse_time(value: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``Time`` or ``MicroTime``), or ``None`` if malformed."""
    if not _RFC3339.fullmatch(value):
        return None
    head, frac = value, ""
    match = re.search(r"\.(\d+)", value)
    if match:
        frac = match.group(1)[:6]
        head = value[: match.start()] + value[match.end():]
    try:
        parsed = datetime.fromisoformat(head.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() + (int(frac.ljust(6, "0")) / 1e6 if frac else 0.0)


def age(seconds: float) -> str:
    """A short human duration, following the rules kubectl's AGE column uses."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y" if days % 365 == 0 else f"{years}y{days % 365}d"
    return f"{years}y"


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
        return [(_NAME_COLUMN, _name_cell), *rt.custom.columns(_since)]
    return _COLUMNS.get(rt.qualified_name, _NAME_AND_AGE)


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
