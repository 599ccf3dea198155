"""Validation rules beyond names, labels and annotations, with kube-apiserver's 422 messages.

Each function returns causes ``(reason, field, message)`` for :func:`~.objects.validate`, which raises them as one
422 Invalid.  This module imports nothing from :mod:`.objects` (it is imported by it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["owner_reference_causes"]

_Cause = tuple[str, str, str]


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
