"""Testing a ConfigMap controller with keyqueue's pytest plugin (run: `.venv/bin/python -m pytest
examples/test_configmap_controller.py`; add `--kube-backend=etcd` to store the objects in a real etcd).

`kube_apiserver` runs once per session; each test gets a fresh namespace (`kube_namespace`) and client
(`kube_api_client`), starts the controller under test, and waits for the state it expects (`eventually`).
"""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

import keyqueue
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.testing import eventually

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


@pytest.fixture
def controller(kube_api_client: client.ApiClient, kube_namespace: str) -> Iterator[keyqueue.Controller[str]]:
    controller, informer = start_controller(kube_api_client, kube_namespace)
    yield controller
    controller.stop()
    informer.stop()


def test_annotates_every_configmap(controller: keyqueue.Controller[str], kube_api_client: client.ApiClient,
                                   kube_namespace: str) -> None:
    api = client.CoreV1Api(kube_api_client)
    api.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}})

    def annotation() -> str | None:
        cm = api.read_namespaced_config_map("a", kube_namespace)
        return (cm.metadata.annotations or {}).get(ANNOTATION)

    assert eventually(annotation, timeout=30) == "2"
    api.patch_namespaced_config_map("a", kube_namespace, {"data": {"z": "3"}})  # a merge patch adds a key
    eventually(lambda: annotation() == "3", timeout=30)


def test_a_configmap_without_data_gets_zero(controller: keyqueue.Controller[str], kube_api_client: client.ApiClient,
                                            kube_namespace: str) -> None:
    api = client.CoreV1Api(kube_api_client)
    api.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "empty"}})

    def check() -> bool:
        cm = api.read_namespaced_config_map("empty", kube_namespace)
        assert (cm.metadata.annotations or {}).get(ANNOTATION) == "0", cm.metadata.annotations
        return True

    eventually(check, timeout=30)
