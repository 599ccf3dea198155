"""A CustomResourceDefinition's life in the registry: the strategies of CRDs and custom resources on a write
(:mod:`.crd`, :class:`~.custom.CustomSchema`), serving a stored CRD's versions (:class:`~.catalogue.Catalogue`) and
ending the watches on the versions it no longer serves, and its deletion: creates of its resources refused, its
objects deleted (those with finalizers waited for), then the CRD."""

from __future__ import annotations

import json
from typing import Any

from .. import errors
from ..crd import CRD_FINALIZER, crd_causes, prepare_crd, served_types
from ..errors import APIError
from ..objects import CRDS, ResourceType, invalid_kind
from .base import RegistryBase
from .options import WriteOptions

__all__ = ["CrdLifecycle"]


class CrdLifecycle(RegistryBase):
    """The CRD rules of the registry (see the module docstring)."""

    def _prepare_extension(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
                           subresource: str = "") -> None:
        """The strategies of CRDs and custom resources on a create (``old`` ``None``) or an update: a CR's
        generation and status subresource (:class:`~.custom.CustomSchema`); a CRD's defaults, status and
        validation (:mod:`.crd`, 422 if invalid)."""
        if rt.custom is not None:
            if old is None:
                rt.custom.prepare_create(obj)
            else:
                rt.custom.prepare_update(obj, old, subresource)
        elif rt is CRDS:
            spec = obj.get("spec") or {}
            conflict = self.catalogue.name_conflict(obj["metadata"].get("name", ""), str(spec.get("group", "")),
                                                    spec.get("names") or {})
            prepare_crd(obj, old, self._clock(), conflict)
            causes = crd_causes(obj, old)
            if causes:
                raise errors.invalid(invalid_kind(CRDS), CRDS.qualified_name, obj["metadata"].get("name", ""),
                                     causes)

    def serve_stored_crds(self) -> int:
        """Serve the custom resources of every CRD in storage (a server started on an etcd that has CRDs);
        returns how many CRDs are served."""
        kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(CRDS, None), 0)
        for kv in kvs:
            self._serve_crd(self.decode(kv, rt=CRDS))
        return len(kvs)

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        """After a CRD was stored: serve its versions (while it is being deleted, for everything but creates).
        Open watches on versions no longer served are ended."""
        name = crd["metadata"]["name"]
        types = served_types(crd)
        if not self.catalogue.set_custom(name, types, int(crd["metadata"]["resourceVersion"])):
            return  # a later state of this CRD is served already
        self._end_watches(name, frozenset(t.version for t in types))

    def _terminate_crd(self, crd: dict[str, Any]) -> None:
        """A CRD was marked deleted: refuse creates of its resources, delete its objects (those with finalizers
        are marked and waited for), and once none is left remove its cleanup finalizer, which deletes it."""
        self._serve_crd(crd)
        name = crd["metadata"]["name"]
        storage = [rt for rt in self.catalogue.custom(name)
                   if rt.custom is not None and rt.version == rt.custom.storage_version]
        if not storage:  # its storage version is not served: nothing can wait for it
            self._delete_custom_objects(crd)
        else:
            kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(storage[0], None), 0)
            for kv in kvs:
                meta = json.loads(kv.value).get("metadata") or {}
                try:
                    self.delete(storage[0], meta.get("namespace"), meta.get("name", ""), None, WriteOptions())
                except APIError as exc:
                    if exc.code not in (404, 409):
                        raise
        self._finish_crd(name)

    def _finish_crd(self, crd_name: str) -> None:
        """If the CRD ``crd_name`` is being deleted and has no objects left: remove its cleanup finalizer (the
        CRD goes with its last finalizer).  Whichever of this and the CRD's deletion looks last sees no objects."""
        types = self.catalogue.custom(crd_name)
        if not types or types[0].custom is None or not types[0].custom.terminating:
            return
        if self._backend_call(self.backend.range, self.collection_prefix(types[0], None), 0)[0]:
            return

        def drop(current: dict[str, Any]) -> dict[str, Any]:
            meta = current["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != CRD_FINALIZER]
            return current

        try:
            self._guaranteed_update(CRDS, None, crd_name, drop, WriteOptions())
        except APIError as exc:
            if exc.code != 404:
                raise

    def _unserve_crd(self, crd: dict[str, Any], revision: int) -> None:
        """A CRD is going (at ``revision``): stop serving it, end the watches on its resources, delete its
        objects."""
        self.catalogue.remove_custom(crd["metadata"]["name"], revision)
        self._end_watches(crd["metadata"]["name"])
        self._delete_custom_objects(crd)

    def _end_watches(self, crd_name: str, keep: frozenset[str] = frozenset()) -> None:
        """End the open watches on the resources of the CRD ``crd_name``, but for the versions in ``keep``."""
        with self._lock:
            watches = [w for w in self._watches if w.rt.custom is not None and w.rt.custom.crd_name == crd_name
                       and w.rt.version not in keep]
        for w in watches:
            w.close()

    def _delete_custom_objects(self, crd: dict[str, Any]) -> None:
        """Delete every stored object of the CRD ``crd`` (finalizers are not waited for)."""
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        if not group or not plural:
            return
        prefix = f"{self.prefix}/{group}/{plural}/"
        while True:
            kvs, _ = self._backend_call(self.backend.range, prefix, 0)
            if not kvs:
                return
            for kv in kvs:
                self._backend_call(self.backend.delete, kv.key, kv.mod_revision)
                self._recent.forget(kv.key)

