"""Testing a controller with pytest against the test API server (run: `.venv/bin/python -m pytest
examples/test_configmap_controller.py`).

The server runs once per session (in memory; `TestAPIServer("etcd")` stores in a real etcd); each test gets a
fresh namespace and its own controller and informer, and waits for the state it expects instead of sleeping.
"""

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.informer import Informer, meta_namespace_key

ANNOTATION = "example.com/keys"


def start_controller(api_client: client.ApiClient, namespace: str) -> tuple[keyqueue.Controller[str], Informer]:
    """The controller under test: every ConfigMap gets ANNOTATION = its number of data keys."""
    api = client.CoreV1Api(api_client)
    informer = Informer.for_config_maps(api_client, namespace)

    def reconcile(key: str) -> None:
        obj = informer.store.get_by_key(key)
        if obj is None:
            return
        want = str(len(obj.get("data") or {}))
        if (obj["metadata"].get("annotations") or {}).get(ANNOTATION) != want:
            api.patch_namespaced_config_map(obj["metadata"]["name"], namespace,
                                            {"metadata": {"annotations": {ANNOTATION: want}}})

    controller = keyqueue.Controller(reconcile, workers=2)
    enqueue: Callable[[Any], None] = lambda obj: controller.queue.add(meta_namespace_key(obj))  # noqa: E731
    informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new))
    informer.start()
    assert informer.wait_for_cache_sync(30), "the informer's cache did not sync"
    controller.start()
    return controller, informer


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``check()``'s first truthy value, polled until ``timeout`` (then AssertionError)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{check} did not hold within {timeout} s")
        time.sleep(0.02)
    return value


@pytest.fixture(scope="session")
def api_client() -> Iterator[client.ApiClient]:
    with TestAPIServer("memory") as server, server.api_client() as api_client:
        yield api_client


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_annotates_every_configmap(api_client: client.ApiClient, namespace: str) -> None:
    controller, informer = start_controller(api_client, namespace)
    try:
        api = client.CoreV1Api(api_client)
        api.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}})

        def annotation() -> str | None:
            cm = api.read_namespaced_config_map("a", namespace)
            return (cm.metadata.annotations or {}).get(ANNOTATION)

        assert eventually(annotation) == "2"
        api.patch_namespaced_config_map("a", namespace, {"data": {"z": "3"}})  # a merge patch adds a key
        assert eventually(lambda: annotation() == "3")
    finally:
        controller.stop()
        informer.stop()
