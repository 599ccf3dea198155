"""ownerReferences and garbage collection: Background, Foreground and Orphan deletion, dependents whose owners are
all gone, namespaced and cluster-scoped owners, ownerReference validation -- through the official client (and
kubectl's --cascade)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.propagation import deletion_finalizers

from .conftest import Kubectl, WatchCollector, raw_request, unique

HOLD = "example.com/hold"
Collect = Callable[..., WatchCollector]


def _ref(obj: Any, kind: str = "ConfigMap", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": obj.metadata.name, "uid": obj.metadata.uid, **extra}


def _cm(api: Any, ns: str, name: str, owners: list[dict[str, Any]] | None = None,
        finalizers: list[str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": name, "ownerReferences": owners or [], "finalizers": finalizers or []}
    return api.create_namespaced_config_map(ns, {"metadata": meta})


def _until(w: WatchCollector, pred: Callable[[str, Any], bool]) -> Any:
    """The first watch event (type, object) of ``w`` that satisfies ``pred``, among those seen by earlier calls
    too (each is matched once); fails after 15 s without one."""
    seen: list[tuple[str, Any]] = w.__dict__.setdefault("seen", [])
    for i, (kind, obj) in enumerate(seen):
        if pred(kind, obj):
            del seen[i]
            return obj
    while True:
        event = w.next(15)
        if pred(event["type"], event["object"]):
            return event["object"]
        seen.append((event["type"], event["object"]))


def _deleted(w: WatchCollector, names: set[str]) -> list[str]:
    """Wait until every name in ``names`` was DELETED; returns the order they went."""
    order = []
    while set(order) != names:
        obj = _until(w, lambda t, o: t == "DELETED" and o.metadata.name in names and o.metadata.name not in order)
        order.append(obj.metadata.name)
    return order


def _rv(api: Any, ns: str) -> str:
    return str(api.list_namespaced_config_map(ns).metadata.resource_version)


def test_deletion_finalizers_follow_the_policy() -> None:
    assert deletion_finalizers(["a", "orphan"], "") == ["a", "orphan"]  # unset: what the object has decides
    assert deletion_finalizers(["a", "orphan"], "Background") == ["a"]
    assert deletion_finalizers(["orphan", "a"], "Foreground") == ["a", "foregroundDeletion"]
    assert deletion_finalizers(["orphan", "a"], "Orphan") == ["orphan", "a"]


def test_background_collects_dependents_whose_owners_are_all_gone(api: Any, ns: str, collect: Collect) -> None:
    owner = _cm(api, ns, "owner")
    other = _cm(api, ns, "other")
    _cm(api, ns, "child", [_ref(owner, controller=True)])
    _cm(api, ns, "grandchild", [_ref(api.read_namespaced_config_map("child", ns))])
    _cm(api, ns, "shared", [_ref(owner), _ref(other)])
    lease = client.CoordinationV1Api(api.api_client).create_namespaced_lease(ns, {
        "metadata": {"name": "lease", "ownerReferences": [_ref(owner)]}, "spec": {}})
    w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
    api.delete_namespaced_config_map("owner", ns)  # Background is the default
    assert _deleted(w, {"owner", "child", "grandchild"})[0] == "owner"
    # a dependent with a live owner stays, without the reference to the one that went
    shared = _until(w, lambda t, o: o.metadata.name == "shared" and len(o.metadata.owner_references or ()) == 1)
    assert shared.metadata.owner_references[0].name == "other"
    leases = client.CoordinationV1Api(api.api_client)
    lw = collect(leases.list_namespaced_lease, ns, resource_version=lease.metadata.resource_version)
    _until(lw, lambda t, o: t == "DELETED" and o.metadata.name == "lease")  # every stored type


def test_foreground_keeps_the_owner_until_blocking_dependents_are_gone(api: Any, ns: str, collect: Collect) -> None:
    owner = _cm(api, ns, "owner")
    _cm(api, ns, "blocking", [_ref(owner, blockOwnerDeletion=True)], [HOLD])
    _cm(api, ns, "free", [_ref(owner)])
    w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
    api.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")
    marked = api.read_namespaced_config_map("owner", ns)
    assert marked.metadata.deletion_timestamp is not None
    assert marked.metadata.finalizers == ["foregroundDeletion"]
    _deleted(w, {"free"})
    held = _until(w, lambda t, o: o.metadata.name == "blocking" and o.metadata.deletion_timestamp is not None)
    assert held.metadata.finalizers == [HOLD]
    owner_now = api.read_namespaced_config_map("owner", ns)  # still waiting for "blocking"
    assert owner_now.metadata.finalizers == ["foregroundDeletion"]
    api.patch_namespaced_config_map("blocking", ns, {"metadata": {"finalizers": None}})
    assert _deleted(w, {"blocking", "owner"}) == ["blocking", "owner"]


def test_orphan_removes_the_owner_from_dependents(api: Any, ns: str, collect: Collect) -> None:
    owner = _cm(api, ns, "owner")
    keeper = _cm(api, ns, "keeper")
    _cm(api, ns, "a", [_ref(owner)])
    _cm(api, ns, "b", [_ref(owner), _ref(keeper)])
    w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
    api.delete_namespaced_config_map("owner", ns, propagation_policy="Orphan")
    _deleted(w, {"owner"})
    assert api.read_namespaced_config_map("a", ns).metadata.owner_references is None
    assert [r.name for r in api.read_namespaced_config_map("b", ns).metadata.owner_references] == ["keeper"]


def test_delete_collection_takes_the_policy(api: Any, ns: str, collect: Collect) -> None:
    owners = [api.create_namespaced_config_map(ns, {"metadata": {"name": f"o{i}", "labels": {"role": "owner"}}})
              for i in range(2)]
    _cm(api, ns, "dep", [_ref(o) for o in owners])
    w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
    api.delete_collection_namespaced_config_map(ns, label_selector="role=owner", propagation_policy="Orphan")
    _deleted(w, {"o0", "o1"})
    assert api.read_namespaced_config_map("dep", ns).metadata.owner_references is None


def test_cluster_scoped_owner_and_absent_owners(api: Any, ns: str, collect: Collect) -> None:
    owner_ns = api.create_namespace({"metadata": {"name": unique("owner-ns")}})
    elsewhere = _cm(api, owner_ns.metadata.name, "elsewhere")
    w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
    _cm(api, ns, "of-namespace", [_ref(owner_ns, kind="Namespace")])
    _cm(api, ns, "never-had-one", [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "no-such"}])
    # a namespaced owner is looked up in the dependent's namespace: one in another namespace is absent
    _cm(api, ns, "cross-namespace", [_ref(elsewhere)])
    _cm(api, ns, "unknown-kind", [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u"}])
    _deleted(w, {"never-had-one", "cross-namespace"})
    api.delete_namespace(owner_ns.metadata.name)
    _deleted(w, {"of-namespace"})
    assert api.read_namespaced_config_map("unknown-kind", ns)  # unresolvable: kept, as kube keeps it


@pytest.mark.parametrize(("refs", "field", "message"), [
    ([{"apiVersion": "v1", "kind": "ConfigMap", "name": "o"}], "metadata.ownerReferences.uid",
     'Invalid value: "": uid must not be empty'),
    ([{"apiVersion": "", "kind": "", "name": "", "uid": "u"}], "metadata.ownerReferences.apiVersion",
     'Invalid value: "": version must not be empty'),
    ([{"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "1", "controller": True},
      {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "2", "controller": True}],
     "metadata.ownerReferences",
     'Only one reference can have Controller set to true. Found "true" in references for ConfigMap/a and '
     "ConfigMap/b"),
])
def test_owner_references_are_validated(server: TestAPIServer, ns: str, refs: list[dict[str, Any]], field: str,
                                        message: str) -> None:
    # raw: the official client's models refuse a reference without uid before sending it
    code, status = raw_request(server, f"/api/v1/namespaces/{ns}/configmaps", "POST",
                               {"metadata": {"name": "bad", "ownerReferences": refs}})
    assert code == 422 and status["reason"] == "Invalid", status
    assert any(c["field"] == field and message in c["message"] for c in status["details"]["causes"]), status


@pytest.mark.etcd
@pytest.mark.kubectl
def test_kubectl_cascade(kubectl: Kubectl, etcd_server: TestAPIServer) -> None:
    with etcd_server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        ns = unique("gc")
        api.create_namespace({"metadata": {"name": ns}})
        owner = _cm(api, ns, "owner")
        _cm(api, ns, "child", [_ref(owner)])
        kubectl.run("delete", "configmap", "owner", "-n", ns, "--cascade=orphan")
        assert api.read_namespaced_config_map("child", ns).metadata.owner_references is None
        owner = _cm(api, ns, "owner2")
        _cm(api, ns, "child2", [_ref(owner, blockOwnerDeletion=True)])
        kubectl.run("delete", "configmap", "owner2", "-n", ns, "--cascade=foreground", "--wait=true")
        names = {c.metadata.name for c in api.list_namespaced_config_map(ns).items}
        assert names == {"child"}, names  # foreground: owner2 went only after child2
        api.delete_namespace(ns)


def test_a_custom_resource_owns_what_it_created(server: TestAPIServer, api: Any, ns: str, collect: Collect) -> None:
    # The operator's case: a ConfigMap owned by a custom resource goes with it (the collector learns the kinds the
    # server serves from its catalogue when it needs them, so a CRD applied after the server started counts).
    from .test_crd import crd_body, widget

    group = f"g{unique('gc')[-8:]}.example.com".lower()
    ext = client.ApiextensionsV1Api(api.api_client)
    ext.create_custom_resource_definition(crd_body(group))
    try:
        co = client.CustomObjectsApi(api.api_client)
        owner = co.create_namespaced_custom_object(group, "v1", ns, "widgets", widget("w", group))
        ref = {"apiVersion": f"{group}/v1", "kind": "Widget", "name": "w", "uid": owner["metadata"]["uid"],
               "controller": True, "blockOwnerDeletion": True}
        _cm(api, ns, "owned", [ref])
        _cm(api, ns, "bystander")
        w = collect(api.list_namespaced_config_map, ns, resource_version=_rv(api, ns))
        co.delete_namespaced_custom_object(group, "v1", ns, "widgets", "w")
        assert _deleted(w, {"owned"}) == ["owned"]
        assert [c.metadata.name for c in api.list_namespaced_config_map(ns).items] == ["bystander"]
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")
