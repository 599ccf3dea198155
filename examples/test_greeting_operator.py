"""Testing an operator for a custom resource with a finalizer, with keyqueue's pytest plugin (run:
`.venv/bin/python -m pytest examples/test_greeting_operator.py`).

The operator puts its finalizer on every Greeting, writes `status.message` through the status subresource, and on
deletion does its cleanup and removes the finalizer, so that the deletion completes. The CRD is installed once for
the module; each test runs its own operator in its own namespace.
"""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.testing import eventually

GROUP, VERSION, PLURAL, FINALIZER = "example.com", "v1", "greetings", "example.com/cleanup"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": PLURAL, "kind": "Greeting"},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string", "minLength": 1}}},
                               "status": {"type": "object", "properties": {"message": {"type": "string"}}}}}}}]},
}


class Operator:
    """The operator under test; `cleaned` lists the keys whose cleanup ran."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.informer = Informer.for_custom_objects(api_client, GROUP, VERSION, PLURAL, namespace)
        self.controller = keyqueue.Controller(self.reconcile, workers=2)
        self.cleaned: list[str] = []
        self.lock = threading.Lock()
        enqueue = lambda obj: self.controller.queue.add(meta_namespace_key(obj))  # noqa: E731
        self.informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)

    def reconcile(self, key: str) -> None:
        obj = self.informer.store.get_by_key(key)
        if obj is None:
            return
        meta = obj["metadata"]
        ns, name, finalizers = meta["namespace"], meta["name"], meta.get("finalizers") or []
        guard = {"resourceVersion": meta["resourceVersion"]}  # a stale cache gets 409 and a retry
        if meta.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                with self.lock:
                    self.cleaned.append(key)  # release what the object held, then let it go
                rest = [f for f in finalizers if f != FINALIZER]
                self.api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                        {"metadata": {**guard, "finalizers": rest}})
            return
        if FINALIZER not in finalizers:
            self.api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                    {"metadata": {**guard, "finalizers": [*finalizers, FINALIZER]}})
            return
        message = f"Hello, {obj['spec']['name']}!"
        if (obj.get("status") or {}).get("message") != message:
            self.api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, name,
                                                           {"status": {"message": message}})


@pytest.fixture(scope="module")
def crd(kube_apiserver: TestAPIServer) -> None:
    with kube_apiserver.api_client() as api_client:
        try:
            client.ApiextensionsV1Api(api_client).create_custom_resource_definition(CRD)  # served once it returns
        except ApiException as exc:
            if exc.status != 409:  # installed by an earlier module of the session
                raise


@pytest.fixture
def operator(crd: None, kube_api_client: client.ApiClient, kube_namespace: str) -> Iterator[Operator]:
    op = Operator(kube_api_client, kube_namespace)
    with op.informer:
        assert op.informer.wait_for_cache_sync(30)
        with op.controller:
            yield op


def get(api: client.CustomObjectsApi, namespace: str, name: str) -> Any:
    return api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_status_follows_the_spec(operator: Operator, kube_namespace: str) -> None:
    api = operator.api
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": "bob"},
            "spec": {"name": "Bob"}}
    api.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
    eventually(lambda: get(api, kube_namespace, "bob").get("status") == {"message": "Hello, Bob!"}, timeout=30)
    assert get(api, kube_namespace, "bob")["metadata"]["finalizers"] == [FINALIZER]
    api.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "bob", {"spec": {"name": "Robert"}})
    eventually(lambda: get(api, kube_namespace, "bob").get("status") == {"message": "Hello, Robert!"}, timeout=30)


def test_deletion_waits_for_the_cleanup(operator: Operator, kube_namespace: str) -> None:
    api = operator.api
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": "alice"},
            "spec": {"name": "Alice"}}
    api.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
    eventually(lambda: FINALIZER in get(api, kube_namespace, "alice")["metadata"].get("finalizers", []), timeout=30)
    api.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "alice")

    def gone() -> bool:
        try:
            get(api, kube_namespace, "alice")
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually(gone, timeout=30)
    # At least once: a reconcile whose finalizer patch met a newer version (409) runs again, cleanup included, so a
    # cleanup must be safe to repeat.
    assert set(operator.cleaned) == {f"{kube_namespace}/alice"}


def test_invalid_greetings_are_refused(crd: None, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    api = client.CustomObjectsApi(kube_api_client)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": "nobody"}, "spec": {}}
    with pytest.raises(ApiException) as info:
        api.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
    assert info.value.status == 422
    assert "spec.name: Required value" in info.value.body
