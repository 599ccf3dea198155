"""The informer against a scripted HTTP server: behaviours the real test server does not produce on demand
(a stream that goes silent, 410 as an HTTP status, a non-410 ERROR event, paged lists)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from keyqueue.informer import Backoff, Informer
from tests.informer.conftest import WAIT, Recorder, wait_until

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402


def cm(name: str, rv: int, ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}, "data": {"rv": str(rv)}}


class Script:
    """What the scripted server answers. ``watches`` is consumed one entry per watch request:
    ``("silent",)`` headers then nothing, ``("status", code)`` an HTTP error, ``("events", [event, ...])`` the
    events then a normal end. With nothing scripted, a watch is held open (silent) until the server closes."""

    def __init__(self, items: list[dict[str, Any]], rv: int) -> None:
        self.items = items
        self.rv = rv
        self.watches: list[tuple[Any, ...]] = []
        self.requests: list[dict[str, list[str]]] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()

    def watch_requests(self) -> list[dict[str, list[str]]]:
        with self.lock:
            return [q for q in self.requests if q.get("watch") == ["true"]]

    def list_requests(self) -> list[dict[str, list[str]]]:
        with self.lock:
            return [q for q in self.requests if q.get("watch") != ["true"]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:
        script = self.server.script
        query = parse_qs(urlsplit(self.path).query)
        with script.lock:
            script.requests.append(query)
            action = script.watches.pop(0) if query.get("watch") == ["true"] and script.watches else None
        if query.get("watch") != ["true"]:
            items = script.items
            start = int(query.get("continue", ["0"])[0])
            limit = int(query.get("limit", [str(len(items) or 1)])[0])
            page = items[start:start + limit]
            meta: dict[str, Any] = {"resourceVersion": str(script.rv)}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            self._json(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta, "items": page})
            return
        if action is not None and action[0] == "status":
            self._json(action[1], {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": action[1],
                                   "reason": "Expired" if action[1] == 410 else "InternalError", "message": "x"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if action is not None and action[0] == "events":
            for event in action[1]:
                self._chunk(json.dumps(event).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        script.closing.wait(30)  # silent: say nothing until the test ends
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Script) -> None:
        self.script = script
        super().__init__(("127.0.0.1", 0), _Handler)


@pytest.fixture
def scripted() -> Iterator[tuple[Script, Any]]:
    script = Script([cm("a", 5), cm("b", 6)], rv=7)
    server = _Server(script)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    conf = client.Configuration()
    conf.host = f"http://127.0.0.1:{server.server_address[1]}"
    api_client = client.ApiClient(conf)
    yield script, client.CoreV1Api(api_client).list_namespaced_config_map
    script.closing.set()
    server.shutdown()
    server.server_close()
    thread.join(5)
    api_client.close()


def start(list_func: Any, rec: Recorder | None = None, **options: Any) -> Informer:
    options.setdefault("backoff", Backoff(initial=0.01, cap=0.05, jitter=0))
    informer = Informer(list_func, {"namespace": "default"}, **options)
    if rec is not None:
        rec.register(informer)
    informer.start()
    assert informer.wait_for_cache_sync(WAIT)
    return informer


def test_silent_stream_is_noticed_by_the_read_timeout(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    script.watches = [("silent",)]
    informer = start(list_func, read_timeout=0.2)
    try:
        wait_until(lambda: len(script.watch_requests()) >= 2, what="a second watch after the read timeout")
        stats = informer.stats()
        assert stats.watch_errors >= 1 and stats.lists == 1  # re-watched from the last RV, no relist
        assert script.watch_requests()[1]["resourceVersion"] == ["7"]
    finally:
        assert informer.stop(WAIT)


def test_watch_asks_for_bookmarks_timeout_and_resumes_from_the_bookmark(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    bookmark = {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "42"}}}
    script.watches = [("events", [bookmark])]
    informer = start(list_func, watch_timeout=60)
    try:
        wait_until(lambda: len(script.watch_requests()) >= 2, what="the re-watch")
        first, second = script.watch_requests()[:2]
        assert first["allowWatchBookmarks"] == ["true"] and first["resourceVersion"] == ["7"]
        assert 60 <= int(first["timeoutSeconds"][0]) <= 75
        assert second["resourceVersion"] == ["42"]  # the bookmark advanced the resourceVersion
        stats = informer.stats()
        assert stats.bookmarks == 1 and stats.watch_ends == 1 and stats.lists == 1
    finally:
        assert informer.stop(WAIT)


def test_http_410_at_watch_start_relists(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    script.watches = [("status", 410)]
    rec = Recorder()
    informer = start(list_func, rec)
    try:
        script.items = [cm("b", 6)]  # "a" vanished while the informer was not watching
        script.rv = 9
        rec.wait_for(lambda ev: any(e[0] == "tombstone" for e in ev))
        assert [e[1] for e in rec.of("tombstone")] == ["default/a"]
        stats = informer.stats()
        assert stats.gone == 1 and stats.lists == 2
        assert informer.store.list_keys() == ["default/b"]
        assert informer.last_sync_resource_version() == "9"
    finally:
        assert informer.stop(WAIT)


def test_error_event_other_than_410_rewatches_without_relist(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "x"}}
    script.watches = [("events", [error]), ("status", 503)]
    informer = start(list_func)
    try:
        wait_until(lambda: len(script.watch_requests()) >= 3, what="two re-watches")
        stats = informer.stats()
        assert stats.watch_errors >= 2 and stats.lists == 1 and stats.gone == 0
    finally:
        assert informer.stop(WAIT)


def test_paged_list(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    script.items = [cm(f"p{i}", 10 + i) for i in range(5)]
    script.rv = 20
    rec = Recorder()
    informer = start(list_func, rec, page_size=2)
    try:
        lists = script.list_requests()
        assert [q.get("limit") for q in lists] == [["2"]] * 3
        assert [q.get("continue") for q in lists] == [None, ["2"], ["4"]]
        assert sorted(e[1] for e in rec.of("add")) == [f"default/p{i}" for i in range(5)]
        assert informer.last_sync_resource_version() == "20"
    finally:
        assert informer.stop(WAIT)


def test_events_apply_in_order_including_unknown_and_malformed(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    script.watches = [("events", [
        {"type": "MODIFIED", "object": cm("a", 8)},
        {"type": "WEIRD", "object": cm("a", 9)},
        {"type": "ADDED"},
        {"type": "DELETED", "object": cm("b", 10)},
        {"type": "ADDED", "object": cm("c", 11)},
    ])]
    rec = Recorder()
    informer = start(list_func, rec)
    try:
        rec.wait_for(lambda ev: any(e[1] == "default/c" for e in ev))
        assert rec.events[2:] == [("update", "default/a", "5", "8"), ("delete", "default/b", "10"),
                                  ("add", "default/c", "11")]
        assert informer.last_sync_resource_version() == "11"
    finally:
        assert informer.stop(WAIT)


def test_stop_from_a_handler_is_refused(scripted: tuple[Script, Any]) -> None:
    _, list_func = scripted
    errors: list[BaseException] = []
    informer = Informer(list_func, {"namespace": "default"})

    def on_add(obj: dict[str, Any]) -> None:
        try:
            informer.stop()
        except RuntimeError as exc:
            errors.append(exc)

    informer.add_event_handler(on_add=on_add)
    informer.start()
    try:
        assert informer.wait_for_cache_sync(WAIT)
        assert len(errors) == 2 and "own thread" in str(errors[0])
    finally:
        assert informer.stop(WAIT)


def test_constructor_validation() -> None:
    def lister(**kwargs: Any) -> None:
        return None

    with pytest.raises(TypeError, match="list_func must be callable"):
        Informer(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not set 'watch'"):
        Informer(lister, {"watch": True})
    with pytest.raises(ValueError, match="watch_timeout"):
        Informer(lister, watch_timeout=0)
    with pytest.raises(ValueError, match="read_timeout"):
        Informer(lister, read_timeout=float("nan"))
    with pytest.raises(ValueError, match="resync_period"):
        Informer(lister, resync_period=-1)
    with pytest.raises(ValueError, match="page_size"):
        Informer(lister, page_size=-1)
    informer = Informer(lister)
    with pytest.raises(TypeError, match="on_add must be callable"):
        informer.add_event_handler(on_add="nope")  # type: ignore[arg-type]
    assert not informer.wait_for_cache_sync(0.01)  # not started: times out
    informer.stop()  # never started: nothing to join
    assert not informer.wait_for_cache_sync(1.0)  # stopped: returns at once


def test_backoff_sequence_cap_and_reset() -> None:
    b = Backoff(initial=0.1, cap=0.5, factor=2.0, jitter=0.0)
    assert [round(b.next(), 6) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    b.reset()
    assert b.next() == pytest.approx(0.1)
    import random

    jittered = Backoff(initial=1.0, cap=1.0, jitter=1.0, rng=random.Random(7))
    delays = [jittered.next() for _ in range(50)]
    assert all(1.0 <= d < 2.0 for d in delays) and len(set(delays)) > 40
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=0)
    with pytest.raises(ValueError):
        Backoff(initial=2, cap=1)
    with pytest.raises(TypeError, match="jitter"):
        Backoff(jitter=float("inf"))


def test_repeated_410_without_progress_backs_off_between_relists(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    script.watches = [("status", 410)] * 3
    informer = start(list_func, backoff=Backoff(initial=0.05, cap=0.05, jitter=0))
    try:
        wait_until(lambda: informer.stats().lists >= 4, what="three relists")
        lists = script.list_requests()
        assert informer.stats().gone == 3
        assert len(lists) == 4
    finally:
        assert informer.stop(WAIT)


def test_a_handler_added_while_the_first_list_completes_misses_nothing(scripted: tuple[Script, Any]) -> None:
    """add_event_handler checks has_synced and registers under the dispatch lock; the first list must apply its
    adds *and* mark the informer synced under that same lock, or a handler registered in between gets neither the
    list's adds (already dispatched) nor the replay for late handlers (not synced yet)."""
    _, list_func = scripted
    informer = Informer(list_func, {"namespace": "default"}, backoff=Backoff(initial=0.01, cap=0.05, jitter=0))
    late = Recorder()
    registered = threading.Event()

    class RacingEvent(threading.Event):
        """Registers the late handler from another thread just before the informer is marked synced."""

        def set(self) -> None:
            if not registered.is_set():
                registered.set()
                t = threading.Thread(target=late.register, args=(informer,))
                t.start()
                t.join(0.2)  # finishes at once if the dispatch lock is free here (the bug); else it waits for it
            super().set()

    informer._synced = RacingEvent()
    informer.start()
    try:
        assert informer.wait_for_cache_sync(WAIT)
        assert registered.is_set()
        late.wait_for(lambda ev: len(ev) == 2)
        assert sorted(e[1] for e in late.of("add")) == ["default/a", "default/b"]
    finally:
        assert informer.stop(WAIT)


class _RecordingBackoff(Backoff):
    """A backoff that records every delay it hands out and every reset."""

    def __init__(self) -> None:
        super().__init__(initial=0.001, cap=0.064, jitter=0)
        self.delays: list[float] = []
        self.resets = 0

    def next(self) -> float:
        delay = super().next()
        self.delays.append(delay)
        return delay

    def reset(self) -> None:
        self.resets += 1
        super().reset()


def test_backoff_grows_while_every_watch_answers_only_an_error_event(scripted: tuple[Script, Any]) -> None:
    """The API server is up but its storage is not: each watch opens, then brings one ERROR event (500). That is
    no sign of health: the backoff keeps growing up to its cap instead of retrying at the initial delay for ever."""
    script, list_func = scripted
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}}
    script.watches = [("events", [error])] * 10
    backoff = _RecordingBackoff()
    informer = start(list_func, backoff=backoff)
    try:
        wait_until(lambda: len(script.watch_requests()) >= 9, what="nine watches")
        resets_after_list = 1  # the successful list resets it once
        assert backoff.resets == resets_after_list
        assert backoff.delays[:8] == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.064]
    finally:
        assert informer.stop(WAIT)


def test_control_a_stream_that_delivers_an_event_resets_the_backoff(scripted: tuple[Script, Any]) -> None:
    script, list_func = scripted
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}}
    added = {"type": "ADDED", "object": cm("c", 8)}
    script.watches = [("events", [error]), ("events", [error]), ("events", [added, error]), ("events", [error])]
    backoff = _RecordingBackoff()
    informer = start(list_func, backoff=backoff)
    try:
        wait_until(lambda: len(script.watch_requests()) >= 5, what="five watches")
        assert backoff.resets == 2  # the list, then the stream that delivered an ADDED
        assert backoff.delays[:4] == [0.001, 0.002, 0.001, 0.002]
    finally:
        assert informer.stop(WAIT)
