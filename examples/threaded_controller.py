"""A threaded controller: informer → queue → reconcile, against the bundled test API server.

Every ConfigMap in `default` gets the annotation example.com/keys = its number of data keys. Run it with
`.venv/bin/python examples/threaded_controller.py` (add `etcd` to store the objects in a real etcd).
"""

import sys
import threading

from kubernetes import client

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.informer import Informer, meta_namespace_key

ANNOTATION = "example.com/keys"
NAMES = ["demo-0", "demo-1", "demo-2"]


def main(backend: str) -> None:
    with TestAPIServer(backend) as server, server.api_client() as api_client:
        api = client.CoreV1Api(api_client)
        informer = Informer.for_config_maps(api_client, "default")
        settled = threading.Event()

        def reconcile(key: str) -> None:  # one worker at a time per key; raise to retry with backoff
            obj = informer.store.get_by_key(key)  # the cached object: a plain dict of the API's JSON
            if obj is None:
                return  # deleted
            meta, want = obj["metadata"], str(len(obj.get("data") or {}))
            if (meta.get("annotations") or {}).get(ANNOTATION) != want:  # level-based: compare, act if needed
                patch = {"metadata": {"annotations": {ANNOTATION: want}}}
                api.patch_namespaced_config_map(meta["name"], meta["namespace"], patch)
                sys.stdout.write(f"reconciled {key}: {ANNOTATION}={want}\n")  # one write: workers run at once
            cached = [informer.store.get_by_key(f"default/{name}") for name in NAMES]
            if all(o and (o["metadata"].get("annotations") or {}).get(ANNOTATION) for o in cached):
                settled.set()

        with keyqueue.Controller(reconcile, workers=2) as controller:
            def enqueue(obj: object) -> None:  # handlers only add keys; c.queue dedups them
                controller.queue.add(meta_namespace_key(obj))

            informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)
            with informer:
                if not informer.wait_for_cache_sync(30):
                    raise SystemExit("the informer's cache did not sync within 30 s")
                for i, name in enumerate(NAMES):
                    body = {"metadata": {"name": name}, "data": {f"k{j}": "v" for j in range(i + 1)}}
                    api.create_namespaced_config_map("default", body)
                if not settled.wait(30):
                    raise SystemExit("not reconciled within 30 s")
    print("all ConfigMaps reconciled")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "memory")
