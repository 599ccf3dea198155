"""The registry's server-side apply: :meth:`ServerSideApply.apply` (an object, or its ``/status``) and
:meth:`ServerSideApply.apply_scale` (a workload's ``/scale``), on the write path of :mod:`.writes` with the field
manager of :mod:`~keyqueue.apiserver.apply`."""

from __future__ import annotations

import copy
from typing import Any

from .. import errors
from ..apply import ApplyRequest
from ..errors import APIError
from ..objects import ResourceType, scale_of, scale_replicas
from .base import _CONFLICT_MSG, RegistryBase
from .options import WriteOptions

__all__ = ["ServerSideApply"]

_SCALE_PATHS = frozenset({("f:spec", "f:replicas")})


class ServerSideApply(RegistryBase):
    """Server-side apply on the read-modify-write loop of the write path (its ``create``, ``_guaranteed_update`` and
    ``_update_checks``)."""

    def apply(self, rt: ResourceType, namespace: str | None, request: ApplyRequest,
              opts: WriteOptions) -> tuple[dict[str, Any], bool]:
        """Apply ``request`` to the object it names; returns the stored object and whether the apply created it
        (an object that does not exist is created, but not through a subresource: 404).  Blocks on backend calls.
        Raises 400 for a bad configuration, 409 for conflicts (without ``force``) or a failed ``resourceVersion``
        precondition, the create and update errors of the write path otherwise."""
        request.check()
        decode_opts = copy.copy(opts)
        request.normalize(self.decode_body(rt, request.config, decode_opts))
        opts.warnings.extend(decode_opts.warnings)
        quiet = copy.copy(opts)
        quiet.warnings = []
        quiet.field_validation = "Ignore"

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            merged = request.merged(current)
            request.sync_last_applied(current, merged)
            new = self.decode_body(rt, merged, quiet)
            return self._update_checks(rt, namespace, request.name, new, current, opts, request.subresource,
                                       apply=request)

        for _attempt in range(8):
            try:
                return self._guaranteed_update(rt, namespace, request.name, mutate, opts), False
            except APIError as exc:
                if exc.code != 404 or request.subresource:
                    raise
            if (request.config.get("metadata") or {}).get("resourceVersion"):
                raise errors.conflict(rt.qualified_name, request.name, _CONFLICT_MSG)
            try:
                return self.create(rt, namespace, request.merged(None), opts, apply=request), True
            except APIError as exc:
                if exc.reason != "AlreadyExists":
                    raise
        raise errors.conflict(rt.qualified_name, request.name, "the object kept being created and deleted; try again")

    def apply_scale(self, rt: ResourceType, namespace: str | None, name: str, scale: Any, manager: str, force: bool,
                    opts: WriteOptions) -> dict[str, Any]:
        """Apply a ``Scale`` (``scale``: the parsed body) to a workload's ``/scale``: its ``spec.replicas`` is
        applied to the workload by ``manager`` (an ``Apply`` entry with ``subresource: scale``).  Returns the new
        Scale; 404 if the workload does not exist, 400/422 for a bad Scale, 409 for conflicts."""
        if scale.get("apiVersion") != "autoscaling/v1" or scale.get("kind") != "Scale":
            raise errors.bad_request("Incorrect version specified in apply patch. Specified patch version: "
                                     f"{scale.get('apiVersion', '')}, expected: autoscaling/v1")
        replicas, rv = scale_replicas(rt, name, scale)
        meta: dict[str, Any] = {"name": (scale.get("metadata") or {}).get("name", "")}
        if rv:
            meta["resourceVersion"] = rv
        request = ApplyRequest(rt, name, {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta,
                                          "spec": {"replicas": replicas}}, manager, force, "scale", _SCALE_PATHS)
        request.check()
        request.normalize(request.config)

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            new = request.merged(current)
            return self._update_checks(rt, namespace, name, new, current, opts, apply=request)

        return scale_of(self._guaranteed_update(rt, namespace, name, mutate, opts))
