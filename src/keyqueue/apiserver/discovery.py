"""Discovery documents: ``/version``, ``/api``, ``/apis``, ``/api/v1`` and a minimal OpenAPI v3.

kubectl reads the OpenAPI v3 document of ``api/v1`` before ``create -f``,
``apply``, ``replace``, ``edit`` and ``--dry-run=server``: it checks that the
PATCH operation of the object's kind (found by ``x-kubernetes-group-version-kind``)
declares the ``fieldValidation`` and ``dryRun`` query parameters, and then lets
the server validate.  The component schemas describe ConfigMap, Namespace and
ObjectMeta (with the patch-merge keys of ``finalizers`` and
``ownerReferences``), which kubectl can use for client-side apply.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from .objects import CONFIGMAPS, NAMESPACES, RESOURCES, ResourceType

__all__ = [
    "GIT_VERSION",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "openapi_v3_doc",
    "openapi_v3_root",
    "version_info",
]

GIT_VERSION: Final = "v1.32.0-keyqueue"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_CORE = "io.k8s.api.core.v1."


def version_info() -> dict[str, Any]:
    return {
        "major": "1",
        "minor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "python",
        "compiler": "keyqueue",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}


def api_resource_list() -> dict[str, Any]:
    resources = []
    for rt in RESOURCES.values():
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        if rt.namespaced:
            verbs.insert(2, "deletecollection")
        resources.append(
            {
                "name": rt.name,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": verbs,
                "shortNames": list(rt.short_names),
            }
        )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources}


# ----------------------------------------------------------------------------- OpenAPI v3


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _gvk(kind: str, group: str = "", version: str = "v1") -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


_STR: Final = {"type": "string"}
_STR_MAP: Final = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}


def _schemas() -> dict[str, Any]:
    owner_ref = {
        "type": "object",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            "apiVersion": _STR, "kind": _STR, "name": _STR, "uid": _STR,
            "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"},
        },
        "x-kubernetes-map-type": "atomic",
    }
    object_meta = {
        "type": "object",
        "description": "Standard object metadata.",
        "properties": {
            "name": _STR, "generateName": _STR, "namespace": _STR, "selfLink": _STR, "uid": _STR,
            "resourceVersion": _STR,
            "generation": {"type": "integer", "format": "int64"},
            "creationTimestamp": _ref(_META + "Time"),
            "deletionTimestamp": _ref(_META + "Time"),
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "labels": _STR_MAP,
            "annotations": _STR_MAP,
            "ownerReferences": {
                "type": "array",
                "items": {"allOf": [_ref(_META + "OwnerReference")], "default": {}},
                "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "uid",
                "x-kubernetes-patch-strategy": "merge",
            },
            "finalizers": {
                "type": "array",
                "items": {"type": "string", "default": ""},
                "x-kubernetes-list-type": "set",
                "x-kubernetes-patch-strategy": "merge",
            },
            "managedFields": {"type": "array", "items": {"type": "object"}},
        },
    }
    list_meta = {
        "type": "object",
        "properties": {
            "resourceVersion": _STR, "continue": _STR, "selfLink": _STR,
            "remainingItemCount": {"type": "integer", "format": "int64"},
        },
    }
    status = {
        "type": "object",
        "properties": {
            "apiVersion": _STR, "kind": _STR, "metadata": {"allOf": [_ref(_META + "ListMeta")], "default": {}},
            "status": _STR, "message": _STR, "reason": _STR,
            "details": {"type": "object"}, "code": {"type": "integer", "format": "int32"},
        },
        "x-kubernetes-group-version-kind": [_gvk("Status")],
    }

    def top(kind: str, props: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "type": "object",
            "description": description,
            "properties": {
                "apiVersion": _STR,
                "kind": _STR,
                "metadata": {"allOf": [_ref(_META + "ObjectMeta")], "default": {}},
                **props,
            },
            "x-kubernetes-group-version-kind": [_gvk(kind)],
        }

    def listing(kind: str, item: str) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": _STR,
                "kind": _STR,
                "metadata": {"allOf": [_ref(_META + "ListMeta")], "default": {}},
                "items": {"type": "array", "items": {"allOf": [_ref(_CORE + item)], "default": {}}},
            },
            "x-kubernetes-group-version-kind": [_gvk(kind)],
        }

    return {
        _META + "Time": {"type": "string", "format": "date-time"},
        _META + "OwnerReference": owner_ref,
        _META + "ObjectMeta": object_meta,
        _META + "ListMeta": list_meta,
        _META + "Status": status,
        _CORE + "ConfigMap": top(
            "ConfigMap",
            {"immutable": {"type": "boolean"}, "data": _STR_MAP,
             "binaryData": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"}}},
            "ConfigMap holds configuration data for pods to consume.",
        ),
        _CORE + "ConfigMapList": listing("ConfigMapList", "ConfigMap"),
        _CORE + "NamespaceSpec": {
            "type": "object",
            "properties": {"finalizers": {"type": "array", "items": {"type": "string", "default": ""},
                                          "x-kubernetes-list-type": "atomic"}},
        },
        _CORE + "NamespaceStatus": {"type": "object", "properties": {"phase": _STR}},
        _CORE + "Namespace": top(
            "Namespace",
            {"spec": {"allOf": [_ref(_CORE + "NamespaceSpec")], "default": {}},
             "status": {"allOf": [_ref(_CORE + "NamespaceStatus")], "default": {}}},
            "Namespace provides a scope for Names.",
        ),
        _CORE + "NamespaceList": listing("NamespaceList", "Namespace"),
    }


def _query(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind, "uniqueItems": True}}


_WRITE_PARAMS: Final = [
    _query("dryRun", "When present, indicates that modifications should not be persisted (All)."),
    _query("fieldManager", "A name associated with the actor or entity that is making these changes."),
    _query("fieldValidation", "How unknown fields are handled: Ignore, Warn (default) or Strict."),
]
_LIST_PARAMS: Final = [
    _query("labelSelector", "A selector to restrict the list of returned objects by their labels."),
    _query("fieldSelector", "A selector to restrict the list of returned objects by their fields."),
    _query("resourceVersion", "Where to start a list or watch from."),
    _query("resourceVersionMatch", "How resourceVersion is applied to a list: Exact or NotOlderThan."),
    _query("limit", "Page size of a list.", "integer"),
    _query("continue", "Token of the next page of a list."),
    _query("watch", "Watch for changes instead of listing.", "boolean"),
    _query("allowWatchBookmarks", "Ask for BOOKMARK events.", "boolean"),
    _query("timeoutSeconds", "End a list or watch after this many seconds.", "integer"),
    _query("sendInitialEvents", "Start a watch with the current state, ended by a bookmark.", "boolean"),
]


def _operation(op_id: str, action: str, kind: str, params: list[dict[str, Any]], schema: str,
               body: str | None = None, codes: tuple[str, ...] = ("200",)) -> dict[str, Any]:
    content = {"application/json": {"schema": _ref(schema)}}
    out: dict[str, Any] = {
        "operationId": op_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(kind),
        "parameters": params,
        "responses": {code: {"description": "OK", "content": content} for code in codes},
    }
    if body is not None:
        out["requestBody"] = {"content": {"*/*": {"schema": _ref(body)}}, "required": True}
    return out


def _paths_for(rt: ResourceType) -> dict[str, Any]:
    item, lst = _CORE + rt.kind, _CORE + rt.list_kind
    scope = "Namespaced" if rt.namespaced else ""
    base = "/api/v1/namespaces/{namespace}/" + rt.name if rt.namespaced else "/api/v1/" + rt.name
    path_params = (
        [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
        if rt.namespaced else []
    )
    name_param = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
    patch = _operation(f"patchCoreV1{scope}{rt.kind}", "patch", rt.kind,
                       [*_WRITE_PARAMS, {"name": "force", "in": "query", "schema": {"type": "boolean"}}],
                       item, codes=("200", "201"))
    patch["requestBody"] = {
        "content": {ct: {"schema": _ref(_META + "Patch")} for ct in (
            "application/json-patch+json", "application/merge-patch+json",
            "application/strategic-merge-patch+json")},
        "required": True,
    }
    paths: dict[str, Any] = {
        base: {
            "get": _operation(f"listCoreV1{scope}{rt.kind}", "list", rt.kind, _LIST_PARAMS, lst),
            "post": _operation(f"createCoreV1{scope}{rt.kind}", "post", rt.kind, _WRITE_PARAMS, item, item,
                               ("200", "201", "202")),
            "parameters": path_params,
        },
        base + "/{name}": {
            "get": _operation(f"readCoreV1{scope}{rt.kind}", "get", rt.kind, [], item),
            "put": _operation(f"replaceCoreV1{scope}{rt.kind}", "put", rt.kind, _WRITE_PARAMS, item, item,
                              ("200", "201")),
            "patch": patch,
            "delete": _operation(f"deleteCoreV1{scope}{rt.kind}", "delete", rt.kind,
                                 [_WRITE_PARAMS[0], _query("propagationPolicy", "Deletion propagation policy.")],
                                 _META + "Status"),
            "parameters": path_params + name_param,
        },
    }
    if rt.namespaced:
        paths["/api/v1/" + rt.name] = {
            "get": _operation(f"listCoreV1{rt.kind}ForAllNamespaces", "list", rt.kind, _LIST_PARAMS, lst),
        }
    return paths


def openapi_v3_doc() -> dict[str, Any]:
    """The OpenAPI v3 document served at ``/openapi/v3/api/v1``."""
    schemas = _schemas()
    schemas[_META + "Patch"] = {"type": "object", "description": "A patch in one of the accepted formats."}
    return {
        "openapi": "3.0.0",
        "info": {"title": "keyqueue test API server (Kubernetes API subset)", "version": GIT_VERSION},
        "paths": {**_paths_for(CONFIGMAPS), **_paths_for(NAMESPACES)},
        "components": {"schemas": schemas},
    }


_DOC_BYTES: Final = json.dumps(openapi_v3_doc(), separators=(",", ":")).encode()
OPENAPI_V3_HASH: Final = hashlib.sha512(_DOC_BYTES).hexdigest().upper()[:128]


def openapi_v3_bytes() -> bytes:
    """The encoded OpenAPI v3 document (computed once)."""
    return _DOC_BYTES


def openapi_v3_root() -> dict[str, Any]:
    """The ``/openapi/v3`` index pointing at the ``api/v1`` document by content hash."""
    return {"paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={OPENAPI_V3_HASH}"}}}
