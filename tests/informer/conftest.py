"""Fixtures for the informer tests: a test API server per backend for this package's modules.

The servers are module-scoped and private to these tests (not the apiserver suite's session servers), because
the tests stop and restart the HTTP server and compact storage. Each test works in its own namespace.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer, find_etcd_binary
from keyqueue.informer import Backoff, Informer, meta_namespace_key

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

BOOKMARK_INTERVAL = 0.2
WAIT = 5.0  # seconds: the bound of every event-based wait


def _have_etcd() -> bool:
    try:
        find_etcd_binary()
    except FileNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def memory_apiserver() -> Iterator[TestAPIServer]:
    with TestAPIServer("memory", bookmark_interval=BOOKMARK_INTERVAL) as s:
        yield s


@pytest.fixture(scope="module")
def etcd_apiserver() -> Iterator[TestAPIServer]:
    if not _have_etcd():
        pytest.skip("no etcd binary (install the apiserver extra)")
    with TestAPIServer("etcd", bookmark_interval=BOOKMARK_INTERVAL, unsafe_no_fsync=True) as s:
        yield s


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def apiserver(request: pytest.FixtureRequest) -> TestAPIServer:
    s: TestAPIServer = request.getfixturevalue(f"{request.param}_apiserver")
    if not s.server.running:  # a previous test failed between stop_server and start_server
        s.start_server()
    return s


@pytest.fixture
def core(apiserver: TestAPIServer) -> Iterator[Any]:
    api_client = apiserver.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def ns(core: Any) -> Iterator[str]:
    name = f"inf-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        core.delete_namespace(name)
    except client.ApiException as exc:  # pragma: no cover - cleanup only
        if exc.status != 404:
            raise


class Recorder:
    """Informer handlers that record every call as a tuple, with a condition to wait on."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.cond = threading.Condition()

    def _put(self, item: tuple[Any, ...]) -> None:
        with self.cond:
            self.events.append(item)
            self.cond.notify_all()

    def on_add(self, obj: dict[str, Any]) -> None:
        self._put(("add", meta_namespace_key(obj), obj["metadata"]["resourceVersion"]))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        kind = "resync" if old is new else "update"
        self._put((kind, meta_namespace_key(new), old["metadata"]["resourceVersion"],
                   new["metadata"]["resourceVersion"]))

    def on_delete(self, obj: Any) -> None:
        from keyqueue.informer import DeletedFinalStateUnknown

        if isinstance(obj, DeletedFinalStateUnknown):
            self._put(("tombstone", obj.key, obj.obj["metadata"]["resourceVersion"]))
        else:
            self._put(("delete", meta_namespace_key(obj), obj["metadata"]["resourceVersion"]))

    def register(self, informer: Informer) -> None:
        informer.add_event_handler(on_add=self.on_add, on_update=self.on_update, on_delete=self.on_delete)

    def wait_for(self, predicate: Callable[[list[tuple[Any, ...]]], bool], timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"condition not met within {timeout} s; events: {self.events}")
                self.cond.wait(left)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        with self.cond:
            return [e for e in self.events if e[0] == kind]


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
    """Poll a predicate that has no event to wait on (informer counters), every 5 ms, for at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.005)


@pytest.fixture
def make_informer(apiserver: TestAPIServer) -> Iterator[Callable[..., Informer]]:
    """``make_informer(namespace, **options)``: an unstarted informer on ConfigMaps with a fast backoff; every
    informer made here is stopped after the test, and its threads must be gone."""
    made: list[tuple[Informer, Any]] = []

    def factory(namespace: str, **options: Any) -> Informer:
        api_client = apiserver.api_client()
        options.setdefault("backoff", Backoff(initial=0.01, cap=0.1, jitter=0.5))
        informer = Informer.for_config_maps(api_client, namespace, **options)
        made.append((informer, api_client))
        return informer

    yield factory
    for informer, api_client in made:
        assert informer.stop(timeout=5), f"informer {informer.name} threads still alive"
        api_client.close()


def create_cm(core: Any, ns: str, name: str, **data: str) -> dict[str, Any]:
    obj = core.create_namespaced_config_map(ns, {"metadata": {"name": name}, "data": data or {"v": "0"}})
    return {"name": name, "rv": obj.metadata.resource_version}
