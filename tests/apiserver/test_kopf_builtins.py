"""kopf operators that create and watch built-in kinds, run with kopf's ``KopfRunner`` against the test API server
(the plugin's fixtures, as ``examples/test_kopf_operator.py``): the equivalents of kopf's examples ``02-children``,
``10-builtins`` and ``99-all-at-once`` in ``kopf_operators/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

kopf = pytest.importorskip("kopf")
from kopf.testing import KopfRunner  # noqa: E402
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from keyqueue.apiserver import TestAPIServer  # noqa: E402
from keyqueue.testing import eventually  # noqa: E402

OPERATORS = Path(__file__).with_name("kopf_operators")
GROUP, VERSION, PLURAL = "kopf.dev", "v1", "kopfexamples"
CRD = {  # kopf's examples/crd.yaml, its schema and columns
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "KopfExample", "plural": PLURAL, "singular": "kopfexample",
                       "shortNames": ["kopfexes", "kopfex", "kexes", "kex"]},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
                           "additionalPrinterColumns": [
                               {"name": "Duration", "type": "string", "jsonPath": ".spec.duration"},
                               {"name": "Children", "type": "string", "jsonPath": ".status.create_fn.children"}]}]},
}
EXAMPLE = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KopfExample",  # kopf's examples/obj.yaml
           "metadata": {"name": "kopf-example-1", "labels": {"somelabel": "somevalue"},
                        "annotations": {"someannotation": "somevalue"}},
           "spec": {"duration": "1m", "field": "value", "items": ["item1", "item2"]}}


@pytest.fixture(scope="module")
def crd(kube_apiserver: TestAPIServer) -> None:
    with kube_apiserver.api_client() as api_client:
        try:
            client.ApiextensionsV1Api(api_client).create_custom_resource_definition(CRD)
        except ApiException as exc:
            if exc.status != 409:
                raise


@pytest.fixture
def run(kubeconfig: Path, kube_namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    def start(operator: str) -> KopfRunner:
        return KopfRunner(["run", "--standalone", "--verbose", "--namespace", kube_namespace,
                           str(OPERATOR_FILES[operator])], timeout=60)

    return start


OPERATOR_FILES = {name: OPERATORS / f"{name}.py" for name in ("children", "builtins", "all_at_once")}


def _status(api: client.CustomObjectsApi, ns: str) -> dict[str, Any]:
    obj = api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "kopf-example-1")
    return obj.get("status") or {}


def test_children_pod_is_created_and_adopted(crd: None, run: Any, kube_api_client: client.ApiClient,
                                             kube_namespace: str) -> None:
    custom, core = client.CustomObjectsApi(kube_api_client), client.CoreV1Api(kube_api_client)
    with run("children") as runner:
        parent = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, EXAMPLE)
        children = eventually(lambda: (_status(custom, kube_namespace).get("create_fn") or {}).get("children"),
                              timeout=30)
        pods = core.list_namespaced_pod(kube_namespace).items
        assert [p.metadata.uid for p in pods] == children
        pod = pods[0]
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller, owner.block_owner_deletion) == (
            "KopfExample", "kopf-example-1", parent["metadata"]["uid"], True, True)
        assert pod.metadata.labels == {"somelabel": "somevalue"}
        assert pod.spec.containers[0].env[0].value == "value" and pod.status.phase == "Pending"
        assert pod.spec.restart_policy == "Always"  # defaulted by the server
    assert runner.exception is None and runner.exit_code == 0, runner.output
    assert "Handler 'create_fn' succeeded." in runner.output
    # the garbage collector deletes the adopted Pod with its owner
    custom.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "kopf-example-1")
    eventually(lambda: not core.list_namespaced_pod(kube_namespace).items)


def test_builtins_pod_handlers_and_finalizer(run: Any, kube_api_client: client.ApiClient,
                                             kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    with run("builtins") as runner:
        pod = core.create_namespaced_pod(kube_namespace, {"metadata": {"generateName": "kopf-pod-"}, "spec": {
            "containers": [{"name": "the-only-one", "image": "busybox", "command": ["sh", "-x", "-c", "sleep 1"]}]}})
        name = pod.metadata.name

        def handled() -> bool:  # kopf's finalizer is on, and its create handler has been recorded
            meta = core.read_namespaced_pod(name, kube_namespace).metadata
            return "kopf.zalando.org/KopfFinalizerMarker" in (meta.finalizers or []) and \
                "kopf.zalando.org/last-handled-configuration" in (meta.annotations or {})

        eventually(handled, timeout=30)
        core.delete_namespaced_pod(name, kube_namespace)

        def gone() -> bool:
            try:
                core.read_namespaced_pod(name, kube_namespace)
            except ApiException as exc:
                assert exc.status == 404
                return True
            return False

        eventually(gone, timeout=30)  # kopf ran its delete handler and removed its finalizer
    assert runner.exception is None and runner.exit_code == 0, runner.output
    assert f"[{kube_namespace}/{name}] === Pod killing happens in 300s." in runner.output
    assert f"[{kube_namespace}/{name}] === Pod killing is cancelled!" in runner.output
    assert f"[{kube_namespace}/{name}] Deletion is in progress:" in runner.output


def test_all_at_once(crd: None, run: Any, kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    custom, core = client.CustomObjectsApi(kube_api_client), client.CoreV1Api(kube_api_client)
    with run("all_at_once") as runner:
        custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, EXAMPLE)

        def done() -> bool:
            status = _status(custom, kube_namespace)
            return status.get("create_1") == {"job1-status": 100} and status.get("create_2") == {"job2-status": 100}

        eventually(done, timeout=30)
        pods = eventually(lambda: core.list_namespaced_pod(
            kube_namespace, label_selector="application=kopf-example-99").items, timeout=30)
        assert pods[0].metadata.owner_references[0].kind == "KopfExample"

        def reasons() -> set[str]:
            found = {e.reason for e in core.list_namespaced_event(kube_namespace).items
                     if e.involved_object.name == "kopf-example-1"}
            assert {"AnyReason", "SomeReason"} <= found, found
            return found

        eventually(reasons, timeout=30)
        custom.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "kopf-example-1",
                                              {"spec": {"lst": ["a", "b"]}})
        eventually(lambda: _lst_handled(custom, kube_namespace), timeout=30)
        custom.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "kopf-example-1")
        eventually(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)["items"],
                   timeout=30)
        eventually(lambda: not core.list_namespaced_pod(kube_namespace).items, timeout=30)  # garbage-collected
    assert runner.exception is None and runner.exit_code == 0, runner.output
    for text in ("Starting retried...",
                 "Handler 'create_2' failed with an exception and will try again in 0.1 seconds: Whoops!",
                 "This pod is special for us.", "Handling the FIELD = None -> ['a', 'b']",
                 "Deleted, really deleted", "Cleaning up..."):
        assert text in runner.output, text


def _lst_handled(custom: client.CustomObjectsApi, ns: str) -> bool:
    """kopf has recorded the update with spec.lst as handled (its last-handled-configuration annotation)."""
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "kopf-example-1")
    return '"lst":["a","b"]' in (obj["metadata"].get("annotations") or {}).get(
        "kopf.zalando.org/last-handled-configuration", "")
