"""The forms an object takes between the backend and the API, and the newest state the registry saw per key.

The stored form is canonical JSON without ``resourceVersion`` (:func:`_dumps`); the API form carries
``metadata.resourceVersion``, the key's ``mod_revision`` (:func:`_with_rv`).  :class:`_RecentStates` holds the newest
state seen per key, decoded once and shared where the API form is the stored form (:func:`_plain`), so that an
update and the watch events after a write need not parse the stored JSON again; :func:`_clone` copies a shared
decoded object before anything modifies it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from ..objects import CRDS, ResourceType
from ..storage import KeyValue


def _clone(value: Any) -> Any:
    """A deep copy of a decoded object (dicts, lists, scalars), several times faster than ``copy.deepcopy``,
    except ``managedFields``, which is shared: nothing modifies an entry in place (:mod:`.managedfields` builds new
    ones, :func:`~.patch.apply_patch` copies), and copying its field trees would be most of an update's cost."""
    if isinstance(value, dict):
        return {k: v if k == "managedFields" else _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """Put ``metadata.resourceVersion`` in its canonical place (after ``uid``)."""
    meta = obj.get("metadata") or {}
    out: dict[str, Any] = {}
    placed = False
    for k, v in meta.items():
        if not placed and k not in ("name", "generateName", "namespace", "selfLink", "uid"):
            out["resourceVersion"] = str(rv)
            placed = True
        if k != "resourceVersion":
            out[k] = v
    if not placed:
        out["resourceVersion"] = str(rv)
    obj["metadata"] = out
    return obj


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _plain(rt: ResourceType) -> bool:
    """True if ``rt`` serves objects exactly as they are stored (no conversion, no renames, not a CRD, whose
    decoded form the catalogue keeps parts of): its decoded objects may be shared (:meth:`Registry._shared`)."""
    return rt.custom is None and not rt.renames and rt is not CRDS


class _RecentStates:
    """The newest state this process saw per key (bounded LRU), with its decoded API form when known.

    A key's value at a given ``mod_revision`` never changes, so an entry can be
    out of date but never wrong about the revision it claims.  The decoded form
    (``metadata.resourceVersion`` = the ``mod_revision``) is shared by every
    reader and must never be modified: it lets an update start from the object
    it wrote last and a watch event reuse the object its write answered with,
    instead of parsing the stored JSON again.  Bounded by ``capacity`` entries
    and by ``max_bytes`` of stored values.
    """

    def __init__(self, capacity: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[KeyValue, dict[str, Any] | None]] = OrderedDict()

    def get(self, key: str) -> KeyValue | None:
        with self._lock:
            item = self._items.get(key)
        return item[0] if item is not None else None

    def decoded(self, kv: KeyValue) -> dict[str, Any] | None:
        """The shared decoded form of ``kv`` if this is the state held for its key (same ``mod_revision``)."""
        with self._lock:
            item = self._items.get(kv.key)
        if item is None or item[0].mod_revision != kv.mod_revision:
            return None
        return item[1]

    def put(self, kv: KeyValue, decoded: dict[str, Any] | None = None) -> None:
        with self._lock:
            have = self._items.get(kv.key)
            if have is not None:
                if have[0].mod_revision > kv.mod_revision or (
                        have[0].mod_revision == kv.mod_revision and (have[1] is not None or decoded is None)):
                    return
                self._bytes -= len(have[0].value)
            self._items[kv.key] = (kv, decoded)
            self._items.move_to_end(kv.key)
            self._bytes += len(kv.value)
            while len(self._items) > self._capacity or (self._bytes > self._max_bytes and len(self._items) > 1):
                _key, (old, _obj) = self._items.popitem(last=False)
                self._bytes -= len(old.value)

    def forget(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is not None:
                self._bytes -= len(item[0].value)

