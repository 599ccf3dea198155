"""What a request brings to the registry: the options of a write (:class:`WriteOptions`), the selectors of a
list or watch (:class:`Matcher`) and a ``resourceVersion`` (:func:`parse_resource_version`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from .. import errors
from ..objects import ResourceType, field_value
from ..selectors import FieldSelector, LabelSelector

__all__ = ["MAX_RESOURCE_VERSION", "SYSTEM_NAMESPACES", "Matcher", "WriteOptions", "parse_resource_version"]

SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public")


@dataclass
class WriteOptions:
    """Per-request options of a write.

    ``dry_run`` validates and answers without writing.  ``field_validation`` is
    ``Strict`` (unknown fields are a 400 error), ``Warn`` (the default: they are
    dropped and reported in ``warnings``) or ``Ignore``.  ``propagation_policy`` (a delete's
    ``Background``/``Foreground``/``Orphan``, ``""`` = unset) decides the garbage collector's finalizers
    (:func:`~.propagation.deletion_finalizers`).
    """

    dry_run: bool = False
    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    propagation_policy: str = ""
    #: Who writes (``metadata.managedFields``; :func:`~.managedfields.manager_from`); ``""``: the server itself.
    field_manager: str = ""
    #: The requesting user as admission webhooks are told (``userInfo``: ``username``, ``groups``); ``None``: the
    #: anonymous user.
    user: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Matcher:
    """Label and field selectors of a list or watch."""

    rt: ResourceType
    labels: LabelSelector
    fields: FieldSelector

    @property
    def match_all(self) -> bool:
        return self.labels.empty and not self.fields.terms

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if not self.labels.matches(meta.get("labels")):
            return False
        if not self.fields.terms:
            return True
        return self.fields.matches({f: field_value(self.rt, obj, f) for f, _op, _value in self.fields.terms})


MAX_RESOURCE_VERSION: Final = 2**63 - 2  # etcd revisions are int64, and a watch starts at resourceVersion + 1


def parse_resource_version(value: str) -> int:
    """A resourceVersion from a request (400 unless a decimal within 0..2^63-2)."""
    rv = int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else -1
    if not 0 <= rv <= MAX_RESOURCE_VERSION:
        raise errors.bad_request(f"invalid resource version: {json.dumps(value[:100])}") from None
    return rv
