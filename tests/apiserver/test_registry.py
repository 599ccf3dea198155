"""Registry semantics that need two writers on one store (two API servers sharing etcd)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from keyqueue.apiserver import APIError, EtcdBackend, EtcdProcess, MemoryBackend, Registry
from keyqueue.apiserver.objects import CONFIGMAPS
from keyqueue.apiserver.registry import WriteOptions
from keyqueue.apiserver.storage import Backend

MERGE = "application/merge-patch+json"


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def two(request: pytest.FixtureRequest) -> Iterator[tuple[Registry, Registry, str]]:
    """Two registries on one backend, and a fresh namespace."""
    if request.param == "memory":
        backend: Backend = MemoryBackend()
    else:
        etcd: EtcdProcess = request.getfixturevalue("etcd_proc")
        backend = EtcdBackend(etcd.endpoint)
    prefix = f"/reg-{uuid.uuid4().hex[:8]}"
    a, b = Registry(backend, prefix), Registry(backend, prefix)
    a.ensure_namespaces(("work",))
    yield a, b, "work"
    backend.close()


def test_update_after_another_writer_is_not_a_false_conflict(two: tuple[Registry, Registry, str]) -> None:
    a, b, ns = two
    created = a.create(CONFIGMAPS, ns, {"metadata": {"name": "x"}, "data": {"v": "1"}}, WriteOptions())
    # b changes the object; a's last-seen state is now stale
    newer = b.patch(CONFIGMAPS, ns, "x", MERGE, {"data": {"v": "2"}}, WriteOptions())
    # a client that saw b's version updates through a: must succeed
    body = {**newer, "data": {"v": "3"}}
    out = a.update(CONFIGMAPS, ns, "x", body, WriteOptions())
    assert out["data"] == {"v": "3"}
    # a client holding the first version still gets 409
    with pytest.raises(APIError) as info:
        a.update(CONFIGMAPS, ns, "x", {**created, "data": {"v": "4"}}, WriteOptions())
    assert info.value.code == 409


def test_patch_equal_to_a_stale_state_still_writes(two: tuple[Registry, Registry, str]) -> None:
    a, b, ns = two
    a.create(CONFIGMAPS, ns, {"metadata": {"name": "y"}, "data": {"v": "1"}}, WriteOptions())
    b.patch(CONFIGMAPS, ns, "y", MERGE, {"data": {"v": "2"}}, WriteOptions())
    # {"v": "1"} is what a last saw: not a no-op, the stored value is "2"
    out = a.patch(CONFIGMAPS, ns, "y", MERGE, {"data": {"v": "1"}}, WriteOptions())
    assert out["data"] == {"v": "1"}
    assert b.get(CONFIGMAPS, ns, "y")["data"] == {"v": "1"}


def test_patch_after_delete_and_recreate(two: tuple[Registry, Registry, str]) -> None:
    a, b, ns = two
    a.create(CONFIGMAPS, ns, {"metadata": {"name": "z"}, "data": {"v": "1"}}, WriteOptions())
    b.delete(CONFIGMAPS, ns, "z", None, WriteOptions())
    with pytest.raises(APIError) as info:
        a.patch(CONFIGMAPS, ns, "z", MERGE, {"data": {"v": "2"}}, WriteOptions())
    assert info.value.code == 404
    recreated = b.create(CONFIGMAPS, ns, {"metadata": {"name": "z"}, "data": {"v": "new"}}, WriteOptions())
    out = a.patch(CONFIGMAPS, ns, "z", MERGE, {"data": {"w": "1"}}, WriteOptions())
    assert out["data"] == {"v": "new", "w": "1"}
    assert out["metadata"]["uid"] == recreated["metadata"]["uid"]


def test_concurrent_unconditional_patches_all_apply(two: tuple[Registry, Registry, str]) -> None:
    a, b, ns = two
    a.create(CONFIGMAPS, ns, {"metadata": {"name": "c"}}, WriteOptions())
    errors: list[BaseException] = []

    def writer(reg: Registry, who: str) -> None:
        try:
            for i in range(20):
                reg.patch(CONFIGMAPS, ns, "c", MERGE, {"data": {f"{who}{i}": "1"}}, WriteOptions())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(reg, who)) for reg, who in ((a, "a"), (b, "b"), (a, "c"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(a.get(CONFIGMAPS, ns, "c")["data"]) == 60  # retried like GuaranteedUpdate: no lost update
