"""An operator for a custom resource: CRD, informer → queue → reconcile, status subresource, a finalizer, Events.

Every Greeting gets `status.message` ("Hello, <spec.name>!") and `status.observedGeneration`, written through the
status subresource, and an Event saying so; the operator puts its finalizer on each Greeting and, when one is
deleted, does its cleanup and removes the finalizer so that the deletion completes. Run it with
`.venv/bin/python examples/greeting_operator.py` (add `etcd` to store the objects in a real etcd). (Not named
operator.py: that would shadow the standard library's `operator` module for the script.)
"""

import sys
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

import keyqueue
from keyqueue.apiserver import TestAPIServer
from keyqueue.events import EventBroadcaster
from keyqueue.informer import Informer, meta_namespace_key

GROUP, VERSION, PLURAL, FINALIZER = "example.com", "v1", "greetings", "example.com/cleanup"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": PLURAL, "kind": "Greeting"},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string", "minLength": 1}}},
                               "status": {"type": "object", "properties": {
                                   "message": {"type": "string"}, "observedGeneration": {"type": "integer"}}},
                           }}}}]},
}


def main(backend: str) -> None:
    with TestAPIServer(backend) as server, server.api_client() as api_client, EventBroadcaster(api_client) as events:
        recorder = events.recorder_for("greeting-operator")  # record() never blocks the reconcile
        client.ApiextensionsV1Api(api_client).create_custom_resource_definition(CRD)  # served once it returns
        api = client.CustomObjectsApi(api_client)
        informer = Informer.for_custom_objects(api_client, GROUP, VERSION, PLURAL, "default")
        cleaned, changed = threading.Event(), threading.Condition()

        def reconcile(key: str) -> None:  # one worker at a time per key; raise to retry with backoff
            try:
                act(key)
            finally:
                with changed:  # wake the waits below: they look again
                    changed.notify_all()

        def act(key: str) -> None:
            obj = informer.store.get_by_key(key)
            if obj is None:
                return  # gone (after our finalizer was removed)
            meta, ns, name = obj["metadata"], obj["metadata"]["namespace"], obj["metadata"]["name"]
            finalizers = meta.get("finalizers") or []
            guard = {"resourceVersion": meta["resourceVersion"]}  # a stale cache gets 409 and a retry
            if meta.get("deletionTimestamp"):
                if FINALIZER in finalizers:
                    sys.stdout.write(f"cleaned up {key}\n")  # release what it held, then let it go
                    recorder.event(obj, "Normal", "CleanedUp", "finalizer removed")
                    rest = [f for f in finalizers if f != FINALIZER]
                    api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                       {"metadata": {**guard, "finalizers": rest}})
                    cleaned.set()
                return
            if FINALIZER not in finalizers:  # first: make sure a deletion waits for us
                api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                   {"metadata": {**guard, "finalizers": [*finalizers, FINALIZER]}})
                return
            status = obj.get("status") or {}
            if status.get("observedGeneration") != meta["generation"]:  # level-based: act only if behind
                status = {"message": f"Hello, {obj['spec']['name']}!", "observedGeneration": meta["generation"]}
                api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, name, {"status": status})
                recorder.event(obj, "Normal", "Greeted", status["message"])
                sys.stdout.write(f"reconciled {key}: generation {meta['generation']}: {status['message']}\n")

        def greeting(name: str) -> Any:
            return informer.store.get_by_key(f"default/{name}") or {}

        def wait_for(test: Callable[[], bool], what: str) -> None:
            with changed:
                if not changed.wait_for(test, 30):
                    raise SystemExit(f"timed out waiting for {what}")

        with keyqueue.Controller(reconcile, workers=2) as controller:
            def enqueue(obj: object) -> None:
                controller.queue.add(meta_namespace_key(obj))

            informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)
            with informer:
                if not informer.wait_for_cache_sync(30):
                    raise SystemExit("the informer's cache did not sync within 30 s")
                for name, who in (("alice", "Alice"), ("bob", "Bob")):
                    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": name},
                            "spec": {"name": who}}
                    api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
                wait_for(lambda: all(greeting(n).get("status") for n in ("alice", "bob")), "both statuses")
                api.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "bob",
                                                   {"spec": {"name": "Robert"}})
                wait_for(lambda: greeting("bob").get("status") == {"message": "Hello, Robert!",
                                                                   "observedGeneration": 2}, "bob's new status")
                api.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "alice")
                if not cleaned.wait(30):
                    raise SystemExit("alice was not cleaned up within 30 s")
                wait_for(lambda: informer.store.get_by_key("default/alice") is None, "alice to be gone")
        events.flush(10)  # written through the API: `kubectl describe greeting bob` would show them
        reasons = sorted(e.reason for e in client.CoreV1Api(api_client).list_namespaced_event("default").items)
        print("events:", " ".join(reasons))
    print("operator done")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "memory")
