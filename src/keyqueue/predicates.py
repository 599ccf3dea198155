"""Update predicates for :meth:`keyqueue.Manager.add_controller`: ``(old, new) -> bool``, true to enqueue.

controller-runtime's ``predicate`` package for updates: a controller with ``predicates=`` enqueues an update only if
**every** predicate returns true for it. Adds and deletes are not filtered (controller-runtime's
``GenerationChangedPredicate`` and friends also pass every create and delete). Resync updates (the same object
twice) pass :func:`resource_version_changed` as false; the other predicates compare what they name. Objects are the
API's JSON as dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Predicate",
    "annotations_changed",
    "generation_changed",
    "labels_changed",
    "resource_version_changed",
]

Predicate = Callable[[Any, Any], bool]
"""``(old, new) -> bool``: true if the update from ``old`` to ``new`` should enqueue."""


def _meta(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def generation_changed(old: Any, new: Any) -> bool:
    """``metadata.generation`` differs: the spec changed (status and metadata writes do not bump it)."""
    return _meta(old).get("generation") != _meta(new).get("generation")


def labels_changed(old: Any, new: Any) -> bool:
    """``metadata.labels`` differ (a missing map equals an empty one)."""
    return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})


def annotations_changed(old: Any, new: Any) -> bool:
    """``metadata.annotations`` differ (a missing map equals an empty one)."""
    return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})


def resource_version_changed(old: Any, new: Any) -> bool:
    """``metadata.resourceVersion`` differs: a real change, not a resync."""
    return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")
