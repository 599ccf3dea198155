"""Whether an object may be written: the 422 Invalid checks of a create and an update.

Object names, labels and annotations, ConfigMap keys and size, immutable ConfigMaps, immutable ``metadata.uid``,
Lease durations and transitions, and integers that must fit int64, with kube-apiserver's messages; the rules for
Events, owner references and namespace finalizers come from :mod:`keyqueue.apiserver.validation`, a custom
resource's from its schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ..errors import invalid
from ..validation import event_causes, event_update_causes, namespace_finalizer_causes, owner_reference_causes
from .codec import to_stored
from .kind_validity import kind_causes, kind_update_causes, name_rule
from .resources import CONFIGMAPS, CRDS, EVENTS, LEASES, NAMESPACES, WEBHOOK_CONFIGURATIONS, ResourceType, stored_type
from .webhook_validity import webhook_configuration_causes

__all__ = ["MAX_ANNOTATION_BYTES", "MAX_CONFIGMAP_BYTES", "invalid_kind", "validate", "validate_update"]

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
    rule = name_rule(rt)
    if rule is not None:
        _, pattern, message = rule
        if len(name) > 63:
            return [_bad("metadata.name", name, "must be no more than 63 characters")]
        return [] if pattern.fullmatch(name) else [_bad("metadata.name", name, message)]
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


def validate(rt: ResourceType, obj: Mapping[str, Any], *, creating: bool = True,
             old: Mapping[str, Any] | None = None) -> None:
    """Raise a 422 :class:`APIError` if ``obj`` (already decoded) is invalid (``creating``: also the rules only a
    create checks, as kube's ``ValidateEventCreate``; ``old``: the stored object an update replaces, for a custom
    resource's transition rules)."""
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
    if rt.model:
        causes.extend(kind_causes(rt, obj))
    if rt in WEBHOOK_CONFIGURATIONS:
        causes.extend(webhook_configuration_causes(rt, obj))
    if rt.custom is not None:
        causes.extend(rt.custom.causes(obj, old))
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
    validate(rt, new, creating=False, old=old)
    name = str(new["metadata"].get("name", ""))
    causes: list[_Cause] = []
    if stored_type(rt) is EVENTS:
        causes.extend(event_update_causes(to_stored(rt, new), to_stored(rt, old), core_request=rt is EVENTS))
    new_uid, old_uid = new["metadata"].get("uid", ""), old["metadata"].get("uid", "")
    if new_uid != old_uid:
        causes.append(_bad("metadata.uid", new_uid, "field is immutable"))
    if rt.model:
        causes.extend(kind_update_causes(rt, new, old))
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
