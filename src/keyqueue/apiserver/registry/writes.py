""":class:`Registry`, assembled from the parts of this package, and its write path: create, update, patch and
delete, with kube-apiserver's preconditions (``resourceVersion``, ``uid``), its registry strategy (the
server-owned fields), finalizers, and the read-modify-write loop of ``GuaranteedUpdate``."""

from __future__ import annotations

import copy
import json
import secrets
import uuid
from collections.abc import Callable
from typing import Any, Final

from .. import errors
from ..admission import ANONYMOUS, Attributes
from ..admission.policy import admit as admit_policies
from ..apply import ApplyRequest
from ..errors import APIError
from ..managedfields import managed_fields
from ..objects import (
    CRDS,
    NAMESPACES,
    RETURNS_DELETED,
    WEBHOOK_CONFIGURATIONS,
    ResourceType,
    format_time,
    prepare_builtin,
    scale_of,
    scale_replicas,
    validate,
)
from ..objects import validate_update as _validate_update
from ..patch import apply_patch
from ..propagation import deletion_finalizers
from .base import _CONFLICT_MSG
from .crd_lifecycle import CrdLifecycle
from .listwatch import ListWatch
from .namespace_lifecycle import NamespaceLifecycle
from .options import SYSTEM_NAMESPACES, Matcher, WriteOptions
from .server_side_apply import ServerSideApply
from .states import _clone, _dumps, _with_rv

__all__ = ["Registry"]

_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generateName suffixes


def _finalized(rt: ResourceType, obj: dict[str, Any]) -> bool:
    """True for an object being deleted whose finalizers are all gone (a namespace's ``spec.finalizers`` too)."""
    meta = obj.get("metadata") or {}
    if rt is NAMESPACES and (obj.get("spec") or {}).get("finalizers"):
        return False
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class Registry(ServerSideApply, CrdLifecycle, NamespaceLifecycle, ListWatch):
    """Objects of every stored :class:`~.objects.ResourceType` in a :class:`Backend`, the way kube-apiserver
    stores them.

    Thread-safe: all shared state is in the backend; every method blocks on
    backend calls only.  Errors are raised as :class:`~.errors.APIError`.

    This class holds the write path; the rest comes from the classes it is assembled from: lists and watches
    (:class:`~.listwatch.ListWatch`), namespaces (:class:`~.namespace_lifecycle.NamespaceLifecycle`), CRDs
    (:class:`~.crd_lifecycle.CrdLifecycle`), and beneath them the state, the codec and gets
    (:class:`~.base.RegistryBase`).
    """

    def _check_namespace(self, rt: ResourceType, obj: dict[str, Any], namespace: str | None) -> None:
        meta = obj["metadata"]
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace

    def _prepare(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The registry strategy: server-owned fields of a new or updated object."""
        meta = obj["metadata"]
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = format_time(self._clock())
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
        else:
            old_meta = old["metadata"]
            meta.setdefault("uid", old_meta.get("uid", ""))
            for kept in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
                else:
                    meta.pop(kept, None)
        if rt is NAMESPACES:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
            if old is None:  # as kube's namespace strategy: the client's spec.finalizers plus "kubernetes"
                finalizers = list((obj.get("spec") or {}).get("finalizers") or ())
                obj["spec"] = {"finalizers": finalizers if "kubernetes" in finalizers else [*finalizers, "kubernetes"]}
                obj["status"] = {"phase": "Active"}
            else:
                for part in ("spec", "status"):
                    if part in old:
                        obj[part] = copy.deepcopy(old[part])
                    else:
                        obj.pop(part, None)

    def _attributes(self, rt: ResourceType, operation: str, namespace: str | None, name: str,
                    obj: dict[str, Any] | None, old: dict[str, Any] | None, opts: WriteOptions,
                    subresource: str = "") -> Attributes:
        """A write as admission sees it; the webhooks' warnings go to ``opts.warnings``."""
        return Attributes(rt, operation, namespace if rt.namespaced else None, name, obj, old, subresource,
                          opts.dry_run, opts.user or dict(ANONYMOUS), opts.field_manager, opts.propagation_policy,
                          opts.warnings)

    def _mutating_admission(self, attrs: Attributes) -> dict[str, Any]:
        """The object of ``attrs`` as the mutating webhooks leave it (each patch decoded as a request body is, its
        unknown fields dropped)."""
        rt = attrs.rt
        quiet = WriteOptions(field_validation="Ignore")
        obj = self.admission.mutate(attrs, lambda patched: self.decode_body(rt, patched, quiet))
        assert obj is not None
        return obj

    def create(self, rt: ResourceType, namespace: str | None, body: Any, opts: WriteOptions, *,
               apply: ApplyRequest | None = None) -> dict[str, Any]:
        """Create an object (POST).  ``body`` is the decoded JSON request body.  405 for a custom resource whose
        CRD is being deleted.  ``apply``: a server-side apply creating the object (its managedFields).  Admission
        webhooks are called (blocking, each at most its timeout) before the object is stored."""
        if rt.custom is not None and rt.custom.terminating:
            raise errors.APIError(405, "MethodNotAllowed",
                                  "create not allowed while custom resource definition is terminating")
        obj = self.decode_body(rt, body, opts)
        meta = obj["metadata"]
        self._check_namespace(rt, obj, namespace)
        if meta.get("resourceVersion"):
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        attrs = self._attributes(rt, "CREATE", namespace, meta.get("name", ""), obj, None, opts)
        obj = self._mutating_admission(attrs)
        meta = obj["metadata"]
        self._check_namespace(rt, obj, namespace)
        generate = meta.get("generateName", "") if not meta.get("name") else ""
        if generate:
            meta["name"] = generate + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
        self._prepare(rt, obj, None)
        self._prepare_extension(rt, obj, None)
        prepare_builtin(rt, obj, None)
        managed = (apply.managed_fields(None, obj, meta["creationTimestamp"]) if apply is not None
                   else managed_fields(rt, None, obj, opts.field_manager, meta["creationTimestamp"]))
        if managed:
            meta["managedFields"] = managed
        validate(rt, obj)
        admit_policies(self, rt, "CREATE", obj, None, namespace, opts.warnings, dry_run=opts.dry_run)
        attrs.obj = obj
        self.admission.validate(attrs)
        guard = self._namespace_guard(rt, namespace, meta["name"])
        for _attempt in range(8):
            key = self.key(rt, namespace, meta["name"])
            if opts.dry_run:
                kv, _ = self._backend_call(self.backend.get, key)
                if kv is not None:
                    raise errors.already_exists(rt.qualified_name, meta["name"])
                return obj
            stored = self._stored_form(rt, obj)
            result = self._backend_call(self.backend.create, key, _dumps(stored), guard)
            if result.succeeded:
                assert result.kv is not None
                created = self._written(rt, result.kv, stored)
                if rt is CRDS:
                    self._serve_crd(created)
                return created
            if result.kv is None and guard is not None:  # the namespace changed meanwhile: check it again
                guard = self._namespace_guard(rt, namespace, meta["name"])
                continue
            if not generate:
                raise errors.already_exists(rt.qualified_name, meta["name"])
            meta["name"] = generate + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
        raise errors.conflict(rt.qualified_name, meta["name"], "the namespace or the name kept changing; try again")

    def _guaranteed_update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Read, ``mutate`` a copy, write if ``mod_revision`` is unchanged; retry otherwise.

        ``mutate`` raises to abort (e.g. 409 on a resourceVersion precondition).
        """
        key = self.key(rt, namespace, name)
        # Like kube-apiserver's GuaranteedUpdate with its watch cache: start from the
        # last state this registry saw for the key (saves a read).  That state may be
        # stale; the transaction's mod_revision compare catches it, and any decision
        # that a stale state could get wrong (an error, a no-op) is re-checked on a
        # fresh read first.
        kv = None if opts.dry_run else self._recent.get(key)
        confirmed = kv is None
        if kv is None:
            kv, _ = self._backend_call(self.backend.get, key)
        while True:
            if kv is None:
                self._recent.forget(key)
                raise errors.not_found(rt.qualified_name, name)
            current = self._shared(kv, rt)
            try:
                new = mutate(_clone(current))
            except APIError:
                if confirmed:
                    raise
                kv, _ = self._backend_call(self.backend.get, key)
                confirmed = True
                continue
            stored = self._stored_form(rt, new)
            data = _dumps(stored)
            if data == kv.value:
                if not confirmed:
                    kv, _ = self._backend_call(self.backend.get, key)
                    confirmed = True
                    continue
                return current  # no-op: nothing written, resourceVersion unchanged
            if opts.dry_run:
                return _with_rv(new, kv.mod_revision)
            if _finalized(rt, new):  # the last finalizer of an object being deleted is gone: delete it
                result = self._backend_call(self.backend.delete, key, kv.mod_revision)
                if result.succeeded:
                    self._recent.forget(key)
                    if namespace is not None:
                        self._finish_namespace(namespace)
                    if rt is CRDS:
                        self._unserve_crd(new, kv.mod_revision + 1)
                    if rt in WEBHOOK_CONFIGURATIONS:
                        self.admission.observe(key, result.revision, None)
                    if rt.custom is not None:
                        self._finish_crd(rt.custom.crd_name)
                    return _with_rv(new, kv.mod_revision)
                kv = result.kv
                confirmed = True
                continue
            result = self._backend_call(self.backend.update, key, data, kv.mod_revision)
            if result.succeeded:
                assert result.kv is not None
                updated = self._written(rt, result.kv, stored)
                if rt is CRDS:
                    self._serve_crd(updated)
                return updated
            kv = result.kv
            confirmed = True

    def _update_checks(
        self, rt: ResourceType, namespace: str | None, name: str, new: dict[str, Any], current: dict[str, Any],
        opts: WriteOptions,
        subresource: str = "",
        admit: bool = True,
        *,
        apply: ApplyRequest | None = None,
    ) -> dict[str, Any]:
        """The checks and the strategy of an update of ``current`` to ``new``, with the admission webhooks
        (``admit``; a ``/scale`` write has none)."""
        meta = new["metadata"]
        if not meta.get("name"):
            meta["name"] = name
        if meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        self._check_namespace(rt, new, namespace)
        rv = meta.get("resourceVersion", "")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.qualified_name, name, _CONFLICT_MSG)
        attrs = self._attributes(rt, "UPDATE", namespace, name, new, current, opts, subresource)
        if admit:
            new = self._mutating_admission(attrs)
            self._check_namespace(rt, new, namespace)
            if new["metadata"].get("name") != name:  # a webhook renamed it
                raise errors.invalid(rt.kind, rt.qualified_name, name, [
                    ("FieldValueInvalid", "metadata.name",
                     f"Invalid value: {json.dumps(new['metadata'].get('name'))}: field is immutable")])
        self._prepare(rt, new, current)
        self._prepare_extension(rt, new, current, subresource)
        prepare_builtin(rt, new, current, subresource)
        now = format_time(self._clock())
        new["metadata"]["managedFields"] = (apply.managed_fields(current, new, now) if apply is not None else
                                            managed_fields(rt, current, new, opts.field_manager, now, subresource))
        if not new["metadata"]["managedFields"]:
            del new["metadata"]["managedFields"]
        _validate_update(rt, new, current)
        admit_policies(self, rt, "UPDATE", new, current, namespace, opts.warnings, subresource=subresource,
                       dry_run=opts.dry_run)
        if current["metadata"].get("deletionTimestamp"):
            had = set(current["metadata"].get("finalizers") or ())
            added = [f for f in new["metadata"].get("finalizers") or () if f not in had]
            if added:
                raise errors.invalid(rt.kind, rt.qualified_name, name, [(
                    "FieldValueForbidden", "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new "
                    "finalizers []string{" + ", ".join(json.dumps(f) for f in added) + "}")])
        if admit:
            attrs.obj = new
            self.admission.validate(attrs)
        return new

    def update(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, opts: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Replace an object (PUT).  With ``metadata.resourceVersion`` in ``body`` it is a compare-and-swap.
        ``subresource`` ``"status"``: a custom resource's status subresource (only ``status`` is taken from
        ``body``; the main endpoint then ignores ``status``)."""
        obj = self.decode_body(rt, body, opts)

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            return self._update_checks(rt, namespace, name, _clone(obj), current, opts, subresource)

        return self._guaranteed_update(rt, namespace, name, mutate, opts)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        opts: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Patch an object.  A ``resourceVersion`` set by the patch is a precondition.  ``subresource`` as for
        :meth:`update`."""

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            patched = apply_patch(patch_type, current, patch)
            new = self.decode_body(rt, patched, opts)
            return self._update_checks(rt, namespace, name, new, current, opts, subresource)

        return self._guaranteed_update(rt, namespace, name, mutate, opts)

    def get_scale(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The ``autoscaling/v1`` Scale of a workload (``rt.scale``); 404 if it does not exist."""
        return scale_of(self.get(rt, namespace, name))

    def update_scale(self, rt: ResourceType, namespace: str | None, name: str, body: Any, opts: WriteOptions,
                     patch_type: str = "") -> dict[str, Any]:
        """Write ``spec.replicas`` of a workload through its Scale: ``body`` is a Scale (PUT; its
        ``resourceVersion``, if set, a precondition) or, with ``patch_type``, a patch of the current Scale.
        Returns the new Scale.  400/422 for a bad Scale, 409 for a failed precondition."""

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            scale = apply_patch(patch_type, scale_of(current), body) if patch_type else body
            replicas, rv = scale_replicas(rt, name, scale)
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.qualified_name, name, _CONFLICT_MSG)
            new = _clone(current)
            new.setdefault("spec", {})["replicas"] = replicas
            new["metadata"].pop("resourceVersion", None)
            return self._update_checks(rt, namespace, name, new, current, opts, "scale", admit=False)

        return scale_of(self._guaranteed_update(rt, namespace, name, mutate, opts))

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None,
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Delete an object; returns a ``Status`` with ``status: Success`` once it is gone.

        An object with ``metadata.finalizers`` is not removed: it gets ``deletionTimestamp`` (now) and
        ``deletionGracePeriodSeconds`` (0), which one write (a MODIFIED event) stores, and the object is returned
        (also when it was being deleted already); it is removed when an update takes its last finalizer away.
        ``preconditions`` (``uid``/``resourceVersion`` from DeleteOptions) that do not hold give 409 Conflict.
        Deleting a namespace deletes its objects (marking those with finalizers), then the namespace once it is
        empty; the system namespaces cannot be deleted (403).
        """
        key = self.key(rt, namespace, name)
        kv, _ = self._backend_call(self.backend.get, key)
        while True:
            if kv is None:
                raise errors.not_found(rt.qualified_name, name)
            current = self.decode(kv, rt=rt)
            meta = current["metadata"]
            for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = (preconditions or {}).get(field_name)
                if want and want != meta.get(field_name):
                    raise errors.conflict(
                        rt.qualified_name, name,
                        f"Precondition failed: {label} in precondition: {want}, "
                        f"{label} in object meta: {meta.get(field_name)}",
                    )
            attrs = self._attributes(rt, "DELETE", namespace, name, None, current, opts)
            self.admission.mutate(attrs, lambda patched: patched)  # a delete has no object to patch
            admit_policies(self, rt, "DELETE", None, current, namespace, opts.warnings, dry_run=opts.dry_run)
            self.admission.validate(attrs)
            if rt is NAMESPACES:
                if name in SYSTEM_NAMESPACES:
                    raise errors.forbidden(rt.name, name, "this namespace may not be deleted")
                if not opts.dry_run:
                    self._delete_namespace(key, kv, current)
                return errors.success_status(rt.qualified_name, name, meta.get("uid", ""))
            finalizers = deletion_finalizers(meta.get("finalizers"), opts.propagation_policy)
            if finalizers:
                if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
                    return current  # being deleted already: waiting for its finalizers
                marked = copy.deepcopy(current) if meta.get("deletionTimestamp") else self._mark_deleted(rt, current)
                marked["metadata"]["finalizers"] = finalizers
                if opts.dry_run:
                    return marked
                result = self._backend_call(self.backend.update, key, self.encode(rt, marked), kv.mod_revision)
                if result.succeeded:
                    assert result.kv is not None
                    self._recent.put(result.kv)
                    stored = self.decode(result.kv, rt=rt)
                    if rt is CRDS:  # kube's CRD finalizer: its objects are deleted, then the CRD
                        self._terminate_crd(stored)
                    return stored
                kv = result.kv
                continue
            if opts.dry_run:
                return current if rt in RETURNS_DELETED else errors.success_status(rt.qualified_name, name,
                                                                                   meta.get("uid", ""))
            if rt is CRDS:  # its objects go first, and nothing more is served for it
                self._unserve_crd(current, kv.mod_revision + 1)
            result = self._backend_call(self.backend.delete, key, kv.mod_revision)
            if result.succeeded:
                self._recent.forget(key)
                if rt in WEBHOOK_CONFIGURATIONS:
                    self.admission.observe(key, result.revision, None)
                if rt is CRDS:
                    self._delete_custom_objects(current)  # any created while it was going
                if namespace is not None and meta.get("deletionTimestamp"):
                    self._finish_namespace(namespace)
                if rt.custom is not None and rt.custom.terminating:
                    self._finish_crd(rt.custom.crd_name)
                if rt in RETURNS_DELETED:
                    return current
                return errors.success_status(rt.qualified_name, name, meta.get("uid", ""))
            kv = result.kv

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, matcher: Matcher, opts: WriteOptions
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Delete every matching object; returns the deleted objects and list metadata."""
        items, meta = self.list_objects(rt, namespace, matcher)
        deleted = []
        for obj in items:
            name = obj["metadata"]["name"]
            try:
                self.delete(rt, obj["metadata"].get("namespace"), name, None, opts)
                deleted.append(obj)
            except APIError as exc:
                if exc.code not in (403, 404):
                    raise
        return deleted, meta
