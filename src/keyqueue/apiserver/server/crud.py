"""Create, get, list, update, patch and delete of a collection or one object, with their options.

A create of a review type is answered by :class:`~.reviews.Reviews` instead of stored.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from aiohttp import web

from .. import errors
from ..apply import APPLY_PATCH, ApplyRequest, apply_options_error, parse_apply_body
from ..managedfields import manager_from
from ..objects import REVIEWS, ResourceType, to_table
from ..patch import JSON_PATCH, MERGE_PATCH, PATCH_TYPES
from ..protobuf import PROTOBUF, decode_object
from ..registry import WriteOptions
from .request import _json_response, _loads, _Request
from .reviews import Reviews

__all__ = ["CrudRoutes"]

_TRUE: Final = ("true", "1", "True")


class CrudRoutes(Reviews):
    """The handlers of a collection (``GET``, ``POST``, ``DELETE``) and of one object (``GET``, ``PUT``, ``PATCH``,
    ``DELETE``), and the write and delete options they read from the request."""

    def _options(self, req: _Request) -> WriteOptions:
        dry_run = req.query.get("dryRun", [])
        if any(v != "All" for v in dry_run):
            raise errors.bad_request(f"unsupported dryRun value {dry_run!r}: only All is supported")
        return WriteOptions(dry_run=bool(dry_run), field_validation=req.arg("fieldValidation", "Warn"),
                            field_manager=manager_from(req.arg("fieldManager"), req.http.headers.get("User-Agent", "")),
                            user=self._user_info(req.http))

    @staticmethod
    def _json_body(req: _Request, rt: ResourceType) -> Any:
        if req.content_type == PROTOBUF:
            return decode_object(req.body)
        if req.content_type not in ("application/json", "", "*/*"):
            raise errors.unsupported_media_type(req.content_type, ["application/json", PROTOBUF])
        return _loads(req.body, f"{rt.kind} in version \"{rt.api_version}\" cannot be handled as a {rt.kind}")

    async def _collection(self, req: _Request, rt: ResourceType, namespace: str | None) -> web.StreamResponse:
        reg = self.registry
        if req.method == "GET":
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            limit = req.int_arg("limit")
            items, meta = await self._call(reg.list_objects, rt, namespace, matcher, req.arg("resourceVersion"),
                                           req.arg("resourceVersionMatch"), limit, req.arg("continue"))
            if req.table:
                for obj in items:
                    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
                return _json_response(200, to_table(rt, items, meta["resourceVersion"], time.time(),
                                                    req.table_include,
                                                    {k: v for k, v in meta.items() if k != "resourceVersion"}))
            return _json_response(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                                        "items": items})
        if req.method == "POST":
            if rt.namespaced and namespace is None:
                raise errors.method_not_allowed("POST")
            opts = self._options(req)
            body = self._json_body(req, rt)
            if rt in REVIEWS:
                return _json_response(201, self._review(req, rt, body, opts), opts.warnings)
            obj = await self._call(reg.create, rt, namespace, body, opts)
            return _json_response(201, obj, opts.warnings)
        if req.method == "DELETE" and rt.namespaced and namespace is not None:
            opts, _preconditions = self._delete_options(req)  # as kube: preconditions apply to single deletes
            matcher = reg.matcher(rt, req.arg("labelSelector"), req.arg("fieldSelector"))
            items, meta = await self._call(reg.delete_collection, rt, namespace, matcher, opts)
            return _json_response(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                                        "items": items})
        raise errors.method_not_allowed(req.method)

    def _delete_options(self, req: _Request) -> tuple[WriteOptions, dict[str, Any] | None]:
        """A delete's options (query and ``DeleteOptions`` body): dry run, ``propagationPolicy`` (or the
        deprecated ``orphanDependents``; 422 for an unknown one or both) and the preconditions."""
        opts = self._options(req)
        preconditions = None
        policy = req.arg("propagationPolicy")
        if req.body.strip():
            delete_options = _loads(req.body, "malformed DeleteOptions body")
            if isinstance(delete_options, dict):
                preconditions = delete_options.get("preconditions")
                if delete_options.get("dryRun") == ["All"]:
                    opts.dry_run = True
                policy = delete_options.get("propagationPolicy") or policy
                orphan = delete_options.get("orphanDependents")
                if isinstance(orphan, bool):  # the deprecated spelling of Orphan / Background
                    if policy:
                        raise errors.invalid("DeleteOptions", "deleteoptions", "", [(
                            "FieldValueInvalid", "propagationPolicy",
                            f"Invalid value: {json.dumps(policy)}: orphanDependents and deletionPropagation "
                            "cannot be both set")])
                    policy = "Orphan" if orphan else "Background"
        # the garbage collector (gc.py) acts on the finalizers the policy sets
        if policy not in ("", "Orphan", "Background", "Foreground"):
            raise errors.invalid("DeleteOptions", "deleteoptions", "", [(
                "FieldValueNotSupported", "propagationPolicy",
                f"Unsupported value: {json.dumps(policy)}: supported values: \"Foreground\", "
                "\"Background\", \"Orphan\"")])
        if preconditions is not None and not isinstance(preconditions, dict):
            raise errors.bad_request("DeleteOptions.preconditions must be an object")
        opts.propagation_policy = str(policy)
        return opts, preconditions

    async def _item(self, req: _Request, rt: ResourceType, namespace: str | None, name: str,
                    subresource: str = "") -> web.StreamResponse:
        reg = self.registry
        if subresource == "scale":
            return await self._scale(req, rt, namespace, name)
        if req.method == "GET":
            obj = await self._call(reg.get, rt, namespace, name)
            if req.table:
                return _json_response(200, to_table(rt, [obj], obj["metadata"].get("resourceVersion", ""),
                                                    time.time(), req.table_include))
            return _json_response(200, obj)
        if req.method == "PUT":
            opts = self._options(req)
            body = self._json_body(req, rt)
            obj = await self._call(reg.update, rt, namespace, name, body, opts, subresource)
            return _json_response(200, obj, opts.warnings)
        if req.method == "PATCH":
            # Custom resources take no strategic merge patch (as in kube: their schema has no patch strategies).
            accepted = [JSON_PATCH, MERGE_PATCH] if rt.custom is not None else list(PATCH_TYPES)
            accepted.append(APPLY_PATCH)
            if req.content_type not in accepted:
                raise errors.unsupported_media_type(req.content_type, accepted)
            apply = req.content_type == APPLY_PATCH
            problem = apply_options_error(apply, req.arg("fieldManager"), req.arg("force"))
            if problem is not None:
                raise problem
            opts = self._options(req)
            if apply:
                request = ApplyRequest(rt, name, parse_apply_body(req.body), opts.field_manager,
                                       req.arg("force") in _TRUE, subresource)
                obj, created = await self._call(reg.apply, rt, namespace, request, opts)
                return _json_response(201 if created else 200, obj, opts.warnings)
            patch = _loads(req.body, "error decoding patch")
            obj = await self._call(reg.patch, rt, namespace, name, req.content_type, patch, opts, subresource)
            return _json_response(200, obj, opts.warnings)
        if req.method == "DELETE":
            opts, preconditions = self._delete_options(req)
            return _json_response(200, await self._call(reg.delete, rt, namespace, name, preconditions, opts))
        raise errors.method_not_allowed(req.method)

    async def _scale(self, req: _Request, rt: ResourceType, namespace: str | None, name: str) -> web.StreamResponse:
        """``/scale`` of a workload: GET, PUT or PATCH (JSON, merge or strategic merge) of its Scale."""
        reg = self.registry
        if req.method == "GET":
            return _json_response(200, await self._call(reg.get_scale, rt, namespace, name))
        opts = self._options(req)
        if req.method == "PUT":
            body = _loads(req.body, "error decoding body")
            return _json_response(200, await self._call(reg.update_scale, rt, namespace, name, body, opts),
                                  opts.warnings)
        accepted = [*PATCH_TYPES, APPLY_PATCH]
        if req.content_type not in accepted:
            raise errors.unsupported_media_type(req.content_type, accepted)
        problem = apply_options_error(req.content_type == APPLY_PATCH, req.arg("fieldManager"), req.arg("force"))
        if problem is not None:
            raise problem
        if req.content_type == APPLY_PATCH:
            return _json_response(200, await self._call(reg.apply_scale, rt, namespace, name,
                                                        parse_apply_body(req.body), opts.field_manager,
                                                        req.arg("force") in _TRUE, opts), opts.warnings)
        patch = _loads(req.body, "error decoding patch")
        return _json_response(200, await self._call(reg.update_scale, rt, namespace, name, patch, opts,
                                                    req.content_type), opts.warnings)
