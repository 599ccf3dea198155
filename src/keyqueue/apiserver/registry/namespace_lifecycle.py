"""A namespace's life in the registry, as kube-apiserver and its namespace controller handle it, within the calls
that cause it (there is no namespace controller): the system namespaces are created at start; a create in a
namespace that is missing or terminating is refused, and its transaction carries the namespace's ``mod_revision``
so that none slips in; a deleted namespace is marked ``Terminating`` and emptied, and goes once its objects and its
finalizers (``spec.finalizers``, set through ``/finalize``, and ``metadata.finalizers``) are gone."""

from __future__ import annotations

import copy
import json
from typing import Any

from .. import errors
from ..errors import APIError
from ..objects import NAMESPACES, ResourceType, format_time
from ..storage import KeyValue
from ..validation import namespace_finalizer_causes
from .base import _CONFLICT_MSG, RegistryBase
from .options import SYSTEM_NAMESPACES, WriteOptions

__all__ = ["NamespaceLifecycle"]


def _phase(kv: KeyValue) -> str:
    """``status.phase`` of a stored namespace."""
    try:
        return str((json.loads(kv.value).get("status") or {}).get("phase", ""))
    except (ValueError, AttributeError):
        return ""


class NamespaceLifecycle(RegistryBase):
    """The namespace rules of the registry (see the module docstring)."""

    def ensure_namespaces(self, names: tuple[str, ...] = SYSTEM_NAMESPACES) -> None:
        """Create the given namespaces unless they exist (idempotent)."""
        for name in names:
            try:
                self.create(NAMESPACES, None, {"metadata": {"name": name}}, WriteOptions())
            except APIError as exc:
                if exc.code != 409:
                    raise

    def _namespace_guard(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, int] | None:
        """For a namespaced create: ``(namespace key, its mod_revision)``, the condition the create's transaction
        carries, so that no object is created in a namespace that changed since this check (e.g. began
        terminating).  404 if the namespace does not exist, 403 ``NamespaceTerminating`` while it terminates."""
        if not rt.namespaced:
            return None
        ns_key = self.key(NAMESPACES, None, str(namespace))
        ns_kv, _ = self._backend_call(self.backend.get, ns_key)
        if ns_kv is None:
            raise errors.not_found("namespaces", str(namespace))
        if _phase(ns_kv) == "Terminating":
            raise errors.namespace_terminating(rt.qualified_name, name, str(namespace))
        return ns_key, ns_kv.mod_revision

    def _delete_namespace(self, key: str, kv: KeyValue, current: dict[str, Any]) -> None:
        """Delete a namespace as kube-apiserver and its namespace controller do, in one call: mark it
        ``Terminating`` (from then on creates in it get 403 ``NamespaceTerminating``; a create that checked the
        namespace before is refused by its transaction's guard), delete everything in it, then the namespace."""
        while True:
            if current.get("status", {}).get("phase") != "Terminating":
                marked = copy.deepcopy(current)
                marked.setdefault("status", {})["phase"] = "Terminating"
                marked["metadata"]["deletionTimestamp"] = format_time(self._clock())
                result = self._backend_call(self.backend.update, key, self.encode(NAMESPACES, marked),
                                            kv.mod_revision)
                if not result.succeeded:
                    if result.kv is None:
                        return  # deleted meanwhile
                    kv = result.kv
                    current = self.decode(kv)
                    continue
                assert result.kv is not None
                kv = result.kv
                self._recent.put(kv)
            name = current["metadata"]["name"]
            for rt in self.catalogue.namespaced():
                self._delete_all(rt, name)
            if self._namespace_has_objects(name):
                self._report_remaining(key, name)
                return  # objects with finalizers remain: the last one to go finishes the namespace
            self._finish_namespace(name)
            return

    def _delete_all(self, rt: ResourceType, namespace: str) -> None:
        """Delete every ``rt`` object of ``namespace``; those with finalizers are marked deleted instead."""
        kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)
        for kv in kvs:
            while kv is not None:
                meta = self.decode(kv)["metadata"]
                if meta.get("finalizers"):
                    if meta.get("deletionTimestamp"):
                        break
                    marked = self._mark_deleted(rt, self.decode(kv))
                    result = self._backend_call(self.backend.update, kv.key, self.encode(rt, marked),
                                                kv.mod_revision)
                else:
                    result = self._backend_call(self.backend.delete, kv.key, kv.mod_revision)
                if result.succeeded:
                    self._recent.forget(kv.key)
                kv = None if result.succeeded else result.kv

    def _report_remaining(self, key: str, namespace: str) -> None:
        """Set the conditions kube's namespace controller sets on a namespace waiting for finalizers
        (``NamespaceContentRemaining``, ``NamespaceFinalizersRemaining``), so that ``kubectl get ns -o yaml``
        shows what it waits for.  Retried on a conflict; nothing is written once the namespace is gone."""
        while True:
            kv, _ = self._backend_call(self.backend.get, key)
            if kv is None:
                return
            resources: dict[str, int] = {}
            finalizers: dict[str, int] = {}
            for rt in self.catalogue.namespaced():
                for item in self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)[0]:
                    resources[rt.qualified_name] = resources.get(rt.qualified_name, 0) + 1
                    for f in self.decode(item)["metadata"].get("finalizers") or ():
                        finalizers[f] = finalizers.get(f, 0) + 1
            if not resources:
                return  # emptied meanwhile: whoever emptied it deletes the namespace
            ns = self.decode(kv)
            now = format_time(self._clock())
            ns.setdefault("status", {})["conditions"] = [
                {"type": "NamespaceContentRemaining", "status": "True", "lastTransitionTime": now,
                 "reason": "SomeResourcesRemain", "message": "Some resources are remaining: " + ", ".join(
                     f"{r} has {n} resource instances" for r, n in sorted(resources.items()))},
                {"type": "NamespaceFinalizersRemaining", "status": "True", "lastTransitionTime": now,
                 "reason": "SomeFinalizersRemain",
                 "message": "Some content in the namespace has finalizers remaining: " + ", ".join(
                     f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))},
            ]
            data = self.encode(NAMESPACES, ns)
            if data == kv.value:
                return
            result = self._backend_call(self.backend.update, key, data, kv.mod_revision)
            if result.succeeded:
                assert result.kv is not None
                self._recent.put(result.kv)
                return

    def _namespace_has_objects(self, namespace: str) -> bool:
        return any(self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)[0]
                   for rt in self.catalogue.namespaced())

    def _finish_namespace(self, namespace: str) -> None:
        """Once a terminating ``namespace`` is empty (its own deletion emptied it, or the last object that waited
        for its finalizers is gone): remove the ``kubernetes`` finalizer from ``spec.finalizers``, as kube's
        namespace controller does, and delete the namespace if that leaves no finalizer there nor in
        ``metadata.finalizers`` (else it stays ``Terminating`` until whoever owns them removes them: an update for
        ``metadata.finalizers``, ``/finalize`` for ``spec.finalizers``).  Whichever of this and the namespace's own
        deletion looks last sees it empty, so one of them finishes it."""
        ns_key = self.key(NAMESPACES, None, namespace)
        while True:
            ns_kv, _ = self._backend_call(self.backend.get, ns_key)
            if ns_kv is None or _phase(ns_kv) != "Terminating" or self._namespace_has_objects(namespace):
                return
            ns = self.decode(ns_kv)
            finalizers = list((ns.get("spec") or {}).get("finalizers") or ())
            rest = [f for f in finalizers if f != "kubernetes"]
            deleting = not rest and not ns["metadata"].get("finalizers")
            if deleting:
                result = self._backend_call(self.backend.delete, ns_key, ns_kv.mod_revision)
            elif rest != finalizers:
                ns["spec"] = {**(ns.get("spec") or {}), "finalizers": rest}
                result = self._backend_call(self.backend.update, ns_key, self.encode(NAMESPACES, ns),
                                            ns_kv.mod_revision)
            else:
                return  # waiting for finalizers that someone else removes
            if result.succeeded and not deleting:
                assert result.kv is not None
                self._recent.put(result.kv)
                continue  # written: look again (the others may have gone meanwhile)
            if result.succeeded or result.kv is None:
                self._recent.forget(ns_key)
                return
            # changed meanwhile: read it again

    def finalize_namespace(self, name: str, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """``PUT /api/v1/namespaces/<name>/finalize``: set ``spec.finalizers`` from ``body`` (a Namespace; nothing
        else of it is taken; its ``metadata.resourceVersion`` is a precondition).  A terminating namespace left
        with no finalizer at all is deleted, as kube's namespace controller does after finalizing."""
        obj = self.decode_body(NAMESPACES, body, opts)
        finalizers = list((obj.get("spec") or {}).get("finalizers") or ())
        causes = namespace_finalizer_causes(finalizers)
        if causes:
            raise errors.invalid(NAMESPACES.kind, NAMESPACES.qualified_name, name, causes)

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            rv = obj["metadata"].get("resourceVersion", "")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(NAMESPACES.qualified_name, name, _CONFLICT_MSG)
            current["spec"] = {**(current.get("spec") or {}), "finalizers": finalizers}
            if not finalizers:
                current["spec"].pop("finalizers")
            return current

        return self._guaranteed_update(NAMESPACES, None, name, mutate, opts)
