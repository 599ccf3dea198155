"""Testing an asyncio controller with keyqueue's pytest plugin (run: `.venv/bin/python -m pytest
examples/test_async_controller.py`). No pytest-asyncio needed: the test runs its own event loop, and waits with
`aeventually`, which lets the loop run between attempts.
"""

import asyncio
from collections.abc import Awaitable, Callable

from kubernetes import client

from keyqueue import aio
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.testing import aeventually

ANNOTATION = "example.com/keys"


async def run_controller_and(api_client: client.ApiClient, namespace: str,
                             scenario: Callable[[], Awaitable[None]]) -> None:
    """Run the controller under test (every ConfigMap gets ANNOTATION = its number of data keys) while
    `scenario()` runs."""
    api = client.CoreV1Api(api_client)
    informer = Informer.for_config_maps(api_client, namespace)  # a thread; it adds keys from there

    async def reconcile(key: str) -> None:
        obj = informer.store.get_by_key(key)
        if obj is None:
            return
        want = str(len(obj.get("data") or {}))
        if (obj["metadata"].get("annotations") or {}).get(ANNOTATION) != want:
            patch = {"metadata": {"annotations": {ANNOTATION: want}}}
            await asyncio.to_thread(api.patch_namespaced_config_map, obj["metadata"]["name"], namespace, patch)

    async with aio.Controller(reconcile, workers=2) as controller:
        informer.add_event_handler(on_add=lambda obj: controller.queue.add(meta_namespace_key(obj)),
                                   on_update=lambda old, new: controller.queue.add(meta_namespace_key(new)))
        with informer:
            assert await asyncio.to_thread(informer.wait_for_cache_sync, 30)
            await scenario()


def test_annotates_every_configmap(kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    api = client.CoreV1Api(kube_api_client)

    async def annotations() -> dict[str, str]:
        cms = await asyncio.to_thread(api.list_namespaced_config_map, kube_namespace)
        return {cm.metadata.name: (cm.metadata.annotations or {}).get(ANNOTATION) for cm in cms.items}

    async def scenario() -> None:
        for i in range(3):
            body = {"metadata": {"name": f"cm-{i}"}, "data": {f"k{j}": "v" for j in range(i + 1)}}
            await asyncio.to_thread(api.create_namespaced_config_map, kube_namespace, body)

        async def all_annotated() -> bool:
            return await annotations() == {"cm-0": "1", "cm-1": "2", "cm-2": "3"}

        await aeventually(all_annotated, timeout=30)

    asyncio.run(asyncio.wait_for(run_controller_and(kube_api_client, kube_namespace, scenario), 60))
