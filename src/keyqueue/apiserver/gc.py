"""Garbage collection of dependents (``metadata.ownerReferences``), as kube-controller-manager's garbage collector.

Deleting with a ``propagationPolicy`` (:func:`~.propagation.deletion_finalizers`, applied by :meth:`Registry.delete`):

* ``Background`` (the default): the owner goes at once; the collector then deletes each dependent whose owners
  are all gone;
* ``Foreground``: the owner gets ``deletionTimestamp`` and the ``foregroundDeletion`` finalizer and stays; the
  collector deletes its dependents (those that have dependents of their own in the foreground too) and removes
  the finalizer once no dependent with ``blockOwnerDeletion: true`` is left, which deletes the owner;
* ``Orphan``: the owner gets the ``orphan`` finalizer; the collector removes the owner's entry from every
  dependent's ``ownerReferences``, then the finalizer.

An owner reference is resolved as kube resolves it: by ``apiVersion``/``kind`` to a served type, in the
dependent's namespace for a namespaced owner (a namespaced owner in another namespace is absent), cluster-wide for
a cluster-scoped one; it is *dangling* when no object of that name has that ``uid``.  A dependent whose references
are all dangling (or whose owners all wait for their dependents in a foreground deletion) is deleted; one with a
live owner only loses its dangling references.  A reference that cannot be resolved (a kind this server does not
serve, a namespaced owner of a cluster-scoped dependent) keeps the dependent, as in kube.

:class:`GarbageCollector` is one thread per server, driven by a storage watch on every stored type: it keeps the
owner → dependents graph from the watched changes, and acts on deletions, on objects whose owner references
change and on owners marked for foreground or orphan deletion — no polling.  Each decision is made on fresh reads
through the :class:`~.registry.Registry` (as kube's collector checks the live object before it deletes), and
every write is conditional (the dependent's ``uid`` as a delete precondition, the ``resourceVersion`` read for a
patch), so a concurrent change makes it look again instead of acting on stale state.  A watch that falls behind or
hits a compaction makes it rebuild the graph from a full read and re-examine every object with owners.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from .catalogue import Catalogue
from .errors import APIError
from .objects import REVIEWS, ResourceType
from .patch import MERGE_PATCH
from .propagation import FOREGROUND, GC_FINALIZERS, ORPHAN
from .registry import Registry, WriteOptions
from .storage import CompactedError, StorageError, WatchEvent, WatchOverflowError

__all__ = ["GarbageCollector", "owner_types"]

log = logging.getLogger("keyqueue.apiserver.gc")


def owner_types(catalogue: Catalogue) -> list[ResourceType]:
    """Every type ``catalogue`` serves that stores objects (reviews and converted versions left out): the one place
    the collector learns what the server serves, custom resources included, at the moment it asks."""
    return [rt for gv in catalogue.served().values() for rt in gv.values() if rt not in REVIEWS and not rt.renames]


def _type_for(catalogue: Catalogue, api_version: str, kind: str) -> ResourceType | None:
    for rt in owner_types(catalogue):
        if rt.api_version == api_version and rt.kind == kind:
            return rt
    return None


class _Node:
    """One object in the graph: its key, uid and owner references ``(uid, blockOwnerDeletion)``."""

    __slots__ = ("key", "owners", "uid")

    def __init__(self, key: str, uid: str, owners: tuple[tuple[str, bool], ...]) -> None:
        self.key, self.uid, self.owners = key, uid, owners


class GarbageCollector:
    """The collector of one :class:`~.registry.Registry` (see the module docstring).  :meth:`start` runs it in a
    daemon thread, :meth:`stop` ends it (it finishes the object it is looking at)."""

    def __init__(self, registry: Registry) -> None:
        if not isinstance(registry, Registry):
            raise TypeError(f"registry must be a Registry, got {type(registry).__name__}")
        self._registry = registry
        self._prefix = registry.prefix + "/"
        self._nodes: dict[str, _Node] = {}  # key -> node
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent keys
        self._owner_keys: dict[str, str] = {}  # owner uid -> its key, for the owners resolved so far
        self._stopping = threading.Event()
        self._watch: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("garbage collector already started")
            self._thread = threading.Thread(target=self._run, name="apiserver-gc", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (idempotent); blocks up to ``timeout`` seconds for it."""
        self._stopping.set()
        with self._lock:
            watch, thread = self._watch, self._thread
        if watch is not None:
            watch.close()
        if thread is not None:
            thread.join(timeout)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        backend = self._registry.backend
        while not self._stopping.is_set():
            try:
                revision = self._resync()
                watch = backend.watch(self._prefix, revision + 1)
                with self._lock:
                    self._watch = watch
                if self._stopping.is_set():
                    watch.close()
                    return
                while True:
                    batch = watch.next(None)
                    if batch is None or batch.progress is not None:
                        continue
                    todo: dict[str, None] = {}
                    for event in batch.events:
                        self._observe(event, todo)
                    for key in todo:
                        self._examine(key)
            except (WatchOverflowError, CompactedError):
                log.info("garbage collector: watch fell behind or was compacted; rebuilding the graph")
                self._close_watch()
            except EOFError:
                return
            except (StorageError, APIError) as exc:
                if self._stopping.is_set():
                    return
                log.warning("garbage collector: storage error, starting over: %s", exc)
                self._close_watch()
                self._stopping.wait(0.5)
            except Exception:
                if self._stopping.is_set():
                    return
                log.exception("garbage collector: unexpected error, starting over")
                self._close_watch()
                self._stopping.wait(0.5)

    def _close_watch(self) -> None:
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()

    def _resync(self) -> int:
        """Rebuild the graph from a full read; examine every object with owners or GC finalizers."""
        kvs, revision = self._registry.backend.range(self._prefix, 0)
        self._nodes.clear()
        self._dependents.clear()
        self._owner_keys.clear()
        todo: list[str] = []
        for kv in kvs:
            obj = self._load(kv.value)
            if obj is None:
                continue
            self._index(kv.key, obj)
            meta = obj.get("metadata") or {}
            if meta.get("ownerReferences") or set(meta.get("finalizers") or ()) & set(GC_FINALIZERS):
                todo.append(kv.key)
        for key in todo:
            self._examine(key)
        return revision

    @staticmethod
    def _load(value: bytes) -> dict[str, Any] | None:
        try:
            obj = json.loads(value)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    # ------------------------------------------------------------------ the graph
    def _index(self, key: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owners = tuple((str(r.get("uid", "")), bool(r.get("blockOwnerDeletion")))
                       for r in meta.get("ownerReferences") or () if isinstance(r, Mapping))
        self._unindex(key)
        if owners:
            self._nodes[key] = _Node(key, str(meta.get("uid", "")), owners)
            for uid, _block in owners:
                self._dependents.setdefault(uid, set()).add(key)

    def _unindex(self, key: str) -> _Node | None:
        node = self._nodes.pop(key, None)
        if node is not None:
            for uid, _block in node.owners:
                deps = self._dependents.get(uid)
                if deps is not None:
                    deps.discard(key)
                    if not deps:
                        del self._dependents[uid]
        return node

    def _observe(self, event: WatchEvent, todo: dict[str, None]) -> None:
        """Update the graph from one change; add the keys to look at to ``todo``."""
        key = event.kv.key
        if event.type == "DELETE":
            node = self._unindex(key)
            if not self._dependents and node is None:
                return  # nothing owns anything: the common case costs no decode
            prev = self._load(event.prev.value) if event.prev is not None else None
            uid = str(((prev or {}).get("metadata") or {}).get("uid", ""))
            self._owner_keys.pop(uid, None)
            for dependent in sorted(self._dependents.get(uid, ())):
                todo[dependent] = None  # its owner is gone
            for owner_uid, _block in node.owners if node is not None else ():
                owner_key = self._key_of(owner_uid)
                if owner_key is not None:
                    todo[owner_key] = None  # may have been waiting for this dependent (foreground)
            return
        value = event.kv.value
        interesting = b'"ownerReferences"' in value or b'"deletionTimestamp"' in value
        if not interesting and key not in self._nodes:
            return
        obj = self._load(value)
        if obj is None:
            return
        before = self._nodes.get(key)
        self._index(key, obj)
        after = self._nodes.get(key)
        meta = obj.get("metadata") or {}
        if after is not None and (before is None or before.owners != after.owners):
            todo[key] = None  # new or changed owners: are they all there?
        if meta.get("deletionTimestamp") and set(meta.get("finalizers") or ()) & set(GC_FINALIZERS):
            todo[key] = None  # an owner deleted in the foreground or orphaning

    def _key_of(self, uid: str) -> str | None:
        """The key of the owner with ``uid``, if this collector has resolved it (owners waiting for their
        dependents always have been: see :meth:`_examine_once`)."""
        return self._owner_keys.get(uid)

    # ------------------------------------------------------------------ decisions
    def _read(self, key: str) -> tuple[ResourceType, dict[str, Any]] | None:
        kv, _ = self._registry.backend.get(key)
        if kv is None:
            return None
        obj = self._registry.decode(kv)
        rt = _type_for(self._registry.catalogue, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        return None if rt is None else (rt, obj)

    def _examine(self, key: str) -> None:
        for _attempt in range(5):  # a conflict (someone else wrote it meanwhile) makes it look again
            try:
                self._examine_once(key)
                return
            except APIError as exc:
                if exc.code == 409:
                    continue
                if exc.code != 404:  # a write refused (say, 422): log it, the next change looks again
                    log.warning("garbage collector: %s: %s", key, exc)
                return

    def _examine_once(self, key: str) -> None:
        found = self._read(key)
        if found is None:
            return
        rt, obj = found
        meta = obj["metadata"]
        uid = str(meta.get("uid", ""))
        finalizers = list(meta.get("finalizers") or ())
        if meta.get("deletionTimestamp"):
            if ORPHAN in finalizers:
                self._orphan_dependents(uid)
                self._remove_finalizer(rt, obj, ORPHAN)
            elif FOREGROUND in finalizers:
                self._owner_keys[uid] = key
                blocking = False
                for dependent in sorted(self._dependents.get(uid, ())):
                    self._examine(dependent)
                for dependent in self._dependents.get(uid, ()):
                    node = self._nodes.get(dependent)
                    if node is not None and any(o == uid and block for o, block in node.owners):
                        blocking = True
                if not blocking:
                    self._remove_finalizer(rt, obj, FOREGROUND)
            return  # being deleted: nothing else to collect on it
        refs = [r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping)]
        if not refs:
            return
        solid: list[Mapping[str, Any]] = []
        gone: list[Mapping[str, Any]] = []
        for ref in refs:
            state = self._owner_state(rt, meta, ref)
            (solid if state == "solid" else gone).append(ref)
        if solid:
            if gone:  # live owners remain: only the references to absent (or foreground-deleting) owners go
                dropped = {str(r.get("uid", "")) for r in gone}
                keep = [r for r in refs if str(r.get("uid", "")) not in dropped]
                self._registry.patch(rt, meta.get("namespace"), meta["name"], MERGE_PATCH, {"metadata": {
                    "resourceVersion": meta["resourceVersion"], "ownerReferences": keep}}, WriteOptions())
            return
        waiting = any(self._owner_state(rt, meta, r) == "waiting" for r in gone)
        if waiting and self._dependents.get(uid):
            policy = "Foreground"
        elif ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        log.debug("garbage collector: deleting %s (%s)", key, policy)
        self._registry.delete(rt, meta.get("namespace"), meta["name"], {"uid": uid},
                              WriteOptions(propagation_policy=policy))

    def _owner_state(self, rt: ResourceType, meta: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
        """``solid`` (there, or unresolvable), ``waiting`` (there, deleted in the foreground) or ``dangling``."""
        owner_rt = _type_for(self._registry.catalogue, str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
        if owner_rt is None or (owner_rt.namespaced and not rt.namespaced):
            return "solid"  # kube cannot resolve it either, and keeps the dependent
        namespace = meta.get("namespace") if owner_rt.namespaced else None
        try:
            owner = self._registry.get(owner_rt, namespace, str(ref.get("name", "")))
        except APIError as exc:
            if exc.code == 404:
                return "dangling"
            raise
        owner_meta = owner["metadata"]
        if owner_meta.get("uid") != ref.get("uid"):
            return "dangling"
        self._owner_keys[str(owner_meta.get("uid", ""))] = self._registry.key(owner_rt, namespace, owner_meta["name"])
        if owner_meta.get("deletionTimestamp") and FOREGROUND in (owner_meta.get("finalizers") or ()):
            return "waiting"
        return "solid"

    def _orphan_dependents(self, uid: str) -> None:
        for dependent in sorted(self._dependents.get(uid, ())):
            for _attempt in range(5):
                found = self._read(dependent)
                if found is None:
                    break
                rt, obj = found
                meta = obj["metadata"]
                refs = meta.get("ownerReferences") or []
                keep = [r for r in refs if r.get("uid") != uid]
                if len(keep) == len(refs):
                    break
                try:
                    self._registry.patch(rt, meta.get("namespace"), meta["name"], MERGE_PATCH, {"metadata": {
                        "resourceVersion": meta["resourceVersion"], "ownerReferences": keep or None}},
                        WriteOptions())
                    break
                except APIError as exc:
                    if exc.code == 404:
                        break
                    if exc.code != 409:
                        raise

    def _remove_finalizer(self, rt: ResourceType, obj: Mapping[str, Any], finalizer: str) -> None:
        meta = obj["metadata"]
        rest = [f for f in meta.get("finalizers") or () if f != finalizer]
        self._registry.patch(rt, meta.get("namespace"), meta["name"], MERGE_PATCH, {"metadata": {
            "resourceVersion": meta["resourceVersion"], "finalizers": rest or None}}, WriteOptions())
