"""Like kopf's example 99-all-at-once: startup handlers (one retried), two create handlers (one failing once),
events on the object, an adopted and labelled Pod, an event handler for those Pods, update, field, delete and
cleanup handlers."""

import os
from typing import Any

import kopf
from kubernetes import client, config

LABEL = {"application": "kopf-example-99"}


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup_fn_simple(logger: kopf.Logger, **_: Any) -> None:
    logger.info("Starting...")


@kopf.on.startup()
async def startup_fn_retried(retry: int, logger: kopf.Logger, **_: Any) -> None:
    if retry < 2:
        raise kopf.TemporaryError(f"Going to succeed in {2 - retry} retries", delay=0.1)
    logger.info("Starting retried...")


@kopf.on.cleanup()
async def cleanup_fn(logger: kopf.Logger, **_: Any) -> None:
    logger.info("Cleaning up...")


@kopf.on.create("kopfexamples")
def create_1(body: kopf.Body, **_: Any) -> Any:
    kopf.info(body, reason="AnyReason", message="Informational")
    kopf.event(body, type="Warning", reason="SomeReason", message="Cannot do something")
    return {"job1-status": 100}


@kopf.on.create("kopfexamples", backoff=0.1)
def create_2(retry: int, **_: Any) -> Any:
    if not retry:
        raise Exception("Whoops!")  # retried by kopf
    return {"job2-status": 100}


@kopf.on.create("kopfexamples")
def create_pod(**_: Any) -> None:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
        {"name": "the-only-one", "image": "busybox", "command": ["sh", "-x", "-c", "sleep 1"]}]}}
    kopf.adopt(pod)
    kopf.label(pod, LABEL)
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.environ["KUBECONFIG"], client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        client.CoreV1Api(api_client).create_namespaced_pod(pod["metadata"]["namespace"], pod)


@kopf.on.event("pods", labels=LABEL)
def example_pod_change(logger: kopf.Logger, **_: Any) -> None:
    logger.info("This pod is special for us.")


@kopf.on.update("kopfexamples")
def update(diff: kopf.Diff, logger: kopf.Logger, **_: Any) -> None:
    logger.info(f"Handling the diff {list(diff)}")


@kopf.on.field("kopfexamples", field="spec.lst")
def update_lst(old: Any, new: Any, logger: kopf.Logger, **_: Any) -> None:
    logger.info(f"Handling the FIELD = {old} -> {new}")


@kopf.on.delete("kopfexamples")
def delete(logger: kopf.Logger, **_: Any) -> None:
    logger.info("Deleted, really deleted")
