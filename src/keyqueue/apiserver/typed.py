"""Objects as typed trees of fields, and the field-set operations server-side apply and ``managedFields`` are made
of, following kubernetes-sigs/structured-merge-diff (its ``typed`` package: ``ToFieldSet``, ``Compare``,
``Merge``, ``RemoveItems``).

A *field path* is a tuple of path elements spelt as in ``fieldsV1``: ``f:<name>`` for a field of a struct or a key
of a map, ``k:<json>`` for an item of an associative list (its key fields, sorted, as compact JSON:
``k:{"containerPort":80,"protocol":"TCP"}``), ``v:<json>`` for an item of a set (``v:"example.com/f"``).  A *field
set* is a Python set of such paths.

Each type is a tree of :class:`Node` s, what kube reads from a type's OpenAPI extensions:

* ``struct``: named fields, each owned on its own (``x-kubernetes-map-type: granular``, the default for objects);
* ``map``: a map whose keys are owned on their own (``labels``, a ConfigMap's ``data``, ``additionalProperties``);
* ``leaf``: a scalar, or anything *atomic* — a list without a list type (``x-kubernetes-list-type: atomic``, the
  default), a ``+structType=atomic`` struct (``LabelSelector``, ``LocalObjectReference``, ``OwnerReference``),
  ``x-kubernetes-map-type: atomic`` (a Service's ``selector``, a Pod's ``nodeSelector``) — owned as a whole;
* ``set``: a list of scalars whose items are owned on their own (``x-kubernetes-list-type: set``);
* ``assoc``: a list of objects keyed by some of their fields (``x-kubernetes-list-type: map`` with
  ``x-kubernetes-list-map-keys``, or a built-in kind's patch merge key: containers by ``name``, container ports by
  ``containerPort`` + ``protocol``); a key field an item omits takes the schema's default (``protocol: TCP``);
* ``deduced``: a value without a schema (``x-kubernetes-preserve-unknown-fields``): objects are maps of deduced
  values, everything else a leaf.

A built-in kind's tree is built from the official client's models (:mod:`.objects.models`) and the list types and
atomic structs of the Kubernetes API types (their ``+listType``/``+listMapKey``/``+structType`` markers, written
down in tables here); a custom resource's from its CRD's structural schema.  Trees are cached per type.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .objects import CRDS, NAMESPACES, ResourceType, schema_of

__all__ = ["MISSING", "Comparison", "Node", "TypedError", "compare", "describe_path", "merge", "node_of",
           "remove_paths", "to_field_set"]

Path = tuple[str, ...]


class TypedError(ValueError):
    """A value that does not fit its type's list semantics (an item of an associative list without a key field,
    two items with one key); the message is structured-merge-diff's, prefixed with the path."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: An absent value (distinct from JSON ``null``).
MISSING: Final[Any] = _Missing()


@dataclass(frozen=True, eq=False)
class Node:
    """One type of the tree (see the module docstring).  ``fields`` of a struct; ``elem``: the type of a map's
    values, a list's items, or a struct's fields that ``fields`` does not name (``None``: such a field is a leaf);
    ``keys`` and their ``defaults`` of an associative list; ``by_value``: a built-in struct field Go holds by
    value, present (empty) in every object, so never itself added or removed."""

    kind: str
    fields: Mapping[str, Node] = field(default_factory=dict)
    elem: Node | None = None
    keys: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    by_value: bool = False

    def child(self, name: str) -> Node:
        if self.kind == "struct":
            return self.fields.get(name) or self.elem or LEAF
        if self.kind == "deduced":
            return DEDUCED
        return self.elem or LEAF


LEAF: Final = Node("leaf")
DEDUCED: Final = Node("deduced")

# --------------------------------------------------------------------------------------------- built-in kinds
#: ``(type, field)`` -> ``("map", keys...)`` or ``("set",)``; every other list of a built-in type is atomic.
#: Types are the Go names (the client's model names without their ``V1``/``CoreV1`` prefix).
_LISTS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("ObjectMeta", "finalizers"): ("set",),
    ("ObjectMeta", "ownerReferences"): ("map", "uid"),
    ("PodSpec", "volumes"): ("map", "name"),
    ("PodSpec", "initContainers"): ("map", "name"),
    ("PodSpec", "containers"): ("map", "name"),
    ("PodSpec", "ephemeralContainers"): ("map", "name"),
    ("PodSpec", "imagePullSecrets"): ("map", "name"),
    ("PodSpec", "hostAliases"): ("map", "ip"),
    ("PodSpec", "topologySpreadConstraints"): ("map", "topologyKey", "whenUnsatisfiable"),
    ("PodSpec", "schedulingGates"): ("map", "name"),
    ("PodSpec", "resourceClaims"): ("map", "name"),
    **{(container, name): keys for container in ("Container", "EphemeralContainer") for name, keys in (
        ("ports", ("map", "containerPort", "protocol")), ("env", ("map", "name")),
        ("volumeMounts", ("map", "mountPath")), ("volumeDevices", ("map", "devicePath")))},
    ("VolumeMount", "bindMountOptions"): ("set",),
    ("ResourceRequirements", "claims"): ("map", "name"),
    ("ContainerStatus", "volumeMounts"): ("map", "mountPath"),
    ("ContainerStatus", "allocatedResourcesStatus"): ("map", "name"),
    ("PodStatus", "conditions"): ("map", "type"),
    ("PodStatus", "podIPs"): ("map", "ip"),
    ("PodStatus", "resourceClaimStatuses"): ("map", "name"),
    ("ServiceSpec", "ports"): ("map", "port", "protocol"),
    ("ServiceStatus", "conditions"): ("map", "type"),
    ("ServiceAccount", "secrets"): ("map", "name"),
    ("PersistentVolumeClaimStatus", "conditions"): ("map", "type"),
    ("NamespaceStatus", "conditions"): ("map", "type"),
    ("DeploymentStatus", "conditions"): ("map", "type"),
    ("StatefulSetStatus", "conditions"): ("map", "type"),
    ("DaemonSetStatus", "conditions"): ("map", "type"),
    ("ReplicaSetStatus", "conditions"): ("map", "type"),
    ("PodDisruptionBudgetStatus", "conditions"): ("map", "type"),
    ("PodFailurePolicyOnExitCodesRequirement", "values"): ("set",),
    ("UncountedTerminatedPods", "succeeded"): ("set",),
    ("UncountedTerminatedPods", "failed"): ("set",),
    ("Endpoint", "addresses"): ("set",),
    ("CustomResourceDefinitionStatus", "conditions"): ("map", "type"),
}
#: ``+structType=atomic`` types: owned as a whole.
_ATOMIC_STRUCTS: Final = frozenset({
    "LabelSelector", "OwnerReference", "ObjectReference", "LocalObjectReference", "TypedLocalObjectReference",
    "SecretReference", "FileKeySelector", "ObjectFieldSelector", "ResourceFieldSelector", "ConfigMapKeySelector",
    "SecretKeySelector", "NodeSelector", "NodeSelectorTerm", "TopologySelectorTerm", "ScopeSelector",
    "EndpointAddress", "EndpointPort", "ServiceBackendPort", "Subject", "RoleRef",
})
#: ``+mapType=atomic`` maps: owned as a whole.
_ATOMIC_MAPS: Final = frozenset({("PodSpec", "nodeSelector"), ("ServiceSpec", "selector"),
                                 ("ReplicationControllerSpec", "selector")})
#: Key fields with a schema default (``+default="TCP"``), used when an item omits them.
_KEY_DEFAULTS: Final = {"protocol": "TCP"}
#: Struct fields Go holds by value (not pointers): present, possibly empty, in every object of their type.
_BY_VALUE: Final = frozenset({"metadata", "spec", "status", "template", "strategy", "updateStrategy", "jobTemplate",
                              "resources"})
_MODEL_PREFIX: Final = re.compile(r"^(?:[A-Z][a-z]+)?V\d+(?:alpha\d+|beta\d+)?(?=[A-Z])")
_LIST_TYPE: Final = re.compile(r"(?:List|list)\[(.+)\]")
_DICT_TYPE: Final = re.compile(r"(?:Dict\[str, (.+)\]|dict\(str, (.+)\))")
_SCALARS: Final = frozenset({"str", "bytes", "int", "bool", "float", "object", "datetime", "date"})


def _go_name(model: str) -> str:
    return _MODEL_PREFIX.sub("", model)


def _list_node(owner: str, name: str, item: Node) -> Node:
    spec = _LISTS.get((owner, name))
    if spec is None:
        return LEAF
    if spec[0] == "set":
        return Node("set", elem=LEAF)
    return Node("assoc", elem=item, keys=spec[1:], defaults={k: _KEY_DEFAULTS[k] for k in spec[1:]
                                                                if k in _KEY_DEFAULTS})


def _model_type(type_name: str, owner: str, name: str, building: frozenset[str]) -> Node:
    match = _LIST_TYPE.fullmatch(type_name)
    if match is not None:
        return _list_node(owner, name, _model_type(match.group(1), owner, "", building))
    match = _DICT_TYPE.fullmatch(type_name)
    if match is not None:
        if (owner, name) in _ATOMIC_MAPS:
            return LEAF
        return Node("map", elem=_model_type(match.group(1) or match.group(2), owner, "", building))
    if type_name in _SCALARS:
        return LEAF
    if type_name == "V1ObjectMeta":
        return _OBJECT_META
    return _model_node(type_name, building)


def _model_node(model: str, building: frozenset[str] = frozenset()) -> Node:
    go = _go_name(model)
    if go in _ATOMIC_STRUCTS or model in building:
        return LEAF
    cls = getattr(importlib.import_module("kubernetes.client.models"), model)
    fields: dict[str, Node] = {}
    for attr, type_name in cls.openapi_types.items():
        name = cls.attribute_map[attr]
        node = _model_type(type_name, go, name, building | {model})
        if name in _BY_VALUE and node.kind == "struct":
            node = Node("struct", node.fields, node.elem, by_value=True)
        fields[name] = node
    return Node("struct", fields)


_OBJECT_META: Final = Node("struct", {
    "labels": Node("map", elem=LEAF), "annotations": Node("map", elem=LEAF),
    "finalizers": Node("set", elem=LEAF),
    "ownerReferences": Node("assoc", elem=LEAF, keys=("uid",)),
}, by_value=True)


# --------------------------------------------------------------------------------------------- hand-written kinds
def _spec_node(spec: Any, path: tuple[str, ...], lists: Mapping[tuple[str, ...], tuple[str, ...]]) -> Node:
    if isinstance(spec, tuple) and spec[0] == "ptr":
        spec = spec[1]
    if isinstance(spec, dict):
        if path == ("metadata",):
            return _OBJECT_META
        fields = {k: _spec_node(v, (*path, k), lists) for k, v in spec.items()}
        return Node("struct", fields, by_value=len(path) == 1 and path[0] in _BY_VALUE)
    if isinstance(spec, tuple) and spec[0] == "map":
        return Node("map", elem=_spec_node(spec[1], path, lists))
    if isinstance(spec, tuple) and spec[0] == "list" and path in lists:
        keys = lists[path]
        return Node("assoc", elem=_spec_node(spec[1], path, lists), keys=keys) if keys else Node("set", elem=LEAF)
    return LEAF


_HAND_LISTS: Final[dict[str, dict[tuple[str, ...], tuple[str, ...]]]] = {
    NAMESPACES.qualified_name: {("status", "conditions"): ("type",)},
    CRDS.qualified_name: {("status", "conditions"): ("type",)},
}


# --------------------------------------------------------------------------------------------- custom resources
def _schema_node(schema: Any) -> Node:
    """A node from a structural schema (OpenAPI v3 with kube's extensions)."""
    if not isinstance(schema, Mapping):
        return DEDUCED
    if schema.get("x-kubernetes-int-or-string"):
        return LEAF
    kind = schema.get("type")
    if kind == "array":
        list_type = schema.get("x-kubernetes-list-type")
        items = schema.get("items")
        if list_type == "set":
            return Node("set", elem=LEAF)
        if list_type == "map":
            keys = tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())
            props = (items or {}).get("properties") or {} if isinstance(items, Mapping) else {}
            defaults = {k: props[k]["default"] for k in keys
                        if isinstance(props.get(k), Mapping) and "default" in props[k]}
            return Node("assoc", elem=_schema_node(items), keys=keys, defaults=defaults)
        return LEAF
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"))
    if kind == "object" or isinstance(props, Mapping) or isinstance(additional, Mapping) or preserve:
        if schema.get("x-kubernetes-map-type") == "atomic":
            return LEAF
        if isinstance(props, Mapping) and props:
            fields = {str(k): _schema_node(v) for k, v in props.items()}
            if schema.get("x-kubernetes-embedded-resource"):
                fields["metadata"] = _OBJECT_META
            return Node("struct", fields, elem=DEDUCED if preserve else None)
        if isinstance(additional, Mapping):
            return Node("map", elem=_schema_node(additional))
        return DEDUCED if preserve else Node("map", elem=DEDUCED)
    return LEAF


@functools.lru_cache(maxsize=256)
def _builtin_node(rt: ResourceType) -> Node:
    if rt.model:
        return _model_node(rt.model)
    return _spec_node(schema_of(rt), (), _HAND_LISTS.get(rt.qualified_name, {}))


def node_of(rt: ResourceType) -> Node:
    """The type tree of ``rt``'s objects (cached; a custom resource's is built from its CRD's structural schema,
    with ``metadata`` as ObjectMeta)."""
    if rt.custom is None:
        return _builtin_node(rt)
    with _custom_lock:
        node = _custom_cache.get(rt.custom)
    if node is None:
        top = _schema_node(rt.custom.schema)
        fields = dict(top.fields) if top.kind == "struct" else {}
        fields["metadata"] = _OBJECT_META
        node = Node("struct", fields, elem=top.elem if top.kind == "struct" else DEDUCED)
        with _custom_lock:
            _custom_cache[rt.custom] = node
    return node


_custom_lock: Final = threading.Lock()
_custom_cache: weakref.WeakKeyDictionary[Any, Node] = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------------------------- path elements
def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _item_element(node: Node, item: Any, where: str) -> str:
    if node.kind == "set":
        return "v:" + _compact(item)
    if not isinstance(item, Mapping):
        raise TypedError(f"{where}: associative list with keys has an element that is not a map type")
    keys = {}
    for key in node.keys:
        if key in item and item[key] is not None:
            keys[key] = item[key]
        elif key in node.defaults:
            keys[key] = node.defaults[key]
        else:
            raise TypedError(f'{where}: associative list with keys has an element that omits key field "{key}" '
                             "(and doesn't have default value)")
    return "k:" + _compact(dict(sorted(keys.items())))


def describe_path(path: Path) -> str:
    """A path as structured-merge-diff prints it (conflict causes): ``.spec.containers[name="app"].image``."""
    out = []
    for element in path:
        kind, text = element[:2], element[2:]
        if kind == "f:":
            out.append("." + text)
        elif kind == "k:":
            keys = json.loads(text)
            out.append("[" + ",".join(f"{k}={_compact(v)}" for k, v in keys.items()) + "]")
        else:
            out.append(f"[={text}]")
    return "".join(out)


def _effective(node: Node, value: Any) -> str:
    """How ``value`` is walked: ``map`` (struct, map, or a deduced object), ``list`` (set or associative list) or
    ``leaf`` (also for a value of the wrong JSON type, which validation rejects later)."""
    if node.kind in ("struct", "map"):
        return "map" if isinstance(value, dict) else "leaf"
    if node.kind == "deduced":
        return "map" if isinstance(value, dict) else "leaf"
    if node.kind in ("set", "assoc"):
        return "list" if isinstance(value, list) else "leaf"
    return "leaf"


def _items(node: Node, value: list[Any], where: Path, duplicates: bool) -> Iterator[tuple[str, Any]]:
    seen: set[str] = set()
    for item in value:
        element = _item_element(node, item, describe_path(where))
        if element in seen:
            if not duplicates:
                raise TypedError(f"{describe_path(where)}: duplicate entries for key {element[2:]}")
            continue
        seen.add(element)
        yield element, item


# --------------------------------------------------------------------------------------------- operations
def to_field_set(node: Node, value: Any, path: Path = ()) -> set[Path]:
    """The fields ``value`` sets (structured-merge-diff's ``ToFieldSet``): its leaves, the items of its sets and
    associative lists, and its empty maps and ``null`` s.  Raises :class:`TypedError` for an associative list item
    without its key or a duplicate key."""
    out: set[Path] = set()
    _field_set(node, value, path, out)
    return out


def _field_set(node: Node, value: Any, path: Path, out: set[Path]) -> None:
    how = _effective(node, value)
    if how == "leaf":
        if path:
            out.add(path)
        return
    if how == "list":
        assert node.elem is not None
        for element, item in _items(node, value, path, duplicates=False):
            sub = (*path, element)
            out.add(sub)
            _field_set(node.elem, item, sub, out)
        return
    for key, item in value.items():
        sub = (*path, "f:" + key)
        if item is None or (isinstance(item, dict) and not item):
            out.add(sub)
        else:
            _field_set(node.child(key), item, sub, out)


@dataclass
class Comparison:
    """What changed between two values, as field sets."""

    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)

    @property
    def changed(self) -> set[Path]:
        return self.added | self.modified

    def empty(self) -> bool:
        return not (self.added or self.modified or self.removed)


def compare(node: Node, old: Any, new: Any) -> Comparison:
    """structured-merge-diff's ``Compare``: leaves added, modified or removed, and maps, lists and items that
    appeared (added) or disappeared (removed) as a whole.  ``old`` may be :data:`MISSING` (a create).  Never
    raises: a set or associative list whose items cannot be keyed compares as one atomic value."""
    out = Comparison()
    _compare(node, old, new, (), out)
    return out


def _compare(node: Node, old: Any, new: Any, path: Path, out: Comparison) -> None:
    if node.by_value:
        old = {} if old is MISSING else old
        new = {} if new is MISSING else new
    kinds = {_effective(node, v) for v in (old, new) if v is not MISSING}
    how = kinds.pop() if len(kinds) == 1 else "leaf"
    if how == "map" and not old and not new:
        how = "leaf"
    if how == "list" and not old and not new:
        how = "leaf"
    if how == "leaf":
        if not path:
            return
        if old is MISSING:
            out.added.add(path)
        elif new is MISSING:
            out.removed.add(path)
        elif old != new or type(old) is not type(new):
            out.modified.add(path)
        return
    if how == "map":
        left = old if isinstance(old, dict) else {}
        right = new if isinstance(new, dict) else {}
        for key in {**left, **right}:
            _compare(node.child(key), left.get(key, MISSING), right.get(key, MISSING), (*path, "f:" + key), out)
    else:
        assert node.elem is not None
        try:
            left_items = dict(_items(node, old if isinstance(old, list) else [], path, duplicates=True))
            right_items = dict(_items(node, new if isinstance(new, list) else [], path, duplicates=True))
        except TypedError:  # a stored list whose items have no keys (not validated on writes): owned whole
            _compare(LEAF, old, new, path, out)
            return
        for element in {**left_items, **right_items}:
            _compare(node.elem, left_items.get(element, MISSING), right_items.get(element, MISSING),
                     (*path, element), out)
    if path:
        if old is MISSING:
            out.added.add(path)
        elif new is MISSING:
            out.removed.add(path)


def _copy(value: Any) -> Any:
    """A copy of a JSON value (faster than ``copy.deepcopy`` for the large objects applies carry, CRDs)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def merge(node: Node, live: Any, config: Any) -> Any:
    """structured-merge-diff's ``Merge``: ``config`` over ``live`` — maps and structs field by field, sets and
    associative lists item by item (in structured-merge-diff's order: the config's items in its order, the live
    object's others where they were), everything else replaced.  Neither argument is modified.  Raises
    :class:`TypedError` for a config list with two items of one key."""
    return _merge(node, live, config, ())


def _merge(node: Node, live: Any, config: Any, path: Path) -> Any:
    if config is MISSING:
        return _copy(live)
    if live is MISSING:
        _check_lists(node, config, path)
        return _copy(config)
    how_live, how_config = _effective(node, live), _effective(node, config)
    if how_live != how_config or how_config == "leaf":
        _check_lists(node, config, path)
        return _copy(config)
    if how_config == "map":
        if not live and not config:
            return {}
        out = {}
        for key in {**live, **config}:
            out[key] = _merge(node.child(key), live.get(key, MISSING), config.get(key, MISSING), (*path, "f:" + key))
        return out
    if not live and not config:
        return []
    return _merge_list(node, live, config, path)


def _check_lists(node: Node, value: Any, path: Path) -> None:
    """Validate the list items of a config value taken as it is (keys present, no duplicates)."""
    _field_set(node, value, path, set())


def _merge_list(node: Node, live: list[Any], config: list[Any], path: Path) -> list[Any]:
    assert node.elem is not None
    right = list(_items(node, config, path, duplicates=False))
    left: list[tuple[str, Any]] = []
    left_first: dict[str, Any] = {}
    for item in live:
        element = _item_element(node, item, describe_path(path))
        left.append((element, item))
        left_first.setdefault(element, item)
    right_map = dict(right)
    shared = [element for element, _ in right if element in left_first]
    next_shared = shared.pop(0) if shared else None
    merged_right: set[str] = set()
    out: list[Any] = []
    li = ri = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            element = left[li][0]
            if element == right[ri][0]:
                merged_right.add(element)
                out.append(_merge(node.elem, left_first[element], right_map[element], (*path, element)))
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if element in right_map and next_shared is not None and next_shared != element:
                li += 1
                continue
        if li < len(left):
            element, item = left[li]
            if element not in right_map:
                out.append(_copy(item))
                li += 1
                continue
            if element in merged_right:
                li += 1
        if ri < len(right):
            element = right[ri][0]
            merged_right.add(element)
            out.append(_merge(node.elem, left_first.get(element, MISSING), right_map[element], (*path, element)))
            ri += 1
            if next_shared is not None and next_shared == element:
                next_shared = shared.pop(0) if shared else None
    return out


def remove_paths(node: Node, value: Any, paths: set[Path]) -> Any:
    """``value`` without the fields and list items at ``paths`` (each with everything beneath it); a new value,
    ``value`` is not modified."""
    if not paths:
        return _copy(value)
    return _remove(node, value, paths, ())


def _remove(node: Node, value: Any, paths: set[Path], path: Path) -> Any:
    how = _effective(node, value)
    if how == "map":
        out = {}
        for key, item in value.items():
            sub = (*path, "f:" + key)
            if sub in paths:
                continue
            out[key] = _remove(node.child(key), item, paths, sub)
        return out
    if how == "list":
        assert node.elem is not None
        kept = []
        for item in value:
            try:
                sub = (*path, _item_element(node, item, ""))
            except TypedError:
                kept.append(_copy(item))
                continue
            if sub not in paths:
                kept.append(_remove(node.elem, item, paths, sub))
        return kept
    return _copy(value)
