"""How a controller's sources turn informer events into keys (controller-runtime's event handlers).

* ``for_``: every add, update and delete of the primary resource enqueues the object's own key
  (``EnqueueRequestForObject``);
* ``owns``: an object enqueues the key of its **controller** owner reference (``controller: true``) whose group and
  kind are the primary resource's (``EnqueueRequestForOwner`` with ``OnlyControllerOwner``); an object with no such
  reference enqueues nothing;
* ``watches``: ``map_fn(obj)`` returns the keys to enqueue (``EnqueueRequestsFromMapFunc``).

An update enqueues only if every predicate returns true for ``(old, new)``; for ``owns`` and ``watches`` both the old
and the new object are mapped (an owner or a mapping that changed enqueues both sides). Deletes seen only through a
relist (:class:`~keyqueue.informer.DeletedFinalStateUnknown`) use the last known object. Adds and deletes are never
filtered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from keyqueue.informer import DeletedFinalStateUnknown, HandlerRegistration, meta_namespace_key
from keyqueue.manager.cache import SharedInformer
from keyqueue.manager.resources import Resource

__all__ = ["MapFunc", "owner_key", "register_for", "register_mapped", "register_owned"]

MapFunc = Callable[[Any], Iterable[str]]
Enqueue = Callable[[str], None]
Predicates = Sequence[Callable[[Any, Any], bool]]


def _obj(obj: Any) -> Any:
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


def _passes(predicates: Predicates, old: Any, new: Any) -> bool:
    return all(p(old, new) for p in predicates)


def owner_key(obj: Any, owner: Resource) -> str | None:
    """The key of ``obj``'s controller owner if that owner is of ``owner``'s group and kind, else ``None``.

    The owner lives in ``obj``'s namespace when ``owner`` is namespaced (owner references never cross namespaces);
    a cluster-scoped owner's key is its name."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        api_version = str(ref.get("apiVersion", ""))
        group = api_version.rpartition("/")[0]
        if ref.get("kind") == owner.kind and group == owner.group and ref.get("name"):
            namespace = meta.get("namespace") if owner.namespaced else None
            return f"{namespace}/{ref['name']}" if namespace else str(ref["name"])
        return None  # at most one controller reference: another controller's object
    return None


def register_for(informer: SharedInformer, enqueue: Enqueue, predicates: Predicates) -> HandlerRegistration:
    """The primary resource's events enqueue the object's own key."""

    def on_update(old: Any, new: Any) -> None:
        if _passes(predicates, old, new):
            enqueue(meta_namespace_key(new))

    return informer.add_event_handler(on_add=lambda obj: enqueue(meta_namespace_key(obj)), on_update=on_update,
                                      on_delete=lambda obj: enqueue(meta_namespace_key(obj)))


def register_owned(informer: SharedInformer, owner: Resource, enqueue: Enqueue,
                   predicates: Predicates) -> HandlerRegistration:
    """An owned resource's events enqueue the controller owner's key (nothing without one)."""

    def add(obj: Any) -> None:
        key = owner_key(_obj(obj), owner)
        if key is not None:
            enqueue(key)

    def on_update(old: Any, new: Any) -> None:
        if _passes(predicates, old, new):
            old_key, new_key = owner_key(old, owner), owner_key(new, owner)
            for key in dict.fromkeys((old_key, new_key)):
                if key is not None:
                    enqueue(key)

    return informer.add_event_handler(on_add=add, on_update=on_update, on_delete=add)


def register_mapped(informer: SharedInformer, map_fn: MapFunc, enqueue: Enqueue,
                    predicates: Predicates) -> HandlerRegistration:
    """A watched resource's events enqueue the keys ``map_fn`` returns (old and new object on an update)."""

    def add(obj: Any) -> None:
        for key in map_fn(_obj(obj)):
            enqueue(key)

    def on_update(old: Any, new: Any) -> None:
        if _passes(predicates, old, new):
            for key in dict.fromkeys([*map_fn(old), *map_fn(new)]):
                enqueue(key)

    return informer.add_event_handler(on_add=add, on_update=on_update, on_delete=add)
