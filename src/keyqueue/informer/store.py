"""The informer's local cache: a thread-safe store of objects by key, with secondary indexes.

Objects are the API's JSON objects as plain ``dict``s (``obj["metadata"]["name"]``). The store hands out the very
dicts it holds, without copying: treat them as read-only (as with client-go's cache).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "NAMESPACE_INDEX",
    "DeletedFinalStateUnknown",
    "IndexFunc",
    "KeyFunc",
    "Obj",
    "Store",
    "deletion_handling_key",
    "meta_namespace_index",
    "meta_namespace_key",
    "split_meta_namespace_key",
]

Obj = dict[str, Any]
"""An API object as decoded JSON."""

KeyFunc = Callable[[Obj], str]
IndexFunc = Callable[[Obj], list[str]]
"""Returns the index values of an object (an object may be filed under several values, or none)."""

NAMESPACE_INDEX: Final = "namespace"


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """Passed to ``on_delete`` instead of the object when the deletion was not seen as a watch event.

    This happens when the watch broke, the server answered 410 Gone and a relist no longer contained the object:
    it was deleted meanwhile, and ``obj`` is the last state this informer knew (it may be stale). Like client-go's
    ``cache.DeletedFinalStateUnknown``.
    """

    key: str
    obj: Obj


def _metadata(obj: Any) -> tuple[str | None, str]:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise ValueError(f"object has no metadata: {obj!r:.200}")
        name = meta.get("name")
        namespace = meta.get("namespace")
    else:  # a kubernetes.client model object (V1ConfigMap, ...)
        meta = getattr(obj, "metadata", None)
        if meta is None:
            raise ValueError(f"object has no metadata: {obj!r:.200}")
        name = getattr(meta, "name", None)
        namespace = getattr(meta, "namespace", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"object has no metadata.name: {obj!r:.200}")
    return namespace or None, name


def meta_namespace_key(obj: Any) -> str:
    """``"<namespace>/<name>"`` for a namespaced object, ``"<name>"`` for a cluster-scoped one.

    Accepts a JSON ``dict``, a ``kubernetes.client`` model object, or a :class:`DeletedFinalStateUnknown` (its
    key). Raises ``ValueError`` if the object has no ``metadata.name``.
    """
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    namespace, name = _metadata(obj)
    return f"{namespace}/{name}" if namespace else name


def deletion_handling_key(obj: Any) -> str:
    """The key of an object or a :class:`DeletedFinalStateUnknown` (an alias of :func:`meta_namespace_key`)."""
    return meta_namespace_key(obj)


def split_meta_namespace_key(key: str) -> tuple[str, str]:
    """``"ns/name"`` → ``("ns", "name")``; ``"name"`` → ``("", "name")``. Raises ``ValueError`` otherwise."""
    parts = key.split("/")
    if len(parts) == 1 and parts[0]:
        return "", parts[0]
    if len(parts) == 2 and parts[0] and parts[1]:
        return parts[0], parts[1]
    raise ValueError(f"unexpected key format: {key!r}")


def meta_namespace_index(obj: Obj) -> list[str]:
    """The namespace index function: ``[namespace]`` (``[""]`` for a cluster-scoped object)."""
    namespace, _ = _metadata(obj)
    return [namespace or ""]


class Store:
    """A thread-safe map key → object with indexes, like client-go's ``cache.Indexer``.

    Every method takes one internal lock for its whole check-and-update, so readers always see an object and its
    index entries consistently. Nothing blocks beyond that lock. The namespace index (:data:`NAMESPACE_INDEX`) is
    always present. An index function that raises makes the write raise, with the store unchanged.
    """

    def __init__(self, key_func: KeyFunc = meta_namespace_key, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._key_func = key_func
        self._lock = threading.Lock()
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: meta_namespace_index}
        self._indices: dict[str, dict[str, set[str]]] = {NAMESPACE_INDEX: {}}
        if indexers:
            self.add_indexers(indexers)

    def key_of(self, obj: Obj) -> str:
        """The key under which ``obj`` is stored."""
        return self._key_func(obj)

    # -- indexes ---------------------------------------------------------------------------------------------

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions; objects already stored are indexed at once.

        Raises ``ValueError`` if a name is already taken and ``TypeError`` if a function is not callable; the
        store is unchanged in both cases.
        """
        for name, func in indexers.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"index name must be a non-empty str, got {type(name).__name__}: {name!r}")
            if not callable(func):
                raise TypeError(f"indexer {name!r} must be callable, got {type(func).__name__}: {func!r}")
        with self._lock:
            clash = sorted(set(indexers) & set(self._indexers))
            if clash:
                raise ValueError(f"indexer(s) already exist: {clash}")
            built: dict[str, dict[str, set[str]]] = {}
            for name, func in indexers.items():
                index: dict[str, set[str]] = {}
                for key, obj in self._items.items():
                    for value in func(obj):
                        index.setdefault(value, set()).add(key)
                built[name] = index
            self._indexers.update(indexers)
            self._indices.update(built)

    def indexers(self) -> dict[str, IndexFunc]:
        """A copy of the index functions by name."""
        with self._lock:
            return dict(self._indexers)

    def by_index(self, index_name: str, value: str) -> list[Obj]:
        """Objects filed under ``value`` in index ``index_name`` (sorted by key). ``KeyError`` for an unknown index."""
        with self._lock:
            keys = self._index(index_name).get(value, ())
            return [self._items[k] for k in sorted(keys)]

    def index_keys(self, index_name: str, value: str) -> list[str]:
        """Keys filed under ``value`` in index ``index_name`` (sorted). ``KeyError`` for an unknown index."""
        with self._lock:
            return sorted(self._index(index_name).get(value, ()))

    def index_values(self, index_name: str) -> list[str]:
        """All values that index ``index_name`` currently holds objects under (sorted)."""
        with self._lock:
            return sorted(self._index(index_name))

    def _index(self, index_name: str) -> dict[str, set[str]]:
        try:
            return self._indices[index_name]
        except KeyError:
            raise KeyError(f"no index named {index_name!r}") from None

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index_values(self, obj: Obj) -> list[tuple[dict[str, set[str]], list[str]]]:
        # Compute every index value first, so that a raising index function leaves the store unchanged.
        return [(self._indices[name], func(obj)) for name, func in self._indexers.items()]

    @staticmethod
    def _file(key: str, values: list[tuple[dict[str, set[str]], list[str]]]) -> None:
        for index, vals in values:
            for value in vals:
                index.setdefault(value, set()).add(key)

    # -- writes (the informer's) -----------------------------------------------------------------------------

    def add(self, obj: Obj) -> Obj | None:
        """Insert or replace ``obj`` under its key; returns the object it replaced (``None`` if new)."""
        key = self._key_func(obj)
        with self._lock:
            values = self._index_values(obj)
            old = self._items.get(key)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = obj
            self._file(key, values)
            return old

    update = add

    def delete_key(self, key: str) -> Obj | None:
        """Remove the object stored under ``key``; returns it (``None`` if there was none)."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            return old

    def delete(self, obj: Obj | DeletedFinalStateUnknown) -> Obj | None:
        """Remove the object stored under ``obj``'s key; returns the stored object (``None`` if there was none)."""
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else self._key_func(obj)
        return self.delete_key(key)

    def replace(self, objs: Iterable[Obj]) -> dict[str, Obj]:
        """Make the store hold exactly ``objs``; returns the previous contents (key → object)."""
        new = {self._key_func(obj): obj for obj in objs}
        with self._lock:
            indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
            for key, obj in new.items():
                for name, func in self._indexers.items():
                    index = indices[name]
                    for value in func(obj):
                        index.setdefault(value, set()).add(key)
            old, self._items, self._indices = self._items, new, indices
            return old

    # -- reads -----------------------------------------------------------------------------------------------

    def get_by_key(self, key: str) -> Obj | None:
        """The object stored under ``key``, or ``None``."""
        with self._lock:
            return self._items.get(key)

    def get(self, obj: Obj) -> Obj | None:
        """The stored object with ``obj``'s key, or ``None``."""
        return self.get_by_key(self._key_func(obj))

    def list(self) -> list[Obj]:
        """All stored objects (a new list, sorted by key)."""
        with self._lock:
            return [self._items[k] for k in sorted(self._items)]

    def list_keys(self) -> builtins.list[str]:
        """All keys (a new list, sorted)."""
        with self._lock:
            return sorted(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items
