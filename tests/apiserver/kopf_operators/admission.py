"""Like kopf's example 17-admission: validating and mutating admission handlers served by kopf's own webhook server
on 127.0.0.1, with the webhook configurations managed by kopf (``auto.kopf.dev``).  The server's certificate comes
from the files named by ``KEYQUEUE_WEBHOOK_CERTS`` (a directory with ``ca.crt``, ``server.crt``, ``server.key``),
as the example's ``certfile``/``pkeyfile`` variant."""

import os
from pathlib import Path
from typing import Any

import kopf


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def config(settings: kopf.OperatorSettings, **_: Any) -> None:
    certs = Path(os.environ["KEYQUEUE_WEBHOOK_CERTS"])
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1", host="127.0.0.1", cafile=certs / "ca.crt", certfile=certs / "server.crt",
        pkeyfile=certs / "server.key")
    settings.admission.managed = "auto.kopf.dev"


@kopf.on.validate("kex")
def authhook(headers: kopf.Headers, sslpeer: kopf.SSLPeer, warnings: list[str], **_: Any) -> None:
    user_agent = headers.get("User-Agent", "(unidentified)")
    warnings.append(f"Accessing as user-agent: {user_agent}")
    if not sslpeer.get("subject"):
        warnings.append("SSL peer is not identified.")


@kopf.on.validate("kex")
def validate1(spec: kopf.Spec, dryrun: bool, **_: Any) -> None:
    if not dryrun and spec.get("field") == "wrong":
        raise kopf.AdmissionError("Meh! I don't like it. Change the field.")


@kopf.on.validate("kex", field="spec.field", value="not-allowed")
def validate2(**_: Any) -> None:
    raise kopf.AdmissionError("I'm too lazy anyway. Go away!", code=555)


@kopf.on.mutate("kex", labels={"somelabel": "somevalue"})
def mutate1(patch: kopf.Patch, **_: Any) -> None:
    patch.spec["injected"] = 123
