"""kopf's admission example (``17-admission``, as ``kopf_operators/admission.py``) against a test API server of
its own: kopf serves its webhooks on 127.0.0.1 and manages their Validating- and MutatingWebhookConfiguration; the
server calls them.  The validating handlers reject what they should, the mutating handler's patch lands."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

kopf = pytest.importorskip("kopf")
from kopf.testing import KopfRunner  # noqa: E402

from keyqueue.apiserver import TestAPIServer  # noqa: E402
from keyqueue.apiserver.tls import openssl_available  # noqa: E402
from keyqueue.testing import eventually  # noqa: E402

from .test_kopf_builtins import CRD, GROUP, PLURAL, VERSION  # noqa: E402
from .webhook_server import make_certs  # noqa: E402

pytestmark = pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the certificates")

OPERATOR = Path(__file__).with_name("kopf_operators") / "admission.py"
NS = "kopf-admission"
ADM = "/apis/admissionregistration.k8s.io/v1"


def raw(server: TestAPIServer, method: str, path: str, body: Any = None) -> tuple[int, Any, list[str]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null"), resp.headers.get_all("Warning") or []
    finally:
        conn.close()


@pytest.fixture(scope="module")
def kube() -> Iterator[TestAPIServer]:
    with TestAPIServer("memory") as server:
        assert raw(server, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)[0] == 201
        assert raw(server, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] == 201
        yield server


def kex(name: str, field: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KopfExample",
            "metadata": {"name": name, "labels": labels or {}}, "spec": {"field": field}}


@pytest.fixture
def registry() -> Iterator[Any]:
    """A registry of its own for the operator's handlers (kopf's default one is process-wide: the handlers would
    join every later ``KopfRunner`` in this process), the default one restored afterwards."""
    default = kopf.get_default_registry()
    yield kopf.OperatorRegistry()
    kopf.set_default_registry(default)


def test_kopf_admission_example(kube: TestAPIServer, registry: Any, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    make_certs(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig_path))
    monkeypatch.setenv("KEYQUEUE_WEBHOOK_CERTS", str(tmp_path))
    objects = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
    with KopfRunner(["run", "--standalone", "--verbose", "--namespace", NS, str(OPERATOR)], timeout=60,
                    registry=registry) as runner:

        def configured(kind: str, count: int) -> bool:
            status, body, _ = raw(kube, "GET", f"{ADM}/{kind}/auto.kopf.dev")
            return status == 200 and len(body.get("webhooks") or ()) == count

        eventually(lambda: configured("validatingwebhookconfigurations", 3), timeout=30)
        eventually(lambda: configured("mutatingwebhookconfigurations", 1), timeout=30)

        status, body, _ = raw(kube, "POST", objects, kex("wrong-1", "wrong"))
        assert (status, body["message"]) == (500, 'admission webhook "validate1.auto.kopf.dev" denied the request: '
                                                  "Meh! I don't like it. Change the field."), body
        status, body, _ = raw(kube, "POST", objects, kex("lazy-1", "not-allowed"))
        assert (status, body["message"]) == (555, 'admission webhook "validate2.spec.field.auto.kopf.dev" denied '
                                                  "the request: I'm too lazy anyway. Go away!"), body
        assert raw(kube, "GET", f"{objects}/wrong-1")[0] == 404 and raw(kube, "GET", f"{objects}/lazy-1")[0] == 404
        status, body, _ = raw(kube, "POST", objects + "?dryRun=All", kex("wrong-dry", "wrong"))
        assert status == 201, body  # validate1 lets dry runs through

        status, body, warnings = raw(kube, "POST", objects, kex("good-1", "value", {"somelabel": "somevalue"}))
        assert status == 201, body
        assert body["spec"] == {"field": "value", "injected": 123}
        assert '299 - "Accessing as user-agent: keyqueue-apiserver"' in warnings  # the authhook's warnings
        assert '299 - "SSL peer is not identified."' in warnings
        status, body, _ = raw(kube, "POST", objects, kex("plain-1", "value"))
        assert status == 201 and body["spec"] == {"field": "value"}  # no label: the mutating handler is not called
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None
