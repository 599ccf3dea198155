"""The field spec of each built-in type, and the canonical field order it gives.

A field spec is a type name, ``("map", spec)``, ``("list", spec)``, ``("ptr", spec)`` or a dict of fields (in the
Go struct's order, which is also the JSON output order).  ``("ptr", spec)`` is a Go pointer field: an empty value
(``""``, ``0``) is kept, not dropped by ``omitempty``.  ``"microtime"`` is a ``metav1.MicroTime`` string,
``"time"`` a ``metav1.Time`` one (both written back in kube's canonical UTC form), ``"quantity"`` a
resource quantity (a string, or a JSON number kept as its string).  The kinds operators create and watch (Pods,
Deployments, ...) have specs derived from the official client's models (:mod:`.models`) instead of written here.
Decoding (:mod:`.codec`) and OpenAPI (:mod:`~keyqueue.apiserver.discovery`) read these specs; :func:`canonical`
orders an object by them, so
that equal objects encode to equal bytes (a no-op update is detected by comparing bytes, as kube-apiserver does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .models import model_spec
from .resources import ResourceType

__all__ = ["canonical", "schema_of"]

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


def schema_of(rt: ResourceType) -> dict[str, Any]:
    """The field spec ``rt``'s objects are decoded with (see the module docstring); for a type with a client
    :attr:`~.resources.ResourceType.model`, derived from that model (:mod:`.models`)."""
    if rt.model:
        return model_spec(rt.model, _OBJECT_META)
    return _SCHEMAS[rt.qualified_name]


def canonical(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``obj`` with fields in Go struct order and map keys sorted (the JSON output order); a custom
    resource with every key sorted (kube encodes them as maps)."""
    if rt.custom is not None:
        return rt.custom.canonical(obj)
    return _order(schema_of(rt), obj)  # type: ignore[no-any-return]


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
