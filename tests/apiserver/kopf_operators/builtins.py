"""Like kopf's example 10-builtins: a task per Pod that would delete it after a while, cancelled when the Pod is
deleted first (kopf holds the Pod with its finalizer until the delete handler has run)."""

import asyncio
from typing import Any

import kopf

tasks: dict[str, dict[str, asyncio.Task[None]]] = {}


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.resume("pods")
@kopf.on.create("pods")
async def pod_in_sight(namespace: str | None, name: str, logger: kopf.Logger, **_: Any) -> None:
    assert namespace is not None
    tasks.setdefault(namespace, {})[name] = asyncio.create_task(pod_killer(namespace, name, logger))


@kopf.on.delete("pods")
async def pod_deleted(namespace: str | None, name: str, **_: Any) -> None:
    if namespace in tasks and name in tasks[namespace]:
        tasks[namespace][name].cancel()


async def pod_killer(namespace: str, name: str, logger: kopf.Logger, timeout: float = 300) -> None:
    try:
        logger.info(f"=== Pod killing happens in {timeout}s.")
        await asyncio.sleep(timeout)
        logger.info("=== Pod killing happens NOW!")
    except asyncio.CancelledError:
        logger.info("=== Pod killing is cancelled!")
    finally:
        if namespace in tasks and name in tasks[namespace]:
            del tasks[namespace][name]
