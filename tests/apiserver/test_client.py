"""The official ``kubernetes`` Python client against both backends (memory and a real etcd)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import BOOKMARK_INTERVAL, WatchCollector, unique

ApiException = client.ApiException


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def _cm(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


def test_default_namespaces_exist(api: Any) -> None:
    names = {n.metadata.name for n in api.list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= names
    ns = api.read_namespace("default")
    assert ns.status.phase == "Active"
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "default"


def test_create_get_and_server_fields(api: Any, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("a", {"k": "v"}))
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert created.metadata.namespace == ns
    assert int(created.metadata.resource_version) > 0
    got = api.read_namespaced_config_map("a", ns)
    assert got.data == {"k": "v"}
    assert got.metadata.resource_version == created.metadata.resource_version
    assert got.metadata.uid == created.metadata.uid


def test_create_duplicate_is_409_already_exists(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, _cm("dup"))
    with pytest.raises(ApiException) as info:
        api.create_namespaced_config_map(ns, _cm("dup"))
    assert info.value.status == 409
    body = _status(info.value)
    assert body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "dup", "kind": "configmaps"}


def test_create_in_missing_namespace_is_404(api: Any) -> None:
    missing = unique("nope")
    with pytest.raises(ApiException) as info:
        api.create_namespaced_config_map(missing, _cm("x"))
    assert info.value.status == 404
    assert _status(info.value)["message"] == f'namespaces "{missing}" not found'


def test_get_missing_is_404(api: Any, ns: str) -> None:
    with pytest.raises(ApiException) as info:
        api.read_namespaced_config_map("absent", ns)
    assert info.value.status == 404
    assert _status(info.value)["reason"] == "NotFound"


def test_generate_name(api: Any, ns: str) -> None:
    first = api.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    second = api.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert first.metadata.name.startswith("gen-") and len(first.metadata.name) == 9
    assert first.metadata.name != second.metadata.name


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_cm("Bad_Name"), "metadata.name"),
        (_cm("ok", {"bad key": "v"}), "data[bad key]"),
        (_cm("ok", labels={"app": "not valid!"}), "metadata.labels"),
    ],
)
def test_invalid_objects_are_422(api: Any, ns: str, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiException) as info:
        api.create_namespaced_config_map(ns, body)
    assert info.value.status == 422
    status = _status(info.value)
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == field


def test_list_with_label_and_field_selectors(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, _cm("a", labels={"app": "web", "tier": "front"}))
    api.create_namespaced_config_map(ns, _cm("b", labels={"app": "web", "tier": "back"}))
    api.create_namespaced_config_map(ns, _cm("c", labels={"app": "db"}))
    api.create_namespaced_config_map(ns, _cm("d"))

    def names(**kwargs: Any) -> list[str]:
        result = api.list_namespaced_config_map(ns, **kwargs)
        assert int(result.metadata.resource_version) > 0
        return sorted(i.metadata.name for i in result.items)

    assert names() == ["a", "b", "c", "d"]
    assert names(label_selector="app=web") == ["a", "b"]
    assert names(label_selector="app==web,tier=back") == ["b"]
    assert names(label_selector="app!=web") == ["c", "d"]
    assert names(label_selector="app") == ["a", "b", "c"]
    assert names(label_selector="!app") == ["d"]
    assert names(label_selector="app in (db, other)") == ["c"]
    assert names(label_selector="tier notin (front)") == ["b", "c", "d"]
    assert names(field_selector="metadata.name=c") == ["c"]
    assert names(field_selector="metadata.name!=c") == ["a", "b", "d"]
    assert names(field_selector=f"metadata.namespace={ns}", label_selector="tier") == ["a", "b"]
    everywhere = api.list_config_map_for_all_namespaces(label_selector="app=web")
    assert {(i.metadata.namespace, i.metadata.name) for i in everywhere.items} == {(ns, "a"), (ns, "b")}
    with pytest.raises(ApiException) as info:
        api.list_namespaced_config_map(ns, field_selector="data.x=1")
    assert info.value.status == 400


def test_list_pagination(api: Any, ns: str) -> None:
    for i in range(5):
        api.create_namespaced_config_map(ns, _cm(f"p{i}"))
    first = api.list_namespaced_config_map(ns, limit=2)
    assert [i.metadata.name for i in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    api.create_namespaced_config_map(ns, _cm("p5"))  # not in the snapshot being paged
    second = api.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    third = api.list_namespaced_config_map(ns, limit=2, _continue=second.metadata._continue)
    assert [i.metadata.name for i in second.items + third.items] == ["p2", "p3", "p4"]
    assert not third.metadata._continue
    assert third.metadata.resource_version == first.metadata.resource_version


def test_expired_continue_token_comes_with_a_fresh_one(server: TestAPIServer, api: Any, ns: str) -> None:
    for i in range(4):
        api.create_namespaced_config_map(ns, _cm(f"e{i}"))
    first = api.list_namespaced_config_map(ns, limit=2)
    api.create_namespaced_config_map(ns, _cm("e9"))  # after the first page's revision
    server.compact()
    with pytest.raises(ApiException) as info:
        api.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    status = _status(info.value)
    assert info.value.status == 410 and status["reason"] == "Expired"
    assert "use the continue token in this response" in status["message"]
    fresh = status["metadata"]["continue"]
    rest = api.list_namespaced_config_map(ns, limit=10, _continue=fresh)  # inconsistent: at the latest revision
    assert [i.metadata.name for i in rest.items] == ["e2", "e3", "e9"]
    assert int(rest.metadata.resource_version) > int(first.metadata.resource_version)


def test_replace_and_stale_replace_is_409(api: Any, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("r", {"v": "1"}))
    stale = api.read_namespaced_config_map("r", ns)
    created.data["v"] = "2"
    replaced = api.replace_namespaced_config_map("r", ns, created)
    assert replaced.data == {"v": "2"}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid
    assert replaced.metadata.creation_timestamp == created.metadata.creation_timestamp

    stale.data["v"] = "3"
    with pytest.raises(ApiException) as info:
        api.replace_namespaced_config_map("r", ns, stale)
    assert info.value.status == 409
    assert _status(info.value)["reason"] == "Conflict"

    stale.metadata.resource_version = None  # unconditional update: last write wins
    assert api.replace_namespaced_config_map("r", ns, stale).data == {"v": "3"}


def test_noop_update_keeps_resource_version(api: Any, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("same", {"v": "1"}))
    again = api.replace_namespaced_config_map("same", ns, created)
    assert again.metadata.resource_version == created.metadata.resource_version
    patched = api.patch_namespaced_config_map("same", ns, {"data": {"v": "1"}})
    assert patched.metadata.resource_version == created.metadata.resource_version


def test_replace_missing_is_404(api: Any, ns: str) -> None:
    with pytest.raises(ApiException) as info:
        api.replace_namespaced_config_map("ghost", ns, _cm("ghost"))
    assert info.value.status == 404


def test_three_patch_types(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, _cm("p", {"a": "1", "b": "2"}))
    # a dict is sent as a strategic merge patch, a list as a JSON patch (client rewrites the content type)
    smp = api.patch_namespaced_config_map("p", ns, {"data": {"c": "3", "a": None},
                                                     "metadata": {"finalizers": ["x/y"]}})
    assert smp.data == {"b": "2", "c": "3"}
    json_patch = api.patch_namespaced_config_map(
        "p", ns, [{"op": "replace", "path": "/data/b", "value": "20"}, {"op": "remove", "path": "/data/c"}]
    )
    assert json_patch.data == {"b": "20"}
    merged = api.patch_namespaced_config_map("p", ns, {"data": {"m": "1"}, "metadata": {"finalizers": None}},
                                             _content_type="application/merge-patch+json")
    assert merged.data == {"b": "20", "m": "1"}
    assert merged.metadata.finalizers is None


def test_patch_errors(api: Any, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("pe", {"a": "1"}))
    with pytest.raises(ApiException) as info:  # an apply configuration names its apiVersion and kind
        api.patch_namespaced_config_map("pe", ns, {"data": {"a": "2"}}, field_manager="t",
                                        _content_type="application/apply-patch+yaml")
    assert info.value.status == 400
    assert _status(info.value)["message"] == ("Incorrect version specified in apply patch. Specified patch version: "
                                              ", expected: v1")
    with pytest.raises(ApiException) as info:  # failed JSON patch test op
        api.patch_namespaced_config_map("pe", ns, [{"op": "test", "path": "/data/a", "value": "2"}])
    assert info.value.status == 422
    api.patch_namespaced_config_map("pe", ns, {"data": {"a": "2"}})
    with pytest.raises(ApiException) as info:  # a resourceVersion inside a patch is a precondition
        api.patch_namespaced_config_map(
            "pe", ns, {"metadata": {"resourceVersion": created.metadata.resource_version}, "data": {"a": "3"}}
        )
    assert info.value.status == 409
    with pytest.raises(ApiException) as info:
        api.patch_namespaced_config_map("ghost", ns, {"data": {"a": "1"}})
    assert info.value.status == 404


def test_delete(api: Any, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("d"))
    status = api.delete_namespaced_config_map("d", ns)
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert status["details"]["uid"] == created.metadata.uid
    with pytest.raises(ApiException) as info:
        api.read_namespaced_config_map("d", ns)
    assert info.value.status == 404
    with pytest.raises(ApiException) as info:
        api.delete_namespaced_config_map("d", ns)
    assert info.value.status == 404


def test_delete_precondition_is_409(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, _cm("pre"))
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as info:
        api.delete_namespaced_config_map("pre", ns, body=body)
    assert info.value.status == 409


def test_dry_run_never_writes(api: Any, ns: str) -> None:
    dry = api.create_namespaced_config_map(ns, _cm("dry", {"a": "1"}), dry_run="All")
    assert dry.metadata.name == "dry" and not dry.metadata.resource_version
    with pytest.raises(ApiException):
        api.read_namespaced_config_map("dry", ns)
    real = api.create_namespaced_config_map(ns, _cm("dry", {"a": "1"}))
    out = api.patch_namespaced_config_map("dry", ns, {"data": {"a": "2"}}, dry_run="All")
    assert out.data == {"a": "2"}
    real.data = {"a": "3"}
    api.replace_namespaced_config_map("dry", ns, real, dry_run="All")
    api.delete_namespaced_config_map("dry", ns, dry_run="All")
    stored = api.read_namespaced_config_map("dry", ns)
    assert stored.data == {"a": "1"}
    assert stored.metadata.resource_version == real.metadata.resource_version


def test_immutable_configmap(api: Any, ns: str) -> None:
    api.create_namespaced_config_map(ns, {"metadata": {"name": "imm"}, "data": {"a": "1"}, "immutable": True})
    with pytest.raises(ApiException) as info:
        api.patch_namespaced_config_map("imm", ns, {"data": {"a": "2"}})
    assert info.value.status == 422
    labelled = api.patch_namespaced_config_map("imm", ns, {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.labels == {"x": "y"}


def test_namespace_delete_removes_its_configmaps(api: Any) -> None:
    name = unique("gone")
    api.create_namespace({"metadata": {"name": name}})
    api.create_namespaced_config_map(name, _cm("inside"))
    api.delete_namespace(name)
    with pytest.raises(ApiException):
        api.read_namespace(name)
    assert [i for i in api.list_config_map_for_all_namespaces().items if i.metadata.namespace == name] == []
    with pytest.raises(ApiException) as info:
        api.delete_namespace("kube-system")
    assert info.value.status == 403


# --------------------------------------------------------------------------- watch


def test_watch_added_modified_deleted_in_order(api: Any, ns: str, collect: Callable[..., WatchCollector]) -> None:
    rv = api.list_namespaced_config_map(ns).metadata.resource_version
    w = collect(api.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=30)
    created = api.create_namespaced_config_map(ns, _cm("w", {"a": "1"}))
    created.data["a"] = "2"
    api.replace_namespaced_config_map("w", ns, created)
    api.delete_namespaced_config_map("w", ns)
    events = [w.next_of({"ADDED", "MODIFIED", "DELETED"}) for _ in range(3)]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    assert rvs[0] == int(created.metadata.resource_version)
    assert events[1]["object"].data == {"a": "2"}
    assert events[2]["object"].data == {"a": "2"}  # DELETED carries the last state


def test_watch_without_resource_version_starts_with_current_state(
    api: Any, ns: str, collect: Callable[..., WatchCollector]
) -> None:
    api.create_namespaced_config_map(ns, _cm("existing"))
    w = collect(api.list_namespaced_config_map, ns, timeout_seconds=30)
    first = w.next()
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "existing")
    api.create_namespaced_config_map(ns, _cm("later"))
    event = w.next()
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "later")


def test_watch_with_selector_sees_label_transitions(
    api: Any, ns: str, collect: Callable[..., WatchCollector]
) -> None:
    rv = api.list_namespaced_config_map(ns).metadata.resource_version
    w = collect(api.list_namespaced_config_map, ns, resource_version=rv, label_selector="app=x", timeout_seconds=30)
    api.create_namespaced_config_map(ns, _cm("s"))  # does not match: no event
    api.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"app": "x"}}})  # starts matching
    api.patch_namespaced_config_map("s", ns, {"data": {"k": "v"}})
    api.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"app": "y"}}})  # stops matching
    types = [w.next_of({"ADDED", "MODIFIED", "DELETED"})["type"] for _ in range(3)]
    assert types == ["ADDED", "MODIFIED", "DELETED"]


def test_bookmarks_when_asked(
    api: Any, server: TestAPIServer, ns: str, collect: Callable[..., WatchCollector]
) -> None:
    rv = api.list_namespaced_config_map(ns).metadata.resource_version
    w = collect(api.list_namespaced_config_map, ns, resource_version=rv, allow_watch_bookmarks=True,
                timeout_seconds=30)
    created = api.create_namespaced_config_map(ns, _cm("b"))
    assert w.next_of({"ADDED"})["object"].metadata.name == "b"
    bookmark = w.next_of({"BOOKMARK"}, timeout=10 * BOOKMARK_INTERVAL + 5)
    assert int(bookmark["raw_object"]["metadata"]["resourceVersion"]) >= int(created.metadata.resource_version)
    # Writes elsewhere produce no events here, but bookmarks move past them
    # (etcd progress notifications / the memory store's revision).
    other = api.create_namespaced_config_map("default", _cm(unique("elsewhere")))
    deadline_rounds = 50
    for _ in range(deadline_rounds):
        bookmark = w.next_of({"BOOKMARK"}, timeout=10 * BOOKMARK_INTERVAL + 5)
        if int(bookmark["raw_object"]["metadata"]["resourceVersion"]) >= int(other.metadata.resource_version):
            break
    else:
        pytest.fail("bookmarks never advanced past a write in another namespace")
    assert w.watch.resource_version == bookmark["raw_object"]["metadata"]["resourceVersion"]
    api.delete_namespaced_config_map(other.metadata.name, "default")


def test_timeout_seconds_ends_stream_and_no_bookmarks_unless_asked(api: Any, ns: str) -> None:
    from kubernetes import watch

    rv = api.list_namespaced_config_map(ns).metadata.resource_version
    seconds = max(1, int(3 * BOOKMARK_INTERVAL + 0.999))
    events = list(watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=rv,
                                       timeout_seconds=seconds))
    assert events == []


def test_compaction_gives_410(api: Any, server: TestAPIServer, ns: str) -> None:
    created = api.create_namespaced_config_map(ns, _cm("old", {"v": "0"}))
    old_rv = created.metadata.resource_version
    list_rv = api.list_namespaced_config_map(ns).metadata.resource_version
    for i in range(3):
        api.patch_namespaced_config_map("old", ns, {"data": {"v": str(i + 1)}})
    # before compaction both work
    exact = api.list_namespaced_config_map(ns, resource_version=list_rv, resource_version_match="Exact")
    assert exact.items[0].data == {"v": "0"}
    server.compact()
    with pytest.raises(ApiException) as info:
        api.list_namespaced_config_map(ns, resource_version=list_rv, resource_version_match="Exact")
    assert info.value.status == 410
    assert _status(info.value)["reason"] == "Expired"
    from kubernetes import watch

    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=old_rv,
                                      timeout_seconds=10):
            pass
    assert info.value.status == 410
    # the current state still lists and watches fine
    assert api.list_namespaced_config_map(ns).items[0].data == {"v": "3"}


def test_watch_error_event_is_a_status(server: TestAPIServer, ns: str) -> None:
    import http.client

    api_client = server.api_client()
    try:
        api = client.CoreV1Api(api_client)
        api.create_namespaced_config_map(ns, _cm("e"))
        api.patch_namespaced_config_map("e", ns, {"data": {"x": "1"}})
        rv = api.list_namespaced_config_map(ns).metadata.resource_version
        api.patch_namespaced_config_map("e", ns, {"data": {"x": "2"}})
        server.compact()
    finally:
        api_client.close()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={int(rv) - 1}")
    resp = conn.getresponse()
    assert resp.status == 200
    lines = [json.loads(line) for line in resp.read().splitlines()]
    conn.close()
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["reason"] == "Expired"
