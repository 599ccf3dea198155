"""A Widget operator on keyqueue's Manager: a custom resource that owns a ConfigMap and a Deployment.

Each Widget (`example.com/v1`, `spec.message`, `spec.replicas`) gets a ConfigMap `<name>-config` holding the
message and a Deployment `<name>` with that many replicas, both with a controller owner reference to the Widget,
so that a change to either (or its deletion) reconciles the Widget again and they are garbage-collected with it.
The operator puts a finalizer on each Widget (its cleanup runs before the Widget goes), records Events and keeps a
`Ready` condition in `status.conditions`, written through the status subresource.

Against the cluster of your current kubeconfig context, or in a pod with its service account (installs the CRD if
missing; SIGINT/SIGTERM stops it and releases the Lease; docs/guide/manager.md lists the RBAC it needs):

    .venv/bin/python examples/widget_operator.py [NAMESPACE]

examples/test_widget_operator.py runs it against the test API server.
"""

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiException

import keyqueue
from keyqueue.events import EventBroadcaster
from keyqueue.predicates import resource_version_changed

GROUP, VERSION, PLURAL, KIND = "example.com", "v1", "widgets", "Widget"
WIDGETS, CONFIGMAPS, DEPLOYMENTS = f"{GROUP}/{VERSION}/{PLURAL}", "v1/configmaps", "apps/v1/deployments"
FINALIZER = "example.com/widget-cleanup"
IMAGE = "registry.k8s.io/pause:3.10"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": PLURAL, "kind": KIND},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["message"], "properties": {
                                   "message": {"type": "string"},
                                   "replicas": {"type": "integer", "minimum": 0, "default": 1}}},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                           }}}}]},
}


def install_crd(api_client: client.ApiClient) -> None:
    """Create the Widget CRD unless it exists."""
    try:
        client.ApiextensionsV1Api(api_client).create_custom_resource_definition(CRD)
    except ApiException as exc:
        if exc.status != 409:
            raise


def owner_reference(widget: dict[str, Any]) -> dict[str, Any]:
    meta = widget["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def desired_config_map(widget: dict[str, Any]) -> dict[str, Any]:
    meta = widget["metadata"]
    return {"metadata": {"name": f"{meta['name']}-config", "namespace": meta["namespace"],
                         "ownerReferences": [owner_reference(widget)]},
            "data": {"message": widget["spec"]["message"]}}


def desired_deployment(widget: dict[str, Any]) -> dict[str, Any]:
    meta = widget["metadata"]
    labels = {"app.kubernetes.io/name": "widget", "app.kubernetes.io/instance": meta["name"]}
    return {"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "ownerReferences": [owner_reference(widget)]},
            "spec": {"replicas": widget["spec"].get("replicas", 1), "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "widget", "image": IMAGE}]}}}}


class WidgetOperator:
    """The operator: one Manager, one controller for Widgets owning ConfigMaps and Deployments."""

    def __init__(self, api_client: client.ApiClient, namespace: str | None = None, **manager_options: Any) -> None:
        self.core, self.apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.mgr = keyqueue.Manager(api_client, namespace=namespace, **manager_options)
        self.events = EventBroadcaster(api_client)
        self.recorder = self.events.recorder_for("widget-operator")
        self.widgets, self.config_maps = self.mgr.cache(WIDGETS), self.mgr.cache(CONFIGMAPS)
        self.deployments = self.mgr.cache(DEPLOYMENTS)
        # resource_version_changed: periodic resyncs do not reconcile; every real change does.
        self.controller = self.mgr.add_controller(self.reconcile, for_=WIDGETS, owns=(CONFIGMAPS, DEPLOYMENTS),
                                                  predicates=(resource_version_changed,), workers=2)

    def __enter__(self) -> "WidgetOperator":
        self.mgr.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mgr.stop()
        self.events.close()

    def reconcile(self, key: str) -> None:
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
                self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                           {"metadata": {**guard, "finalizers": rest}})
            return
        if FINALIZER not in finalizers:  # the update this makes reconciles the Widget again
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                       {"metadata": {**guard, "finalizers": [*finalizers, FINALIZER]}})
            return
        changed = self.ensure_config_map(widget) | self.ensure_deployment(widget)
        self.set_ready(widget, changed)

    def ensure_config_map(self, widget: dict[str, Any]) -> bool:
        want = desired_config_map(widget)
        have = self.config_maps.get(f"{want['metadata']['namespace']}/{want['metadata']['name']}")
        if have is None:
            self.core.create_namespaced_config_map(want["metadata"]["namespace"], want)
        elif have.get("data") != want["data"]:
            self.core.patch_namespaced_config_map(want["metadata"]["name"], want["metadata"]["namespace"],
                                                  {"data": want["data"]})
        else:
            return False
        return True

    def ensure_deployment(self, widget: dict[str, Any]) -> bool:
        want = desired_deployment(widget)
        have = self.deployments.get(f"{want['metadata']['namespace']}/{want['metadata']['name']}")
        if have is None:
            self.apps.create_namespaced_deployment(want["metadata"]["namespace"], want)
        elif have["spec"].get("replicas") != want["spec"]["replicas"]:
            self.apps.patch_namespaced_deployment(want["metadata"]["name"], want["metadata"]["namespace"],
                                                  {"spec": {"replicas": want["spec"]["replicas"]}})
        else:
            return False
        return True

    def set_ready(self, widget: dict[str, Any], changed: bool) -> None:
        meta, status = widget["metadata"], widget.get("status") or {}
        ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
        if ready.get("status") == "True" and ready.get("observedGeneration") == meta["generation"] and not changed:
            return  # level-based: nothing to write
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration":
                     meta["generation"], "message": "ConfigMap and Deployment match the spec",
                     "lastTransitionTime": ready.get("lastTransitionTime", now) if ready.get("status") == "True"
                     else now}
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
                                                          {"status": {"conditions": [condition]}})
        self.recorder.event(widget, "Normal", "Reconciled", f"generation {meta['generation']}")


def main() -> None:
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
            operator.mgr.run()  # until SIGINT/SIGTERM
        finally:
            operator.events.close()


if __name__ == "__main__":
    main()
