"""owner_key: which owner reference enqueues (controller-runtime's EnqueueRequestForOwner, OnlyControllerOwner)."""

from __future__ import annotations

from typing import Any

from keyqueue.manager import Resource, owner_key

WIDGET = Resource("example.com", "v1", "widgets", "Widget", namespaced=True)
CLUSTER_THING = Resource("example.com", "v1", "things", "Thing", namespaced=False)


def obj(*refs: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": "child", "namespace": namespace, "ownerReferences": list(refs)}}


def ref(kind: str = "Widget", api_version: str = "example.com/v1", controller: Any = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u", "controller": controller}


def test_the_controller_reference_of_the_primary_group_and_kind_enqueues_in_the_objects_namespace() -> None:
    assert owner_key(obj(ref()), WIDGET) == "ns/owner"
    assert owner_key(obj(ref(api_version="example.com/v2")), WIDGET) == "ns/owner"  # the version does not matter
    assert owner_key(obj(ref(kind="Thing")), CLUSTER_THING) == "owner"  # a cluster-scoped owner: its name


def test_anything_else_enqueues_nothing() -> None:
    assert owner_key({"metadata": {"name": "x", "namespace": "ns"}}, WIDGET) is None  # no owner references
    assert owner_key(obj(ref(controller=False)), WIDGET) is None  # an owner, not the controller
    assert owner_key(obj(ref(controller=None)), WIDGET) is None
    assert owner_key(obj(ref(api_version="other.io/v1")), WIDGET) is None  # same kind, another group
    assert owner_key(obj(ref(kind="Gadget")), WIDGET) is None  # another kind
    assert owner_key(obj(ref(kind="Widget", api_version="v1")), WIDGET) is None  # the core group is not example.com
    # the one controller reference is another kind's: a non-controller Widget reference after it does not count
    assert owner_key(obj(ref(kind="Gadget"), ref(controller=False)), WIDGET) is None
