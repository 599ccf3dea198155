"""The defaults kube-apiserver sets on the built-in kinds operators create (its ``SetDefaults_*`` functions).

Applied to every create and update of a Pod, Service, Secret, PersistentVolumeClaim, workload (Deployment,
StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, with their pod templates), RoleBinding and admission webhook
configuration, before validation (as
kube decodes with defaulting).  Only fields that are unset are filled in.  Defaults that admission plugins or
controllers set (a Pod's ``serviceAccountName``, its tolerations, ``priority``) are not: like envtest, this server
runs no admission plugins beyond its own checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .resources import (
    CLUSTER_ROLE_BINDINGS,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    PODS,
    PVCS,
    REPLICASETS,
    ROLE_BINDINGS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    WEBHOOK_CONFIGURATIONS,
    ResourceType,
)

__all__ = ["apply_defaults", "pod_template_of"]

_PROBE: Final = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}


def _image_pull_policy(image: str) -> str:
    """``Always`` for an image without a tag or with ``:latest`` (a digest counts as a tag), else
    ``IfNotPresent``."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rpartition("/")[2]
    tag = last.partition(":")[2] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _container(container: dict[str, Any], in_pod: bool) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            for key, value in _PROBE.items():
                container[probe].setdefault(key, value)
    resources = container.get("resources")
    if in_pod and isinstance(resources, dict) and resources.get("limits"):
        # A Pod's requests default to its limits (SetDefaults_Pod), a template's do not.
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def _pod_spec(spec: dict[str, Any], in_pod: bool) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if in_pod:
        spec.setdefault("enableServiceLinks", True)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            if isinstance(container, dict):
                _container(container, in_pod)


def pod_template_of(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod template of a workload object (``spec.template``; a CronJob's
    ``spec.jobTemplate.spec.template``), or ``None``."""
    spec = obj.get("spec")
    if rt is CRONJOBS:
        spec = ((spec or {}).get("jobTemplate") or {}).get("spec")
    template = (spec or {}).get("template") if isinstance(spec, dict) else None
    return template if isinstance(template, dict) else None


def _rolling(spec: dict[str, Any], strategy_key: str, rolling: dict[str, Any]) -> None:
    strategy = spec.setdefault(strategy_key, {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        update = strategy.setdefault("rollingUpdate", {})
        for key, value in rolling.items():
            update.setdefault(key, value)


def _deployment(spec: dict[str, Any]) -> None:
    spec.setdefault("replicas", 1)
    _rolling(spec, "strategy", {"maxUnavailable": "25%", "maxSurge": "25%"})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def _statefulset(spec: dict[str, Any]) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    _rolling(spec, "updateStrategy", {"partition": 0})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})


def _daemonset(spec: dict[str, Any]) -> None:
    _rolling(spec, "updateStrategy", {"maxUnavailable": 1, "maxSurge": 0})
    spec.setdefault("revisionHistoryLimit", 10)


def _job(spec: dict[str, Any]) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")


def _cronjob(spec: dict[str, Any]) -> None:
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    job = (spec.get("jobTemplate") or {}).get("spec")
    if isinstance(job, dict):
        _job(job)


def _service(spec: dict[str, Any]) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "targetPort" not in port and "port" in port:
                port["targetPort"] = port["port"]
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")


_SPEC_DEFAULTS: Final[dict[str, Callable[[dict[str, Any]], None]]] = {
    DEPLOYMENTS.qualified_name: _deployment,
    STATEFULSETS.qualified_name: _statefulset,
    DAEMONSETS.qualified_name: _daemonset,
    REPLICASETS.qualified_name: lambda spec: spec.setdefault("replicas", 1),
    JOBS.qualified_name: _job,
    CRONJOBS.qualified_name: _cronjob,
    SERVICES.qualified_name: _service,
    PVCS.qualified_name: lambda spec: spec.setdefault("volumeMode", "Filesystem"),
}


def _webhooks(obj: dict[str, Any], mutating: bool) -> None:
    """``admissionregistration/v1``'s ``SetDefaults_ValidatingWebhook``/``SetDefaults_MutatingWebhook``."""
    for hook in obj.get("webhooks") or ():
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or ():
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Set kube's defaults on ``obj`` (decoded, of ``rt``) in place; fields already set are left alone."""
    spec = obj.get("spec")
    if rt is PODS:
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        _pod_spec(spec, in_pod=True)
    elif rt is SECRETS:
        obj.setdefault("type", "Opaque")
    elif rt is ROLE_BINDINGS or rt is CLUSTER_ROLE_BINDINGS:
        for subject in obj.get("subjects") or ():
            if isinstance(subject, dict) and subject.get("kind") in ("User", "Group"):
                subject.setdefault("apiGroup", "rbac.authorization.k8s.io")
    elif rt in WEBHOOK_CONFIGURATIONS:
        _webhooks(obj, mutating=rt is MUTATING_WEBHOOK_CONFIGURATIONS)
    fill = _SPEC_DEFAULTS.get(rt.qualified_name)
    if fill is not None:
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        fill(spec)
    template = pod_template_of(rt, obj)
    if template is not None and isinstance(template.get("spec"), dict):
        _pod_spec(template["spec"], in_pod=False)
