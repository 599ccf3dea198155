"""Testing the Widget operator (examples/widget_operator.py) with keyqueue's pytest plugin (run:
`.venv/bin/python -m pytest examples/test_widget_operator.py`).

The CRD is installed once; each test runs its own operator (its own Manager) in its own namespace.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from widget_operator import FINALIZER, GROUP, PLURAL, VERSION, WidgetOperator, install_crd

from keyqueue.apiserver import TestAPIServer
from keyqueue.testing import eventually


@pytest.fixture(scope="module")
def crd(kube_apiserver: TestAPIServer) -> None:
    with kube_apiserver.api_client() as api_client:
        install_crd(api_client)


@pytest.fixture
def operator(crd: None, kube_api_client: client.ApiClient, kube_namespace: str) -> Iterator[WidgetOperator]:
    with WidgetOperator(kube_api_client, kube_namespace) as op:
        yield op


def widget(op: WidgetOperator, ns: str, name: str) -> Any:
    return op.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def create_widget(op: WidgetOperator, ns: str, name: str, message: str, replicas: int = 1) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name},
            "spec": {"message": message, "replicas": replicas}}
    op.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


def ready(op: WidgetOperator, ns: str, name: str) -> dict[str, Any] | None:
    obj = widget(op, ns, name)
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready" and cond["status"] == "True" and \
                cond["observedGeneration"] == obj["metadata"]["generation"]:
            return obj
    return None


def config_map_data(op: WidgetOperator, ns: str, name: str) -> dict[str, str] | None:
    try:
        return op.core.read_namespaced_config_map(name, ns).data
    except ApiException as exc:
        if exc.status == 404:  # not (re)created yet
            return None
        raise


def reasons(op: WidgetOperator, ns: str) -> list[str]:
    op.events.flush(10)
    return sorted(e.reason for e in op.core.list_namespaced_event(ns).items)


def test_a_widget_gets_its_config_map_deployment_finalizer_and_condition(operator: WidgetOperator,
                                                                        kube_namespace: str) -> None:
    create_widget(operator, kube_namespace, "w1", "hello", replicas=2)
    obj = eventually(lambda: ready(operator, kube_namespace, "w1"), timeout=30)
    assert obj["metadata"]["finalizers"] == [FINALIZER]
    cm = operator.core.read_namespaced_config_map("w1-config", kube_namespace)
    assert cm.data == {"message": "hello"}
    (ref,) = cm.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Widget", "w1", obj["metadata"]["uid"], True)
    dep = operator.apps.read_namespaced_deployment("w1", kube_namespace)
    assert dep.spec.replicas == 2 and dep.metadata.owner_references[0].uid == obj["metadata"]["uid"]
    eventually(lambda: "Reconciled" in reasons(operator, kube_namespace), timeout=30)


def test_owned_objects_are_repaired_and_follow_the_spec(operator: WidgetOperator, kube_namespace: str) -> None:
    create_widget(operator, kube_namespace, "w2", "one")
    eventually(lambda: ready(operator, kube_namespace, "w2"), timeout=30)
    # Drift in an owned object reconciles its owner (owns=): the operator puts it back.
    operator.core.delete_namespaced_config_map("w2-config", kube_namespace)
    eventually(lambda: config_map_data(operator, kube_namespace, "w2-config") == {"message": "one"}, timeout=30)
    operator.apps.patch_namespaced_deployment("w2", kube_namespace, {"spec": {"replicas": 5}})
    eventually(lambda: operator.apps.read_namespaced_deployment("w2", kube_namespace).spec.replicas == 1, timeout=30)
    # A spec change reaches both owned objects and the condition's observedGeneration.
    operator.custom.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "w2",
                                                   {"spec": {"message": "two", "replicas": 3}})
    eventually(lambda: config_map_data(operator, kube_namespace, "w2-config") == {"message": "two"}, timeout=30)
    eventually(lambda: operator.apps.read_namespaced_deployment("w2", kube_namespace).spec.replicas == 3, timeout=30)
    assert eventually(lambda: ready(operator, kube_namespace, "w2"), timeout=30)["metadata"]["generation"] == 2


def test_deletion_runs_the_cleanup_and_collects_the_owned_objects(operator: WidgetOperator,
                                                                  kube_namespace: str) -> None:
    create_widget(operator, kube_namespace, "w3", "bye")
    eventually(lambda: ready(operator, kube_namespace, "w3"), timeout=30)
    operator.custom.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "w3")

    def gone(read: Any, *args: str) -> bool:
        try:
            read(*args)
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually(lambda: gone(widget, operator, kube_namespace, "w3"), timeout=30)
    eventually(lambda: gone(operator.core.read_namespaced_config_map, "w3-config", kube_namespace), timeout=30)
    eventually(lambda: gone(operator.apps.read_namespaced_deployment, "w3", kube_namespace), timeout=30)
    eventually(lambda: "CleanedUp" in reasons(operator, kube_namespace), timeout=30)
