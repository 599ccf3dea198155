"""Discovery documents: ``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>[/<version>]`` and a
minimal OpenAPI v3 document per group version.

Everything here is derived from the resource types one server serves (its
:class:`~.catalogue.Catalogue`, passed in as ``served``: group version -> resource name -> type): a new resource
type in ``objects``, or a CustomResourceDefinition stored in the server, appears in discovery and OpenAPI without
changes here.  The catalogue caches the documents and recomputes them when what it serves changes.

kubectl reads the OpenAPI v3 document of a group version before ``create -f``,
``apply``, ``replace``, ``edit`` and ``--dry-run=server``: it checks that the
PATCH operation of the object's kind (found by ``x-kubernetes-group-version-kind``)
declares the ``fieldValidation`` and ``dryRun`` query parameters, and then lets
the server validate.  The component schemas describe ConfigMap, Namespace,
Lease and ObjectMeta (with the patch-merge keys of ``finalizers`` and
``ownerReferences``), which kubectl can use for client-side apply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .objects import ResourceType, schema_of
from .objects.models import describe
from .patch import merge_lists

#: Resource types by group version (``v1``, ``coordination.k8s.io/v1``) and resource name.
Served = Mapping[str, Mapping[str, ResourceType]]

__all__ = [
    "GIT_VERSION",
    "KUBERNETES_VERSION",
    "api_group",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "doc_path",
    "openapi_v3_doc",
    "version_info",
]

#: The Kubernetes release whose API this server implements: the schemas and behaviours follow the 1.37 types (the
#: ones the official Python client 37.x is generated from: Lease ``strategy``/``preferredHolder``,
#: ``sendInitialEvents``, ``events.k8s.io/v1``, ...) and the tests run kubectl 1.37 against it.  kubectl warns about
#: version skew beyond one minor version, so this is what ``/version`` reports.
KUBERNETES_VERSION: Final = (1, 37)
#: ``gitVersion`` of ``/version``: the release, with ``+keyqueue`` build metadata (as distributions such as k3s do).
GIT_VERSION: Final = f"v{KUBERNETES_VERSION[0]}.{KUBERNETES_VERSION[1]}.0+keyqueue"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_CORE = "io.k8s.api.core.v1."


def version_info() -> dict[str, Any]:
    """The ``version.Info`` of ``/version``: :data:`KUBERNETES_VERSION`."""
    return {
        "major": str(KUBERNETES_VERSION[0]),
        "minor": str(KUBERNETES_VERSION[1]),
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


def version_priority(version: str) -> tuple[int, int, int]:
    """kube's version priority as a sort key (smaller first): GA ``v2`` > ``v1`` > ``v1beta2`` > ``v1beta1`` >
    ``v1alpha1``, then other names."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0)
    major, stage, minor = int(match.group(1)), match.group(2), int(match.group(3) or 0)
    return ({None: 0, "beta": 1, "alpha": 2}[stage], -major, -minor)


def _groups(served: Served) -> dict[str, list[str]]:
    """The named API groups and their versions, preferred first (the core group ``""`` is served at ``/api``)."""
    groups: dict[str, list[str]] = {}
    for gv in served:
        if "/" in gv:
            group, version = gv.split("/", 1)
            groups.setdefault(group, []).append(version)
    for versions in groups.values():
        versions.sort(key=version_priority)
    return groups


def api_group(served: Served, group: str) -> dict[str, Any] | None:
    """The ``APIGroup`` served at ``/apis/<group>``, or ``None`` for a group not served."""
    versions = _groups(served).get(group)
    if versions is None:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries,
            "preferredVersion": entries[0]}


def api_group_list(served: Served) -> dict[str, Any]:
    groups = [api_group(served, g) for g in _groups(served)]
    for g in groups:
        assert g is not None
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(served: Served, group_version: str = "v1") -> dict[str, Any] | None:
    """The ``APIResourceList`` of ``group_version`` (``v1``, ``coordination.k8s.io/v1``), or ``None``."""
    types = served.get(group_version)
    if types is None:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types.values():
        entry: dict[str, Any] = {
            "name": rt.name,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.discovery_verbs,
            "shortNames": list(rt.short_names),
        }
        if rt.custom is not None and rt.custom.categories:
            entry["categories"] = list(rt.custom.categories)
        elif rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        if rt.status or (rt.custom is not None and rt.custom.status):
            resources.append({"name": f"{rt.name}/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": ["get", "patch", "update"]})
        if rt.scale:
            resources.append({"name": f"{rt.name}/scale", "singularName": "", "namespaced": rt.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


# ----------------------------------------------------------------------------- OpenAPI v3


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _gvk(kind: str, group: str = "", version: str = "v1") -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _defs(rt: ResourceType) -> str:
    """The OpenAPI definitions prefix of ``rt``'s group version: ``io.k8s.api.core.v1.``."""
    return f"io.k8s.api.{rt.group.split('.')[0] if rt.group else 'core'}.{rt.version}."


def _op_prefix(rt: ResourceType) -> str:
    """The operationId infix of ``rt``'s group version: ``CoreV1``, ``CoordinationV1``."""
    return (rt.group.split(".")[0] if rt.group else "core").capitalize() + rt.version.capitalize()


_STR: Final = {"type": "string"}
_STR_MAP: Final = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}


def _from_spec(spec: Any) -> dict[str, Any]:
    """The OpenAPI schema of an :mod:`~.objects.schemas` field spec (``metadata`` refers to ObjectMeta)."""
    if isinstance(spec, tuple):
        if spec[0] == "ptr":
            return _from_spec(spec[1])
        if spec[0] == "map":
            return {"type": "object", "additionalProperties": _from_spec(spec[1])}
        return {"type": "array", "items": _from_spec(spec[1])}
    if isinstance(spec, dict):
        props = {k: ({"allOf": [_ref(_META + "ObjectMeta")], "default": {}} if k == "metadata" else _from_spec(v))
                 for k, v in spec.items()}
        return {"type": "object", "properties": props}
    # a new dict per field (descriptions are added to them), never a shared constant
    return {"string": dict(_STR), "integer": {"type": "integer", "format": "int64"}, "boolean": {"type": "boolean"},
            "microtime": _ref(_META + "MicroTime"), "time": _ref(_META + "Time"), "any": {"type": "object"},
            "quantity": {"type": "string"}}[spec]


def _mark_merge_lists(schema: dict[str, Any], path: tuple[str, ...],
                      lists: Mapping[tuple[str, ...], str | None]) -> None:
    """Give the lists a strategic merge patch merges (:func:`~.patch.merge_lists`) kube's patch extensions, so that
    kubectl's client-side apply sends merge patches with directives for them rather than whole lists."""
    for key, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict):
            continue
        sub = (*path, key)
        if prop.get("type") == "array" and sub in lists:
            prop["x-kubernetes-patch-strategy"] = "merge"
            merge_key = lists[sub]
            if merge_key is not None:
                prop["x-kubernetes-patch-merge-key"] = merge_key
        target = prop.get("items") if prop.get("type") == "array" else prop
        if isinstance(target, dict):
            _mark_merge_lists(target, sub, lists)


def _defs_name(rt: ResourceType) -> str:
    """The component name of ``rt``'s objects: ``io.k8s.api.core.v1.ConfigMap``; for a custom resource kube's
    reversed group (``com.example.v1.Widget``)."""
    if rt.custom is not None:
        return ".".join(reversed(rt.group.split("."))) + f".{rt.version}.{rt.kind}"
    return _defs(rt) + rt.kind


def _schemas(types: Mapping[str, ResourceType]) -> dict[str, Any]:
    """Component schemas of one group version's ``types``: hand-written for the types kubectl's client-side apply
    merges (ConfigMap, Namespace, Lease, with kube's patch strategies), derived from the decoding spec for every
    other built-in type and from the CRD's ``openAPIV3Schema`` for a custom resource."""
    schemas = _core_schemas()
    for rt in types.values():
        name = _defs_name(rt)
        if name in schemas:
            continue
        if rt.custom is not None:
            schemas[name] = rt.custom.openapi_schema(_ref(_META + "ObjectMeta"))
        else:
            schemas[name] = _from_spec(schema_of(rt))
            if rt.model:  # the client's documentation of each field, for kubectl explain
                describe(schemas[name], rt.model)
                _mark_merge_lists(schemas[name], (), merge_lists())
        schemas[name]["x-kubernetes-group-version-kind"] = [_gvk(rt.kind, rt.group, rt.version)]
        schemas[name + "List"] = _listing(rt.list_kind, name, rt.group, rt.version)
    return schemas


def _listing(kind: str, item: str, group: str = "", version: str = "v1") -> dict[str, Any]:
    """The schema of the ``<Kind>List`` whose items are the component ``item``."""
    return {
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": {"allOf": [_ref(_META + "ListMeta")], "default": {}},
            "items": {"type": "array", "items": {"allOf": [_ref(item)], "default": {}}},
        },
        "x-kubernetes-group-version-kind": [_gvk(kind, group, version)],
    }


def _core_schemas() -> dict[str, Any]:
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

    def top(kind: str, props: dict[str, Any], description: str, group: str = "") -> dict[str, Any]:
        return {
            "type": "object",
            "description": description,
            "properties": {
                "apiVersion": _STR,
                "kind": _STR,
                "metadata": {"allOf": [_ref(_META + "ObjectMeta")], "default": {}},
                **props,
            },
            "x-kubernetes-group-version-kind": [_gvk(kind, group)],
        }

    def listing(kind: str, item: str, group: str = "", defs: str = _CORE) -> dict[str, Any]:
        return _listing(kind, defs + item, group)

    coordination = "io.k8s.api.coordination.v1."
    micro = _ref(_META + "MicroTime")
    int32 = {"type": "integer", "format": "int32"}

    return {
        _META + "Time": {"type": "string", "format": "date-time"},
        _META + "MicroTime": {"type": "string", "format": "date-time"},
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
        coordination + "LeaseSpec": {
            "type": "object",
            "properties": {
                "holderIdentity": _STR, "leaseDurationSeconds": int32, "acquireTime": micro, "renewTime": micro,
                "leaseTransitions": int32, "strategy": _STR, "preferredHolder": _STR,
            },
        },
        coordination + "Lease": top(
            "Lease",
            {"spec": {"allOf": [_ref(coordination + "LeaseSpec")], "default": {}}},
            "Lease defines a lease concept.",
            "coordination.k8s.io",
        ),
        coordination + "LeaseList": listing("LeaseList", "Lease", "coordination.k8s.io", coordination),
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


def _operation(op_id: str, action: str, rt: ResourceType, params: list[dict[str, Any]], schema: str,
               body: str | None = None, codes: tuple[str, ...] = ("200",)) -> dict[str, Any]:
    content = {"application/json": {"schema": _ref(schema)}}
    out: dict[str, Any] = {
        "operationId": op_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt.kind, rt.group, rt.version),
        "parameters": params,
        "responses": {code: {"description": "OK", "content": content} for code in codes},
    }
    if body is not None:
        out["requestBody"] = {"content": {"*/*": {"schema": _ref(body)}}, "required": True}
    return out


_VERB_OF_ACTION: Final = {"list": "list", "post": "create", "get": "get", "put": "update", "patch": "patch",
                           "delete": "delete"}


def _paths_for(rt: ResourceType) -> dict[str, Any]:
    item = _defs_name(rt)
    lst = item + "List"
    scope = _op_prefix(rt) + ("Namespaced" if rt.namespaced else "")
    base = f"{rt.path_prefix}/namespaces/{{namespace}}/{rt.name}" if rt.namespaced else f"{rt.path_prefix}/{rt.name}"
    path_params = (
        [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
        if rt.namespaced else []
    )
    name_param = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
    patch = _operation(f"patch{scope}{rt.kind}", "patch", rt,
                       [*_WRITE_PARAMS, {"name": "force", "in": "query", "schema": {"type": "boolean"}}],
                       item, codes=("200", "201"))
    # kubectl's client-side apply sends a strategic merge patch only where the PATCH operation accepts one; a
    # custom resource does not (as in kube), so kubectl sends it a JSON merge patch.
    patch_types = ["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"]
    if rt.custom is None:
        patch_types.append("application/strategic-merge-patch+json")
    patch["requestBody"] = {
        "content": {ct: {"schema": _ref(_META + "Patch")} for ct in patch_types},
        "required": True,
    }
    paths: dict[str, Any] = {
        base: {
            "get": _operation(f"list{scope}{rt.kind}", "list", rt, _LIST_PARAMS, lst),
            "post": _operation(f"create{scope}{rt.kind}", "post", rt, _WRITE_PARAMS, item, item,
                               ("200", "201", "202")),
            "parameters": path_params,
        },
        base + "/{name}": {
            "get": _operation(f"read{scope}{rt.kind}", "get", rt, [], item),
            "put": _operation(f"replace{scope}{rt.kind}", "put", rt, _WRITE_PARAMS, item, item,
                              ("200", "201")),
            "patch": patch,
            "delete": _operation(f"delete{scope}{rt.kind}", "delete", rt,
                                 [_WRITE_PARAMS[0], _query("propagationPolicy", "Deletion propagation policy.")],
                                 _META + "Status"),
            "parameters": path_params + name_param,
        },
    }
    if rt.namespaced:
        paths[f"{rt.path_prefix}/{rt.name}"] = {
            "get": _operation(f"list{_op_prefix(rt)}{rt.kind}ForAllNamespaces", "list", rt, _LIST_PARAMS, lst),
        }
    # Only the operations of the verbs the type serves (a review serves create alone).
    for ops in paths.values():
        for method in [m for m in ops if m != "parameters"]:
            if _VERB_OF_ACTION[ops[method]["x-kubernetes-action"]] not in rt.verbs:
                del ops[method]
    return {path: ops for path, ops in paths.items() if set(ops) - {"parameters"}}


def doc_path(group_version: str) -> str:
    """The OpenAPI v3 index key of a group version: ``api/v1``, ``apis/coordination.k8s.io/v1``."""
    return f"apis/{group_version}" if "/" in group_version else f"api/{group_version}"


def openapi_v3_doc(served: Served, group_version: str = "v1") -> dict[str, Any]:
    """The OpenAPI v3 document served at ``/openapi/v3/api/v1`` (or ``/openapi/v3/apis/<group>/<version>``)."""
    types = served[group_version]
    schemas = _schemas(types)
    schemas[_META + "Patch"] = {"type": "object", "description": "A patch in one of the accepted formats."}
    paths: dict[str, Any] = {}
    for rt in types.values():
        paths.update(_paths_for(rt))
    return {
        "openapi": "3.0.0",
        "info": {"title": "keyqueue test API server (Kubernetes API subset)", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


