"""Raw HTTP against both backends: framing, keep-alive, content types, discovery and edge cases."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import unique
from .pb import encode_configmap


class Conn:
    """One keep-alive HTTP/1.1 connection with JSON helpers."""

    def __init__(self, port: int) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def request(self, method: str, path: str, body: bytes | str | dict[str, Any] | list[Any] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any, http.client.HTTPResponse]:
        hdrs = dict(headers or {})
        raw: bytes | None
        if isinstance(body, dict | list):
            raw = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            raw = body.encode()
        else:
            raw = body
        self.http.request(method, path, body=raw, headers=hdrs)
        resp = self.http.getresponse()
        data = resp.read()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (json.loads(data) if ctype.startswith("application/json") and data else data), resp

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def conn(server: TestAPIServer) -> Iterator[Conn]:
    c = Conn(server.port)
    yield c
    c.close()


@pytest.fixture
def hns(conn: Conn) -> Iterator[str]:
    name = unique("hns")
    status, _, _ = conn.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201
    yield name
    conn.request("DELETE", f"/api/v1/namespaces/{name}")


def test_discovery_documents(conn: Conn) -> None:
    status, version, _ = conn.request("GET", "/version?timeout=5s")
    assert status == 200 and version["major"] == "1"
    status, api, _ = conn.request("GET", "/api")
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    status, apis, _ = conn.request("GET", "/apis")
    assert apis["kind"] == "APIGroupList"
    status, resources, _ = conn.request("GET", "/api/v1")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["configmaps"]["namespaced"] is True and by_name["configmaps"]["shortNames"] == ["cm"]
    assert by_name["namespaces"]["namespaced"] is False
    assert "watch" in by_name["configmaps"]["verbs"]
    status, root, _ = conn.request("GET", "/openapi/v3")
    url = root["paths"]["api/v1"]["serverRelativeURL"]
    status, doc, _ = conn.request("GET", url)
    assert status == 200
    patch_ops = [p["patch"] for p in doc["paths"].values() if "patch" in p]
    cm_patch = next(op for op in patch_ops if op["x-kubernetes-group-version-kind"]["kind"] == "ConfigMap")
    assert {p["name"] for p in cm_patch["parameters"]} >= {"fieldValidation", "dryRun", "fieldManager"}
    assert "io.k8s.api.core.v1.ConfigMap" in doc["components"]["schemas"]
    status, body, _ = conn.request("GET", "/healthz")
    assert (status, body) == (200, b"ok")


def test_unknown_paths_and_methods(conn: Conn) -> None:
    for path in ("/apis/storage.k8s.io/v1", "/api/v1/nodes", "/api/v1/namespaces/default/configmapz", "/nope"):
        status, body, _ = conn.request("GET", path)
        assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound", path
    status, body, _ = conn.request("PUT", "/api/v1/namespaces/default/configmaps")
    assert status == 405 and body["reason"] == "MethodNotAllowed"


def test_delete_body_is_consumed_on_keep_alive(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    for i in range(3):
        assert conn.request("POST", base, {"metadata": {"name": f"k{i}"}})[0] == 201
    sock = conn.http.sock
    for i in range(3):
        status, body, _ = conn.request("DELETE", f"{base}/k{i}", {"propagationPolicy": "Background"})
        assert status == 200 and body["status"] == "Success"
        status, body, _ = conn.request("GET", base)
        assert status == 200 and len(body["items"]) == 2 - i
    assert conn.http.sock is sock  # every request went over the same connection


def test_chunked_request_body(conn: Conn, hns: str) -> None:
    payload = json.dumps({"metadata": {"name": "chunky"}, "data": {"a": "1"}}).encode()
    conn.http.putrequest("POST", f"/api/v1/namespaces/{hns}/configmaps")
    conn.http.putheader("Content-Type", "application/json")
    conn.http.putheader("Transfer-Encoding", "chunked")
    conn.http.endheaders()
    for part in (payload[:10], payload[10:]):
        conn.http.send(b"%x\r\n%s\r\n" % (len(part), part))
    conn.http.send(b"0\r\n\r\n")
    resp = conn.http.getresponse()
    assert resp.status == 201 and json.loads(resp.read())["data"] == {"a": "1"}


def test_field_validation_modes(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    body = {"metadata": {"name": "fv", "bogus": 1}, "data": {"a": "1"}, "extra": True}
    status, out, _ = conn.request("POST", base + "?fieldValidation=Strict", body)
    assert status == 400
    assert 'unknown field "metadata.bogus"' in out["message"] and 'unknown field "extra"' in out["message"]
    status, out, resp = conn.request("POST", base + "?fieldManager=t", body)  # default: Warn
    assert status == 201 and "extra" not in out
    assert 'unknown field \\"extra\\"' in (resp.getheader("Warning") or "")
    status, out, resp = conn.request("PUT", base + "/fv?fieldValidation=Ignore", {**body, "data": {"a": "2"}})
    assert status == 200 and out["data"] == {"a": "2"} and resp.getheader("Warning") is None
    status, out, _ = conn.request("POST", base + "?fieldValidation=Bogus", body)
    assert status == 400


def test_wrong_types_and_malformed_bodies(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    status, out, _ = conn.request("POST", base, {"metadata": {"name": "t"}, "data": {"n": 1}})
    assert status == 400 and out["reason"] == "BadRequest"
    status, out, _ = conn.request("POST", base, b"{not json", {"Content-Type": "application/json"})
    assert status == 400
    status, out, _ = conn.request("POST", base, {"kind": "Secret", "metadata": {"name": "t"}})
    assert status == 400
    status, out, _ = conn.request("POST", base, {"metadata": {"name": "t", "namespace": "elsewhere"}})
    assert status == 400 and "does not match the namespace" in out["message"]
    status, out, _ = conn.request("POST", base, "a: b", {"Content-Type": "text/plain"})
    assert status == 415 and out["reason"] == "UnsupportedMediaType"
    status, out, _ = conn.request("PATCH", base + "/t", "x", {"Content-Type": "application/apply-patch+yaml"})
    assert status == 422 and "fieldManager: Required value" in out["message"]
    status, out, _ = conn.request("PATCH", base + "/t?fieldManager=m", "x",
                                  {"Content-Type": "application/apply-patch+yaml"})
    assert status == 400 and out["message"].startswith("error decoding YAML")


def test_table_output(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    conn.request("POST", base, {"metadata": {"name": "tab"}, "data": {"a": "1", "b": "2"}})
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    status, table, _ = conn.request("GET", base, headers=accept)
    assert status == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["cells"][:2] == ["tab", 2]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    status, table, _ = conn.request("GET", base + "/tab", headers=accept)
    assert table["kind"] == "Table" and len(table["rows"]) == 1
    status, table, _ = conn.request("GET", "/api/v1/namespaces", headers=accept)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]


def test_protobuf_create(conn: Conn, hns: str) -> None:
    body = encode_configmap(name="pb", namespace="", data={"a": "1"}, labels={"x": "y"})
    status, out, _ = conn.request(
        "POST", f"/api/v1/namespaces/{hns}/configmaps?fieldManager=kubectl-create&fieldValidation=Strict", body,
        {"Content-Type": "application/vnd.kubernetes.protobuf",
         "Accept": "application/vnd.kubernetes.protobuf,application/json"},
    )
    assert status == 201, out
    assert out["metadata"]["namespace"] == hns and out["data"] == {"a": "1"}
    assert out["metadata"]["labels"] == {"x": "y"} and "generation" not in out["metadata"]


def test_watch_stream_framing_and_send_initial_events(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    conn.request("POST", base, {"metadata": {"name": "one"}})
    conn.request("POST", base, {"metadata": {"name": "two"}})
    # legacy /watch/ path, one object by name, initial events ended by a bookmark
    conn.http.request("GET", f"/api/v1/watch/namespaces/{hns}/configmaps/one?sendInitialEvents=true"
                             "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    resp = conn.http.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    lines = [json.loads(line) for line in resp.read().splitlines()]  # read() returns: the stream ended cleanly
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in lines[:2]] == [("ADDED", "one"),
                                                                                     ("BOOKMARK", None)]
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert {e["type"] for e in lines[2:]} <= {"BOOKMARK"}
    # the keep-alive connection is still usable after the watch ended
    assert conn.request("GET", base + "/one")[0] == 200


def test_list_resource_version_rules(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    _, listed, _ = conn.request("GET", base)
    rv = int(listed["metadata"]["resourceVersion"])
    assert conn.request("GET", base + f"?resourceVersion={rv}&resourceVersionMatch=NotOlderThan")[0] == 200
    status, out, _ = conn.request("GET", base + f"?resourceVersion={rv + 1000}&resourceVersionMatch=NotOlderThan")
    assert status == 504 and out["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    assert conn.request("GET", base + "?resourceVersion=abc")[0] == 400
    assert conn.request("GET", base + "?resourceVersionMatch=Exact")[0] == 400
    assert conn.request("GET", base + "?labelSelector=a%20in%20(")[0] == 400
    assert conn.request("GET", base + "?continue=garbage")[0] == 400


def test_namespace_crud(conn: Conn) -> None:
    name = unique("nsx")
    status, out, _ = conn.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201 and out["status"]["phase"] == "Active"
    status, out, _ = conn.request("POST", "/api/v1/namespaces", {"metadata": {"name": "Not.A.Label"}})
    assert status == 422
    status, out, _ = conn.request("PATCH", f"/api/v1/namespaces/{name}", {"metadata": {"labels": {"a": "b"}}},
                                  {"Content-Type": "application/merge-patch+json"})
    assert status == 200 and out["metadata"]["labels"]["a"] == "b"
    assert out["metadata"]["labels"]["kubernetes.io/metadata.name"] == name
    status, out, _ = conn.request("DELETE", f"/api/v1/namespaces/{name}")
    assert status == 200
    assert conn.request("GET", f"/api/v1/namespaces/{name}")[0] == 404


def test_delete_collection(conn: Conn, hns: str) -> None:
    base = f"/api/v1/namespaces/{hns}/configmaps"
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        conn.request("POST", base, {"metadata": {"name": name, "labels": {"app": app}}})
    status, out, _ = conn.request("DELETE", base + "?labelSelector=app%3Dx")
    assert status == 200 and sorted(i["metadata"]["name"] for i in out["items"]) == ["a", "b"]
    _, listed, _ = conn.request("GET", base)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["c"]


def test_connections_have_tcp_nodelay(server: TestAPIServer, conn: Conn) -> None:
    """Every accepted connection has TCP_NODELAY set (else delayed ACKs add ~40 ms to small requests)."""
    import socket

    assert conn.request("GET", "/version")[0] == 200  # the connection is open (keep-alive) and tracked now
    httpd = server.server._http
    assert httpd is not None
    assert conn.http.sock is not None
    ours = conn.http.sock.getsockname()  # the server side of this connection has it as its peer: other tests'
    # connections on the shared server may close meanwhile, so only this one is looked at
    socks = [s for s in httpd.connection_sockets() if s.fileno() != -1 and _peer(s) == ours]
    assert len(socks) == 1, "this connection is not tracked"
    assert socks[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def _peer(s: Any) -> Any:
    try:
        return s.getpeername()
    except OSError:  # closed by now
        return None
