"""Testing a kopf operator with keyqueue's pytest plugin (run: `.venv/bin/python -m pytest
examples/test_kopf_operator.py`; needs kopf).

kopf's `KopfRunner` runs the operator in a thread of the test process; it finds the test API server through the
`kubeconfig` fixture (the `KUBECONFIG` variable, read by the login handler below) and watches the test's
namespace only.
"""

from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner
from kubernetes import client
from kubernetes.client.rest import ApiException

from keyqueue.apiserver import TestAPIServer
from keyqueue.testing import eventually

GROUP, VERSION, PLURAL = "kopf.example.com", "v1", "greetings"
OPERATOR = Path(__file__).with_name("kopf_greeter.py")
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": PLURAL, "kind": "Greeting"},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Log in with the file `KUBECONFIG` names when kopf starts. (kopf's default, through the official client, would
    use the path `KUBECONFIG` held when `kubernetes` was first imported, before the test set it.)"""
    return kopf.login_with_kubeconfig(**kwargs)


@pytest.fixture(scope="module")
def crd(kube_apiserver: TestAPIServer) -> None:
    with kube_apiserver.api_client() as api_client:
        try:
            client.ApiextensionsV1Api(api_client).create_custom_resource_definition(CRD)
        except ApiException as exc:
            if exc.status != 409:  # installed by an earlier module of the session
                raise


def test_kopf_greets(crd: None, kubeconfig: Path, kube_api_client: client.ApiClient, kube_namespace: str,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    api = client.CustomObjectsApi(kube_api_client)
    args = ["run", "--standalone", "--namespace", kube_namespace, str(OPERATOR)]
    with KopfRunner(args, timeout=60) as runner:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": "kim"},
                "spec": {"name": "Kim"}}
        api.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)

        def greeted() -> object:
            obj = api.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "kim")
            return (obj.get("status") or {}).get("greet")

        assert eventually(greeted, timeout=30) == {"message": "Hello, Kim!"}
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None
    assert "Handler 'greet' succeeded." in runner.output
