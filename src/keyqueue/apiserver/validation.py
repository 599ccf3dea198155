"""Validation rules beyond names, labels and annotations, with kube-apiserver's 422 messages.

Each function returns causes ``(reason, field, message)`` for :func:`~.objects.validate`, which raises them as one
422 Invalid.  This module imports nothing from :mod:`.objects` (it is imported by it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "DNS1035_LABEL", "DNS1123_LABEL", "MSG_DNS1035_LABEL", "MSG_DNS1123_LABEL",
    "event_causes", "event_update_causes", "namespace_finalizer_causes", "owner_reference_causes",
    "qualified_name_causes",
]

_Cause = tuple[str, str, str]


#: Kubernetes' name rules (apimachinery's validation): a lowercase RFC 1123 label and a DNS-1035 label, with the
#: messages kube-apiserver answers when a name breaks them.
DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MSG_DNS1123_LABEL: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
MSG_DNS1035_LABEL: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
    "is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def _go_quote(value: Any) -> str:
    return json.dumps("" if value is None else str(value))


def _go_owner_reference(ref: Mapping[str, Any]) -> str:
    """An owner reference as Go's ``%#v`` prints it in an Invalid value (pointers shown by their value)."""
    def flag(name: str) -> str:
        return "(*bool)(nil)" if ref.get(name) is None else f"&{str(bool(ref.get(name))).lower()}"

    return (f"v1.OwnerReference{{APIVersion:{_go_quote(ref.get('apiVersion'))}, Kind:{_go_quote(ref.get('kind'))}, "
            f"Name:{_go_quote(ref.get('name'))}, UID:{_go_quote(ref.get('uid'))}, Controller:{flag('controller')}, "
            f"BlockOwnerDeletion:{flag('blockOwnerDeletion')}}}")


def owner_reference_causes(refs: Sequence[Mapping[str, Any]] | None) -> list[_Cause]:
    """apimachinery's ``ValidateOwnerReferences``: apiVersion (a version), kind, name and uid required; at most one
    reference with ``controller: true``; a core Event may not own anything."""
    causes: list[_Cause] = []
    field = "metadata.ownerReferences"
    first_controller = ""
    for ref in refs or ():
        api_version = str(ref.get("apiVersion", ""))
        version = api_version.rpartition("/")[2]
        for name, value, ok in (("apiVersion", api_version, bool(version)),
                                ("kind", ref.get("kind", ""), bool(ref.get("kind"))),
                                ("name", ref.get("name", ""), bool(ref.get("name"))),
                                ("uid", ref.get("uid", ""), bool(ref.get("uid")))):
            if not ok:
                what = "version" if name == "apiVersion" else name
                causes.append(("FieldValueInvalid", f"{field}.{name}",
                               f"Invalid value: {_go_quote(value)}: {what} must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            causes.append(("FieldValueInvalid", field, f"Invalid value: {_go_owner_reference(ref)}: "
                                                       "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller"):
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if first_controller:
                shown = "[]v1.OwnerReference{" + ", ".join(_go_owner_reference(r) for r in refs or ()) + "}"
                causes.append(("FieldValueInvalid", field, f"Invalid value: {shown}: Only one reference can have "
                               f'Controller set to true. Found "true" in references for {first_controller} and '
                               f"{current}"))
            else:
                first_controller = current
    return causes


# ------------------------------------------------------------------ Events (kube's core/validation/events.go)
_REPORTING_INSTANCE_LIMIT = 128
_ACTION_LIMIT = 128
_REASON_LIMIT = 128
_NOTE_LIMIT = 1024
_QUALIFIED_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_EVENT_IMMUTABLE = ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
                    "type", "eventTime", "action", "related", "reportingComponent", "reportingInstance")


def _required(field: str) -> _Cause:
    return ("FieldValueRequired", field, "Required value")


def _invalid(field: str, value: Any, message: str) -> _Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {_go_quote(value)}: {message}")


def qualified_name_causes(field: str, value: str) -> list[_Cause]:
    """apimachinery's ``IsQualifiedName`` (an empty value is left to the caller's Required check)."""
    if not value:
        return []
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return [_invalid(field, value, "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                         "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                         "character (e.g. 'example.com', regex used for validation is "
                         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]
    if not name or len(name) > 63:
        return [_invalid(field, value, "name part must be non-empty" if not name
                         else "name part must be no more than 63 characters")]
    if not _QUALIFIED_PART.fullmatch(name):
        return [_invalid(field, value, "name part must consist of alphanumeric characters, '-', '_' or '.', and "
                         "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                         "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")]
    return []


def _series_causes(event: Mapping[str, Any]) -> list[_Cause]:
    series = event.get("series")
    if series is None:
        return []
    causes: list[_Cause] = []
    if int(series.get("count") or 0) < 2:
        causes.append(_invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(_required("series.lastObservedTime"))
    return causes


def _legacy_event_causes(event: Mapping[str, Any], core_request: bool) -> list[_Cause]:
    """kube's ``legacyValidateEvent``: every Event, whichever version it came through."""
    causes: list[_Cause] = []
    namespace = str((event.get("metadata") or {}).get("namespace", ""))
    involved = str((event.get("involvedObject") or {}).get("namespace", ""))
    mismatch = _invalid("involvedObject.namespace", involved, "does not match event.namespace")
    if not event.get("eventTime"):
        if (namespace not in ("", "default")) if not involved else namespace != involved:
            causes.append(mismatch)
    else:
        if not involved and namespace not in ("default", "kube-system"):
            causes.append(mismatch)
        controller_field = "reportingComponent" if core_request else "reportingController"
        controller = str(event.get("reportingComponent", ""))
        if not controller:
            causes.append(_required(controller_field))
        causes.extend(qualified_name_causes(controller_field, controller))
        for field, limit in (("reportingInstance", _REPORTING_INSTANCE_LIMIT), ("action", _ACTION_LIMIT),
                             ("reason", _REASON_LIMIT)):
            value = str(event.get(field, ""))
            if not value:
                causes.append(_required(field))
            if len(value) > limit:
                causes.append(_invalid(field, "", f"can have at most {limit} characters"))
        if len(str(event.get("message", ""))) > _NOTE_LIMIT:
            causes.append(_invalid("message", "", f"can have at most {_NOTE_LIMIT} characters"))
    return causes


def event_causes(event: Mapping[str, Any], core_request: bool) -> list[_Cause]:
    """kube's ``ValidateEventCreate`` for an Event in its stored (core ``v1``) field names; ``core_request``: it
    came through ``/api/v1`` (legacy rules only) rather than ``events.k8s.io/v1`` (strict rules too)."""
    causes = _legacy_event_causes(event, core_request)
    if core_request:
        return causes
    causes.extend(_series_causes(event))
    if not event.get("eventTime"):
        causes.append(_required("eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(_invalid("type", "", f"has invalid value: {event.get('type', '')}"))
    for field in ("firstTimestamp", "lastTimestamp", "count", "source"):
        source = event.get(field)
        if source and (field != "source" or source.get("component") or source.get("host")):
            causes.append(_invalid(field, "", "needs to be unset"))
    return causes


def event_update_causes(new: Mapping[str, Any], old: Mapping[str, Any], core_request: bool) -> list[_Cause]:
    """kube's ``ValidateEventUpdate`` (stored field names): legacy rules; through ``events.k8s.io/v1`` also a
    changed series re-validated and every descriptive field immutable."""
    causes = _legacy_event_causes(new, core_request)
    if core_request:
        return causes
    if new.get("series") != old.get("series"):
        causes.extend(_series_causes(new))
    for field in _EVENT_IMMUTABLE:
        if new.get(field) != old.get(field):
            shown = "reportingController" if field == "reportingComponent" else field
            causes.append(_invalid(shown, new.get(field, ""), "field is immutable"))
    return causes


_STANDARD_FINALIZERS = ("kubernetes", "orphan", "foregroundDeletion")


def namespace_finalizer_causes(finalizers: Sequence[str]) -> list[_Cause]:
    """kube's ``validateFinalizerName`` for ``spec.finalizers``: a qualified name, and one without a ``/`` must be
    a standard finalizer (``kubernetes``, ``orphan``, ``foregroundDeletion``)."""
    causes: list[_Cause] = []
    for name in finalizers:
        causes.extend(qualified_name_causes("spec.finalizers", name))
        if "/" not in name and name not in _STANDARD_FINALIZERS:
            causes.append(_invalid("spec.finalizers", name,
                                   "name is neither a standard finalizer name nor is it fully qualified"))
    return causes
