"""What must hold for the API server's HTTP layer: nothing a client sends can exhaust the server,
and every client error is a 4xx ``Status``."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue._httpserver import HTTPLimits
from keyqueue.apiserver import TestAPIServer

from .conftest import unique
from .test_http import Conn


@pytest.fixture
def conn(server: TestAPIServer) -> Iterator[Conn]:
    c = Conn(server.port)
    yield c
    c.close()


def _open_watches(server: TestAPIServer) -> tuple[int, int]:
    """(registry watches, backend watches) open now."""
    backend: Any = server.backend
    return len(server.registry._watches), len(backend._watches)


def _wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


# -- 1: a watch with invalid parameters opens nothing -------------------------------------------------------------

BAD_WATCH_QUERIES = [
    "timeoutSeconds=abc", "timeoutSeconds=-1", "timeoutSeconds=" + "9" * 40, "timeoutSeconds=1e400",
    "resourceVersion=abc", "resourceVersion=-5", "resourceVersion=9223372036854775807",
    "resourceVersion=" + "9" * 400, "labelSelector=a%20in%20(", "fieldSelector=spec.bogus%3D1",
    "sendInitialEvents=maybe",
]


def test_invalid_watch_parameters_are_refused_before_anything_opens(server: TestAPIServer, conn: Conn) -> None:
    assert conn.request("GET", "/api/v1/namespaces/default/configmaps")[0] == 200  # the storage pool has a thread
    gc: Any = server.server._gc
    assert _wait_for(lambda: gc._watch is not None)  # and the garbage collector's watch (its thread) is open
    before_watches = _open_watches(server)
    before_threads = threading.active_count()
    for i in range(30):
        query = BAD_WATCH_QUERIES[i % len(BAD_WATCH_QUERIES)]
        status, body, _ = conn.request("GET", f"/api/v1/namespaces/default/configmaps?watch=true&{query}")
        assert status == 400, (query, status, body)
        assert body["kind"] == "Status" and body["reason"] == "BadRequest", query
    assert _open_watches(server) == before_watches
    assert threading.active_count() == before_threads
    # control: the counters do see an open watch
    control = Conn(server.port)
    control.http.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=30")
    resp = control.http.getresponse()
    assert resp.status == 200
    assert _wait_for(lambda: _open_watches(server)[0] == before_watches[0] + 1)
    control.close()
    assert _wait_for(lambda: _open_watches(server) == before_watches)


# -- 3: body limits hold for chunked bodies, as the body arrives --------------------------------------------------

def _raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def _read_status(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    line = data.split(b"\r\n", 1)[0]
    return int(line.split()[1]), data


def _send_in_background(sock: socket.socket, head: bytes, chunk_header: bytes, total: int) -> threading.Thread:
    def send() -> None:
        try:
            sock.sendall(head + chunk_header)
            block = b"x" * 65536
            sent = 0
            while sent < total:
                sock.sendall(block)
                sent += len(block)
        except OSError:
            pass  # the server closed the connection after its 413: expected

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def test_one_huge_chunk_is_refused_after_the_limit(server: TestAPIServer) -> None:
    sock = _raw(server.port)
    head = (b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    sender = _send_in_background(sock, head, b"6400000\r\n", 100 * 1024 * 1024)  # one chunk of 100 MiB
    status, data = _read_status(sock)
    assert status == 413 and b'"RequestEntityTooLarge"' in data
    sock.close()
    sender.join(10)


@pytest.mark.parametrize("separately", [False, True])
def test_a_chunk_declared_above_the_limit_is_refused_at_once(server: TestAPIServer, separately: bool) -> None:
    """A first chunk declared as 2^44 bytes, and then nothing: 413 without waiting for the body deadline (60 s;
    the socket's timeout, 10 s, is the bound). Sent with the head, or as a write of its own after it."""
    sock = _raw(server.port)
    head = (b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    chunk_line = b"%x\r\n" % 2**44
    if separately:
        sock.sendall(head)
        sock.sendall(chunk_line)
    else:
        sock.sendall(head + chunk_line)
    status, data = _read_status(sock)
    assert status == 413 and b'"RequestEntityTooLarge"' in data
    sock.close()


def test_content_length_above_the_limit_is_refused_at_once(server: TestAPIServer) -> None:
    sock = _raw(server.port)
    sock.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n")
    status, data = _read_status(sock)
    assert status == 413 and b'"kind":"Status"' in data
    sock.close()


def test_many_one_byte_chunks_are_parsed(server: TestAPIServer) -> None:
    """64 k one-byte chunks: parsed by llhttp in linear time; the body (65 536 spaces + JSON) is accepted."""
    name = unique("tiny")
    payload = b" " * 65536 + json.dumps({"metadata": {"name": name}}).encode()
    chunks = b"".join(b"1\r\n%c\r\n" % b for b in payload) + b"0\r\n\r\n"
    sock = _raw(server.port)
    sock.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
    status, _ = _read_status(sock)
    assert status == 201
    sock.close()


def test_chunked_body_just_under_the_limit_is_accepted_and_over_is_not(server: TestAPIServer) -> None:
    limit = server.server.limits.max_body
    for size, want in ((limit - 200, 201), (limit + 1, 413)):
        name = unique("big")
        body = json.dumps({"metadata": {"name": name}, "data": {"k": ""}}, separators=(",", ":")).encode()
        body = body.replace(b'"k":""', b'"k":"' + b"v" * (size - len(body)) + b'"')
        assert len(body) == size
        sock = _raw(server.port)
        half = len(body) // 2
        sock.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n%s\r\n" % (half, body[:half]) + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - half,
                                                                                          body[half:]))
        status, data = _read_status(sock)
        assert status in (want, 422) if want == 201 else status == want, data[:300]
        sock.close()


# -- 4: slowloris, idle connections, the connection limit ---------------------------------------------------------

def _healthz_ms(port: int) -> float:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    t0 = time.perf_counter()
    c.request("GET", "/healthz")
    resp = c.getresponse()
    assert resp.status == 200 and resp.read() == b"ok"
    elapsed = (time.perf_counter() - t0) * 1000
    c.close()
    return elapsed


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_slowloris_and_idle_connections_do_not_exhaust_the_server() -> None:
    # 6 s: opening the 2,000 sockets must take less than the header timeout, or the first ones are closed before
    # the count below can reach 2,000 (2 s was too short on a loaded machine)
    limits = HTTPLimits(header_timeout=6.0, max_connections=2500)
    with TestAPIServer("memory", limits=limits) as s:
        socks: list[socket.socket] = []
        try:
            for i in range(1000):  # slowloris: a request line and a header that never ends
                sock = socket.create_connection(("127.0.0.1", s.port))
                sock.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow-%d: a" % i)
                socks.append(sock)
            for _ in range(1000):  # idle: connected, never a byte
                socks.append(socket.create_connection(("127.0.0.1", s.port)))
            assert _wait_for(lambda: s.server.open_connections >= 2000)
            samples = sorted(_healthz_ms(s.port) for _ in range(20))
            print(f"/healthz with 2000 hostile connections open: median {samples[10]:.2f} ms, "
                  f"max {samples[-1]:.2f} ms")
            # the server closes every one of them once the header timeout has passed
            assert _wait_for(lambda: s.server.open_connections <= 1, timeout=30)
            assert all(_closed_by_peer(sock) for sock in socks)
        finally:
            for sock in socks:
                sock.close()


def test_connections_beyond_the_limit_are_closed_and_the_rest_keep_working() -> None:
    with TestAPIServer("memory", limits=HTTPLimits(max_connections=5)) as s:
        held = [Conn(s.port) for _ in range(5)]
        try:
            for c in held:
                assert c.request("GET", "/version")[0] == 200
            extra = socket.create_connection(("127.0.0.1", s.port))
            extra.settimeout(10)
            try:
                extra.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
                assert extra.recv(100) == b""  # closed without an answer
            except ConnectionResetError:
                pass
            finally:
                extra.close()
            assert s.server._http is not None and s.server._http.refused_connections >= 1
            for c in held:  # the connections within the limit are untouched
                assert c.request("GET", "/version")[0] == 200
        finally:
            for c in held:
                c.close()
        assert _wait_for(lambda: s.server.open_connections == 0)
        c = Conn(s.port)  # a slot is free again
        assert c.request("GET", "/healthz")[0] == 200
        c.close()


def test_a_body_that_stops_arriving_gets_408() -> None:
    with TestAPIServer("memory", limits=HTTPLimits(body_timeout=0.5)) as s:
        sock = _raw(s.port)
        sock.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"metadata\":")
        status, data = _read_status(sock)
        assert status == 408 and b'"kind":"Status"' in data
        sock.close()


# -- 5: every client error is a 4xx Status ------------------------------------------------------------------------

def _deep(n: int) -> bytes:
    return b'{"metadata":{"name":"deep"},"data":' + b'{"a":' * n + b"1" + b"}" * n + b"}"


CLIENT_ERRORS: list[tuple[str, str, bytes | None, dict[str, str], set[int]]] = [
    ("GET", "/api/v1/watch", None, {}, {404}),
    ("GET", "/api/v1/watch/", None, {}, {404}),
    ("GET", "/apis/nope/v1/things", None, {}, {404}),
    ("POST", "/api/v1/namespaces/default/configmaps", _deep(990), {"Content-Type": "application/json"}, {400}),
    ("POST", "/api/v1/namespaces/default/configmaps", _deep(100_000), {"Content-Type": "application/json"}, {400}),
    ("PATCH", "/api/v1/namespaces/default/configmaps/x", b'{"data":' + b"[" * 5000 + b"]" * 5000 + b"}",
     {"Content-Type": "application/merge-patch+json"}, {400}),
    ("POST", "/api/v1/namespaces/default/configmaps", b'{"metadata":{"name":"s"},"data":{"a":"\\ud800"}}',
     {"Content-Type": "application/json"}, {400}),
    ("POST", "/api/v1/namespaces/default/configmaps", b'{"metadata":{"name":"s","generation":1e400}}',
     {"Content-Type": "application/json"}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?resourceVersion=9223372036854775807", None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?resourceVersion=99999999999999999999", None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?resourceVersion=9223372036854775807&watch=1", None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?limit=1&continue="
     "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MWU0MDAsInN0YXJ0IjoiYSJ9", None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?limit=abc", None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?limit=" + "9" * 30, None, {}, {400}),
    ("GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=" + "9" * 400, None, {}, {400}),
    ("DELETE", "/api/v1/namespaces/default/configmaps/x", b"[" * 5000, {"Content-Type": "application/json"}, {400}),
    ("FOO", "/api/v1/namespaces", None, {}, {400, 405}),
    ("OPTIONS", "/api/v1/namespaces", None, {}, {405}),
]


@pytest.mark.parametrize("method,path,body,headers,codes", CLIENT_ERRORS,
                         ids=[f"{m} {p[:60]}" for m, p, *_ in CLIENT_ERRORS])
def test_client_errors_are_4xx_status(server: TestAPIServer, method: str, path: str, body: bytes | None,
                                      headers: dict[str, str], codes: set[int]) -> None:
    sock = _raw(server.port)
    hdrs = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = body or b""
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n{hdrs}Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
        if length and len(rest) >= length[0]:
            break
    sock.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    assert status in codes, (status, rest[:300])
    status_obj = json.loads(rest)
    assert status_obj["kind"] == "Status" and status_obj["code"] == status and status_obj["status"] == "Failure"


def test_non_ascii_bearer_token_is_401() -> None:
    with TestAPIServer("memory", token="secret") as s:
        sock = _raw(s.port)
        sock.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xc3\xa9t\xc3\xa9\r\n\r\n")
        status, data = _read_status(sock)
        assert status == 401 and b'"Unauthorized"' in data
        sock.close()
        c = Conn(s.port)
        assert c.request("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer secret"})[0] == 200
        c.close()


def test_int64_fields_are_range_checked(conn: Conn) -> None:
    base = "/api/v1/namespaces/default/configmaps"
    name = unique("gen")
    status, out, _ = conn.request("POST", base, {"metadata": {"name": name, "generation": 10**400}})
    assert status == 422 and out["reason"] == "Invalid"
    assert out["details"]["causes"][0]["field"] == "metadata.generation"
    status, out, _ = conn.request("POST", base, {"metadata": {"name": name, "generation": 2**63 - 1}})
    assert status == 201
    assert out["metadata"]["generation"] == 2**63 - 1
    status, listed, _ = conn.request("GET", base)  # the namespace still lists
    assert status == 200 and any(i["metadata"]["name"] == name for i in listed["items"])
    conn.request("DELETE", f"{base}/{name}")


# -- 2: a watcher that stops reading has a bounded buffer, then its watch ends ------------------------------------

def test_a_watcher_that_stops_reading_is_ended_and_a_reading_one_is_not(collect: Any) -> None:
    from kubernetes import client

    from keyqueue.apiserver.objects import CONFIGMAPS
    from keyqueue.apiserver.registry import WriteOptions

    with TestAPIServer("memory", watch_buffer=200) as s:
        reg = s.registry
        reg.create(CONFIGMAPS, "default", {"metadata": {"name": "big"}, "data": {"v": ""}}, WriteOptions())
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", s.port))
        stuck.sendall(b"GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1 HTTP/1.1\r\n"
                      b"Host: x\r\n\r\n")
        api_client = s.api_client()
        reader = collect(client.CoreV1Api(api_client).list_namespaced_config_map, "default",
                         resource_version=str(s.backend.revision()), timeout_seconds=120)
        assert _wait_for(lambda: len(reg._watches) == 2)
        backend: Any = s.backend
        assert sum(1 for w in list(backend._watches) if w.max_pending == 200) == 2  # the stuck one and the reader
        value = "x" * 4096
        writes = 5000
        for i in range(writes):
            reg.update(CONFIGMAPS, "default", "big", {"metadata": {"name": "big"}, "data": {"v": f"{i}{value}"}},
                       WriteOptions())
            # no backend queue ever holds more than its buffer (+ the error that ends it): the two clients' 200, the
            # garbage collector's own watch the default (under load it may be well over 200 behind, legitimately)
            assert all(w.queue.qsize() <= w.max_pending + 1 for w in list(backend._watches))
            if i % 100 == 99:  # pace the writer to the reading client (it parses 4 KiB per event in Python)
                want = i + 1
                got = 0
                while got < want:
                    event = reader.next(10)
                    if event["type"] == "MODIFIED":
                        got = int(event["object"].data["v"][: -len(value)]) + 1
        assert _wait_for(lambda: len(reg._watches) == 1), "the stuck watch was not ended"
        # the stuck client sees its stream cut (after what was buffered), the reading one is still open
        stuck.settimeout(10)
        received = 0
        while True:
            try:
                chunk = stuck.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += len(chunk)
        assert received < writes * 4096 / 2, "the stuck watcher got (nearly) everything: nothing was bounded"
        stuck.close()
        assert len(reg._watches) == 1 and not reader.done.is_set()
        api_client.close()



# -- 9 (server side): /readyz fails while etcd is unreachable -----------------------------------------------------

@pytest.mark.etcd
def test_readyz_fails_while_etcd_is_unreachable(etcd_proc: Any) -> None:
    from keyqueue.apiserver import EtcdProcess

    del etcd_proc  # only for the skip when there is no etcd binary
    with EtcdProcess() as etcd, TestAPIServer("etcd", etcd=etcd) as s:
        c = Conn(s.port)
        assert c.request("GET", "/readyz")[:2] == (200, b"ok")
        etcd.stop()
        status, body, _ = c.request("GET", "/readyz")
        assert status == 503 and b"storage failed" in body
        assert c.request("GET", "/healthz")[0] == 200  # the process itself is alive
        c.close()


# -- 6: namespace deletion goes through Terminating and leaves no orphans -----------------------------------------

def test_create_in_a_terminating_namespace_is_403(server: TestAPIServer, conn: Conn) -> None:
    from keyqueue.apiserver.objects import NAMESPACES

    ns = unique("term")
    assert conn.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    reg = server.registry
    key = reg.key(NAMESPACES, None, ns)
    kv, _ = reg.backend.get(key)
    assert kv is not None
    obj = json.loads(kv.value)
    obj["status"]["phase"] = "Terminating"  # what a delete in progress has written
    assert reg.backend.update(key, json.dumps(obj).encode(), kv.mod_revision).succeeded
    status, out, _ = conn.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "late"}})
    assert status == 403 and out["reason"] == "Forbidden"
    assert out["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    assert conn.request("DELETE", f"/api/v1/namespaces/{ns}")[0] == 200  # a delete that was cut short completes
    assert conn.request("GET", f"/api/v1/namespaces/{ns}")[0] == 404


def test_namespace_delete_is_seen_as_terminating_then_deleted(server: TestAPIServer, conn: Conn) -> None:
    ns = unique("seen")
    status, created, _ = conn.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert status == 201
    conn.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "c"}})
    watcher = Conn(server.port)
    rv = created["metadata"]["resourceVersion"]
    watcher.http.request("GET", f"/api/v1/namespaces?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3D{ns}"
                                "&timeoutSeconds=2")
    resp = watcher.http.getresponse()
    assert conn.request("DELETE", f"/api/v1/namespaces/{ns}")[0] == 200
    events = [json.loads(line) for line in resp.read().splitlines()]
    watcher.close()
    phases = [(e["type"], e["object"].get("status", {}).get("phase")) for e in events if e["type"] != "BOOKMARK"]
    assert phases == [("MODIFIED", "Terminating"), ("DELETED", "Terminating")]


def test_concurrent_creates_leave_no_orphans_across_namespace_delete_rounds(server: TestAPIServer) -> None:
    from keyqueue.apiserver.errors import APIError
    from keyqueue.apiserver.objects import CONFIGMAPS, NAMESPACES
    from keyqueue.apiserver.registry import WriteOptions

    reg = server.registry
    ns = unique("orph")
    rounds = 200 if not server.backend.blocking else 40
    stop = threading.Event()
    created = [0]

    def creator(tag: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                reg.create(CONFIGMAPS, ns, {"metadata": {"name": f"c{tag}-{i}"}}, WriteOptions())
                created[0] += 1
            except APIError as exc:
                assert exc.code in (403, 404), exc.status()

    threads = [threading.Thread(target=creator, args=(t,), daemon=True) for t in range(3)]
    for t in threads:
        t.start()
    orphans = 0
    try:
        for _ in range(rounds):
            reg.create(NAMESPACES, None, {"metadata": {"name": ns}}, WriteOptions())
            before = created[0]
            _wait_for(lambda before=before: created[0] > before, timeout=2)  # creates are landing in it now
            reg.delete(NAMESPACES, None, ns, None, WriteOptions())
            kvs, _ = reg.backend.range(reg.collection_prefix(CONFIGMAPS, ns))
            orphans += len(kvs)
            for kv in kvs:  # clean up, so that one orphan is counted once
                reg.backend.delete(kv.key, kv.mod_revision)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert created[0] > 0, "the creators never got a create in: the test exercised nothing"
    assert orphans == 0
