"""The informer's store and key helpers (no server)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from keyqueue.informer import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Store,
    deletion_handling_key,
    meta_namespace_key,
    split_meta_namespace_key,
)


def cm(name: str, ns: str | None = "default", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns is not None:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_app(obj: dict[str, Any]) -> list[str]:
    app = obj["metadata"].get("labels", {}).get("app")
    return [app] if app else []


def test_keys() -> None:
    assert meta_namespace_key(cm("a")) == "default/a"
    assert meta_namespace_key(cm("node-1", ns=None)) == "node-1"
    assert meta_namespace_key(DeletedFinalStateUnknown("x/y", cm("y", "x"))) == "x/y"
    assert deletion_handling_key(cm("a", "b")) == "b/a"
    from kubernetes import client

    model = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="m", namespace="ns"))
    assert meta_namespace_key(model) == "ns/m"
    with pytest.raises(ValueError, match="metadata"):
        meta_namespace_key({"kind": "ConfigMap"})
    with pytest.raises(ValueError, match=r"metadata\.name"):
        meta_namespace_key({"metadata": {"namespace": "x"}})
    assert split_meta_namespace_key("ns/name") == ("ns", "name")
    assert split_meta_namespace_key("name") == ("", "name")
    for bad in ("", "a/b/c", "/x", "x/"):
        with pytest.raises(ValueError, match="unexpected key"):
            split_meta_namespace_key(bad)


def test_add_update_delete_and_namespace_index() -> None:
    s = Store()
    assert s.add(cm("a")) is None
    old = cm("a", app="v2")
    assert s.add(cm("b", "other")) is None
    first = s.get_by_key("default/a")
    assert s.update(old) is first
    assert s.get(cm("a")) is old
    assert s.list_keys() == ["default/a", "other/b"]
    assert [meta_namespace_key(o) for o in s.list()] == ["default/a", "other/b"]
    assert s.index_keys(NAMESPACE_INDEX, "default") == ["default/a"]
    assert s.index_values(NAMESPACE_INDEX) == ["default", "other"]
    assert s.delete(cm("a")) is old
    assert s.delete(DeletedFinalStateUnknown("other/b", cm("b", "other"))) is not None
    assert s.delete_key("nope") is None
    assert len(s) == 0 and s.index_values(NAMESPACE_INDEX) == []
    with pytest.raises(KeyError, match="no index named 'nope'"):
        s.by_index("nope", "x")


def test_custom_indexers_follow_updates_and_can_be_added_later() -> None:
    s = Store(indexers={"app": by_app})
    s.add(cm("a", app="web"))
    s.add(cm("b", app="web"))
    s.add(cm("c", app="db"))
    assert s.index_keys("app", "web") == ["default/a", "default/b"]
    s.update(cm("a", app="db"))  # re-filed
    assert s.index_keys("app", "web") == ["default/b"]
    assert s.index_keys("app", "db") == ["default/a", "default/c"]
    s.add_indexers({"first-letter": lambda o: [o["metadata"]["name"][0]]})  # existing objects indexed at once
    assert [meta_namespace_key(o) for o in s.by_index("first-letter", "c")] == ["default/c"]
    with pytest.raises(ValueError, match="already exist"):
        s.add_indexers({"app": by_app})
    with pytest.raises(TypeError, match="callable"):
        s.add_indexers({"x": 3})  # type: ignore[dict-item]
    assert set(s.indexers()) == {NAMESPACE_INDEX, "app", "first-letter"}


def test_a_raising_index_function_leaves_the_store_unchanged() -> None:
    def picky(obj: dict[str, Any]) -> list[str]:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("cannot index")
        return ["ok"]

    s = Store(indexers={"picky": picky})
    good = cm("good")
    s.add(good)
    with pytest.raises(RuntimeError):
        s.add(cm("bad"))
    with pytest.raises(RuntimeError):
        s.replace([cm("x"), cm("bad")])
    assert s.list() == [good] and s.index_keys("picky", "ok") == ["default/good"]


def test_replace_returns_previous_contents_and_rebuilds_indexes() -> None:
    s = Store(indexers={"app": by_app})
    s.add(cm("a", app="web"))
    s.add(cm("b", app="web"))
    old = s.replace([cm("b", app="db"), cm("c")])
    assert sorted(old) == ["default/a", "default/b"]
    assert s.list_keys() == ["default/b", "default/c"]
    assert s.index_keys("app", "web") == [] and s.index_keys("app", "db") == ["default/b"]


def test_concurrent_writers_and_readers_stay_consistent() -> None:
    s = Store(indexers={"app": by_app})
    stop = threading.Event()
    problems: list[str] = []

    def writer(wid: int) -> None:
        for i in range(2000):
            s.add(cm(f"w{wid}-{i % 50}", app=f"app{i % 3}"))
            if i % 7 == 0:
                s.delete_key(f"default/w{wid}-{(i * 3) % 50}")

    def reader() -> None:
        while not stop.is_set():
            for value in ("app0", "app1", "app2"):
                for obj in s.by_index("app", value):
                    if by_app(obj) != [value]:
                        problems.append(f"{meta_namespace_key(obj)} filed under {value}")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert problems == []
    total = sum(len(s.index_keys("app", v)) for v in ("app0", "app1", "app2"))
    assert total == len(s) == len(s.index_keys(NAMESPACE_INDEX, "default"))
