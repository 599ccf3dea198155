"""Lists, watches and restarts over more than gRPC's default 4 MiB message, on a real etcd: the backend reads ranges
in bounded chunks, ``limit``/``continue`` read only what a page needs, and an object etcd refuses as too large is a
413, not a 500."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import EtcdBackend, EtcdProcess, TestAPIServer

from .conftest import unique

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def big_etcd(etcd_proc: EtcdProcess) -> Iterator[EtcdProcess]:
    """An etcd of this module's own (its data would weigh on every later test of the session's)."""
    with EtcdProcess(unsafe_no_fsync=True) as proc:
        yield proc


@pytest.fixture(scope="module")
def big_server(big_etcd: EtcdProcess) -> Iterator[TestAPIServer]:
    with TestAPIServer("etcd", etcd=big_etcd) as s:
        yield s


def _request(server: TestAPIServer, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _namespace(server: TestAPIServer) -> str:
    name = unique("big")
    status, body = _request(server, "/api/v1/namespaces", "POST", {"metadata": {"name": name}})
    assert status == 201, body
    return name


def _configmap(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"blob": "x" * size}}


def _fill(server: TestAPIServer, ns: str, count: int, size: int) -> list[str]:
    names = [f"cm-{i:03d}" for i in range(count)]
    for name in names:
        status, body = _request(server, f"/api/v1/namespaces/{ns}/configmaps", "POST", _configmap(name, size))
        assert status == 201, body.get("message") if isinstance(body, dict) else body
    return names


def _pages(server: TestAPIServer, ns: str, limit: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Every page of a paged list: the names in order and each page's metadata."""
    names: list[str] = []
    metas: list[dict[str, Any]] = []
    token = ""
    while True:
        query = f"limit={limit}" + (f"&continue={token}" if token else "")
        status, body = _request(server, f"/api/v1/namespaces/{ns}/configmaps?{query}")
        assert status == 200, body
        names.extend(item["metadata"]["name"] for item in body["items"])
        metas.append(body["metadata"])
        token = body["metadata"].get("continue", "")
        if not token:
            return names, metas


def _watch_added(server: TestAPIServer, ns: str, count: int, rv: str = "") -> list[str]:
    """The names of the first ``count`` events of a watch from ``rv`` (``""``: from the current state), all ADDED."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.request("GET", f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}")
        resp = conn.getresponse()
        assert resp.status == 200
        names = []
        while len(names) < count:
            event = json.loads(resp.readline())
            assert event["type"] == "ADDED", event
            names.append(event["object"]["metadata"]["name"])
        return names
    finally:
        conn.close()


def test_backend_watch_replays_past_changes_over_4_mib(big_etcd: EtcdProcess) -> None:
    """etcd replays the changes before a watch's start in one answer (here 4.9 MB), on a stream of its own."""
    backend = EtcdBackend(big_etcd.endpoint)
    try:
        prefix = f"/{unique('replay')}/"
        start = backend.revision() + 1
        for i in range(7):
            assert backend.create(f"{prefix}{i}", b"x" * 700_000).succeeded
        watch = backend.watch(prefix, start)
        keys: list[str] = []
        while len(keys) < 7:
            batch = watch.next(30)
            assert batch is not None, "no watch event within 30 s"
            keys.extend(event.kv.key for event in batch.events)
        assert keys == [f"{prefix}{i}" for i in range(7)]
        assert len(backend.range(prefix)[0]) == 7
        watch.close()
    finally:
        backend.close()


def test_seven_configmaps_of_700kb(big_server: TestAPIServer) -> None:
    """The issue's case: 4.9 MB in one namespace (over gRPC's 4 MiB) lists, pages and watches."""
    ns = _namespace(big_server)
    _, before = _request(big_server, f"/api/v1/namespaces/{ns}/configmaps")
    names = _fill(big_server, ns, 7, 700_000)
    status, body = _request(big_server, f"/api/v1/namespaces/{ns}/configmaps")
    assert status == 200, body
    assert [item["metadata"]["name"] for item in body["items"]] == names
    assert all(len(item["data"]["blob"]) == 700_000 for item in body["items"])
    paged, metas = _pages(big_server, ns, 3)
    assert paged == names
    assert [m.get("remainingItemCount") for m in metas] == [4, 1, None]
    assert len({m["resourceVersion"] for m in metas}) == 1  # every page read at the first page's revision
    assert _watch_added(big_server, ns, 7) == names
    assert _watch_added(big_server, ns, 7, before["metadata"]["resourceVersion"]) == names
    status, body = _request(big_server, "/api/v1/configmaps?limit=2")  # across namespaces too
    assert status == 200 and len(body["items"]) == 2 and body["metadata"]["continue"]


_BLOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "blobs.big.example.com"},
    "spec": {"group": "big.example.com", "scope": "Namespaced",
             "names": {"plural": "blobs", "singular": "blob", "kind": "Blob", "listKind": "BlobList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"data": {"type": "string"}}}}}]},
}


def _blob(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "big.example.com/v1", "kind": "Blob", "metadata": {"name": name}, "data": "x" * size}


def test_object_over_etcds_request_limit_is_413_and_nothing_is_lost(big_server: TestAPIServer) -> None:
    """A custom resource (no 1 MiB limit like a ConfigMap's) under the 3 MiB body limit but over etcd's 1.5 MiB."""
    status, body = _request(big_server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST", _BLOB_CRD)
    assert status in (201, 409), body
    ns = _namespace(big_server)
    path = f"/apis/big.example.com/v1/namespaces/{ns}/blobs"
    status, body = _request(big_server, path, "POST", _blob("near-limit", 1_500_000))
    assert status == 201, body  # just under etcd's default --max-request-bytes (1.5 MiB)
    status, body = _request(big_server, path, "POST", _blob("too-big", 2_000_000))
    assert (status, body["reason"], body["code"]) == (413, "RequestEntityTooLarge", 413), body
    assert "request is too large" in body["message"]
    status, body = _request(big_server, f"{path}/too-big")
    assert status == 404
    status, body = _request(big_server, f"{path}/near-limit", "PUT", _blob("near-limit", 2_000_000))
    assert status == 413, body
    status, body = _request(big_server, f"{path}/near-limit")
    assert status == 200 and len(body["data"]) == 1_500_000  # the stored object is unchanged
    for i in range(3):  # 4.5 MB of 1.5 MB objects: each page of one answer is over gRPC's old limit together
        status, body = _request(big_server, path, "POST", _blob(f"more-{i}", 1_500_000))
        assert status == 201, body
    status, body = _request(big_server, path)
    assert status == 200 and len(body["items"]) == 4, body


def test_100_mib_in_one_namespace_lists_watches_and_survives_a_restart(big_etcd: EtcdProcess,
                                                                          big_server: TestAPIServer) -> None:
    """105 ConfigMaps of 1 MB: a whole list, a paged one, a watch from the current state, then a new server on the
    same etcd (as after a restart) reading them all again."""
    ns = _namespace(big_server)
    names = _fill(big_server, ns, 105, 1_000_000)
    status, body = _request(big_server, f"/api/v1/namespaces/{ns}/configmaps")
    assert status == 200, body
    assert [item["metadata"]["name"] for item in body["items"]] == names
    del body
    paged, metas = _pages(big_server, ns, 40)
    assert paged == names and [m.get("remainingItemCount") for m in metas] == [65, 25, None]
    assert _watch_added(big_server, ns, 105) == names
    with TestAPIServer("etcd", etcd=big_etcd) as again:
        status, body = _request(again, f"/api/v1/namespaces/{ns}/configmaps")
        assert status == 200 and [item["metadata"]["name"] for item in body["items"]] == names
        del body
        status, body = _request(again, f"/api/v1/namespaces/{ns}/configmaps/{names[-1]}")
        assert status == 200 and len(body["data"]["blob"]) == 1_000_000
