"""An asyncio controller: informer → queue → reconcile, against the bundled test API server.

Every ConfigMap in `default` gets the annotation example.com/keys = its number of data keys. Run it with
`.venv/bin/python examples/async_controller.py` (add `etcd` to store the objects in a real etcd).
"""

import asyncio
import sys

from kubernetes import client

from keyqueue import aio
from keyqueue.apiserver import TestAPIServer
from keyqueue.informer import Informer, meta_namespace_key

ANNOTATION = "example.com/keys"
NAMES = ["demo-0", "demo-1", "demo-2"]


async def main(backend: str) -> None:
    with TestAPIServer(backend) as server, server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        informer = Informer.for_config_maps(api_client, "default")  # a thread; it adds keys from there
        settled = asyncio.Event()

        async def reconcile(key: str) -> None:  # one task at a time per key; raise to retry with backoff
            obj = informer.store.get_by_key(key)  # the cached object: a plain dict of the API's JSON
            if obj is None:
                return  # deleted
            meta, want = obj["metadata"], str(len(obj.get("data") or {}))
            if (meta.get("annotations") or {}).get(ANNOTATION) != want:  # level-based: compare, act if needed
                patch = {"metadata": {"annotations": {ANNOTATION: want}}}
                await asyncio.to_thread(api.patch_namespaced_config_map, meta["name"], meta["namespace"], patch)
                print(f"reconciled {key}: {ANNOTATION}={want}", flush=True)
            cached = [informer.store.get_by_key(f"default/{name}") for name in NAMES]
            if all(o and (o["metadata"].get("annotations") or {}).get(ANNOTATION) for o in cached):
                settled.set()

        async with aio.Controller(reconcile, workers=2) as controller:
            def enqueue(obj: object) -> None:  # runs on the informer's thread: aio queues accept adds from any
                controller.queue.add(meta_namespace_key(obj))

            informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)
            with informer:
                if not await asyncio.to_thread(informer.wait_for_cache_sync, 30):
                    raise SystemExit("the informer's cache did not sync within 30 s")
                for i, name in enumerate(NAMES):
                    body = {"metadata": {"name": name}, "data": {f"k{j}": "v" for j in range(i + 1)}}
                    await asyncio.to_thread(api.create_namespaced_config_map, "default", body)
                await asyncio.wait_for(settled.wait(), 30)
    print("all ConfigMaps reconciled")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "memory"))
