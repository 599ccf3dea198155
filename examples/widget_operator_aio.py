"""The Widget operator of examples/widget_operator.py on asyncio: `keyqueue.aio.Manager`, coroutine reconciles.

The same CRD, owned objects, finalizer, Events and `Ready` condition; the informers are asyncio tasks (aiohttp,
no thread per watch). The official client is blocking, so each write runs in the loop's default executor
(`asyncio.to_thread`). Against the cluster of your current kubeconfig context, or in a pod with its service
account:

    .venv/bin/python examples/widget_operator_aio.py [NAMESPACE]

examples/test_widget_operator_aio.py runs it against the test API server.
"""

import asyncio
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from widget_operator import (
    CONFIGMAPS,
    DEPLOYMENTS,
    FINALIZER,
    GROUP,
    PLURAL,
    VERSION,
    WIDGETS,
    desired_config_map,
    desired_deployment,
    install_crd,
)

import keyqueue.aio
from keyqueue.events import EventBroadcaster
from keyqueue.predicates import resource_version_changed


class WidgetOperator:
    """The operator: one asyncio Manager, one controller for Widgets owning ConfigMaps and Deployments."""

    def __init__(self, api_client: client.ApiClient, namespace: str | None = None, **manager_options: Any) -> None:
        self.core, self.apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.mgr = keyqueue.aio.Manager(api_client, namespace=namespace, **manager_options)
        self.events = EventBroadcaster(api_client)  # record() never blocks: fine on the event loop
        self.recorder = self.events.recorder_for("widget-operator")
        self.widgets, self.config_maps = self.mgr.cache(WIDGETS), self.mgr.cache(CONFIGMAPS)
        self.deployments = self.mgr.cache(DEPLOYMENTS)
        self.controller = self.mgr.add_controller(self.reconcile, for_=WIDGETS, owns=(CONFIGMAPS, DEPLOYMENTS),
                                                  predicates=(resource_version_changed,), workers=2)

    async def __aenter__(self) -> "WidgetOperator":
        await self.mgr.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.mgr.stop()
        await asyncio.to_thread(self.events.close)

    async def reconcile(self, key: str) -> None:
        widget = self.widgets.get(key)
        if widget is None:
            return  # gone: the garbage collector deletes what it owned
        meta = widget["metadata"]
        ns, name, finalizers = meta["namespace"], meta["name"], meta.get("finalizers") or []
        guard = {"resourceVersion": meta["resourceVersion"]}  # a stale cache gets 409 and a retry with backoff
        if meta.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                self.recorder.event(widget, "Normal", "CleanedUp", "cleanup done, finalizer removed")
                rest = [f for f in finalizers if f != FINALIZER]
                await asyncio.to_thread(self.custom.patch_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
                                        {"metadata": {**guard, "finalizers": rest}})
            return
        if FINALIZER not in finalizers:
            await asyncio.to_thread(self.custom.patch_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
                                    {"metadata": {**guard, "finalizers": [*finalizers, FINALIZER]}})
            return
        changed = await self.ensure_config_map(widget) | await self.ensure_deployment(widget)
        await self.set_ready(widget, changed)

    async def ensure_config_map(self, widget: dict[str, Any]) -> bool:
        want = desired_config_map(widget)
        ns, name = want["metadata"]["namespace"], want["metadata"]["name"]
        have = self.config_maps.get(f"{ns}/{name}")
        if have is None:
            await asyncio.to_thread(self.core.create_namespaced_config_map, ns, want)
        elif have.get("data") != want["data"]:
            await asyncio.to_thread(self.core.patch_namespaced_config_map, name, ns, {"data": want["data"]})
        else:
            return False
        return True

    async def ensure_deployment(self, widget: dict[str, Any]) -> bool:
        want = desired_deployment(widget)
        ns, name = want["metadata"]["namespace"], want["metadata"]["name"]
        have = self.deployments.get(f"{ns}/{name}")
        if have is None:
            await asyncio.to_thread(self.apps.create_namespaced_deployment, ns, want)
        elif have["spec"].get("replicas") != want["spec"]["replicas"]:
            await asyncio.to_thread(self.apps.patch_namespaced_deployment, name, ns,
                                    {"spec": {"replicas": want["spec"]["replicas"]}})
        else:
            return False
        return True

    async def set_ready(self, widget: dict[str, Any], changed: bool) -> None:
        meta, status = widget["metadata"], widget.get("status") or {}
        ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
        if ready.get("status") == "True" and ready.get("observedGeneration") == meta["generation"] and not changed:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration":
                     meta["generation"], "message": "ConfigMap and Deployment match the spec",
                     "lastTransitionTime": ready.get("lastTransitionTime", now) if ready.get("status") == "True"
                     else now}
        await asyncio.to_thread(self.custom.patch_namespaced_custom_object_status, GROUP, VERSION, meta["namespace"],
                                PLURAL, meta["name"], {"status": {"conditions": [condition]}})
        self.recorder.event(widget, "Normal", "Reconciled", f"generation {meta['generation']}")


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config.load_incluster_config()  # in a pod: its service account
    except config.ConfigException:
        config.load_kube_config()  # elsewhere: the current kubeconfig context
    namespace = sys.argv[1] if len(sys.argv) > 1 else None
    with client.ApiClient() as api_client:
        install_crd(api_client)
        operator = WidgetOperator(api_client, namespace, leader_election="widget-operator", metrics_port=8080,
                                  health_port=8081)
        try:
            await operator.mgr.run()  # until SIGINT/SIGTERM
        finally:
            await asyncio.to_thread(operator.events.close)


if __name__ == "__main__":
    asyncio.run(main())
