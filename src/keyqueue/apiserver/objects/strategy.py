"""The registry strategies of the built-in kinds with client-model specs (Pods, Services, Deployments, ...): what
kube-apiserver's ``PrepareForCreate``/``PrepareForUpdate`` do to an object before it is validated and stored.

* defaults (:mod:`.defaults`);
* the ``status`` subresource (:attr:`~.resources.ResourceType.status`): a create starts with kube's initial status
  (a Pod ``Pending`` with its QoS class, a Service an empty load balancer, a claim ``Pending``, no status for the
  others); an update through the main endpoint keeps the stored status, one through ``/status`` keeps everything
  but the status (metadata included, as kube's ``ResetObjectMetaForStatus``);
* ``metadata.generation``: 1 on create, one more on each update that changes ``spec`` (and any other field but
  ``metadata`` and ``status``), for the kinds whose controllers observe it (workloads, Pods, Ingresses,
  PodDisruptionBudgets) and the admission webhook configurations;
* a Job's generated selector and pod labels (unless ``spec.manualSelector``);
* a Secret's write-only ``stringData`` merged into ``data`` (base64);
* a Service's ``clusterIP``/``clusterIPs`` allocated on create (ClusterIP, NodePort and LoadBalancer types), and
  kept from the stored object when an update leaves them unset; a NodePort or LoadBalancer Service's
  node ports.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import secrets
from collections.abc import Mapping
from typing import Any, Final

from ..custom import keep_all_but_status
from .defaults import apply_defaults
from .resources import INGRESSES, JOBS, PDBS, PODS, PVCS, SECRETS, SERVICES, WEBHOOK_CONFIGURATIONS, ResourceType

__all__ = ["prepare_builtin"]

_NO_GENERATION: Final = frozenset({SERVICES.qualified_name, PVCS.qualified_name})
_SERVICE_RANGE: Final = ipaddress.ip_network("10.96.0.0/12")


def _tracks_generation(rt: ResourceType) -> bool:
    return (rt.status and rt.qualified_name not in _NO_GENERATION) or rt in (INGRESSES, PDBS, *WEBHOOK_CONFIGURATIONS)


def _qos_class(spec: Mapping[str, Any]) -> str:
    """kube's ``GetPodQOS``: BestEffort without requests and limits, Guaranteed when every container limits cpu and
    memory with requests equal to the limits, Burstable otherwise."""
    containers = [c for key in ("initContainers", "containers") for c in spec.get(key) or () if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if limits or requests:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _initial_status(rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt is PODS:
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj.get("spec") or {})}
    elif rt is SERVICES:
        obj["status"] = {"loadBalancer": {}}
    elif rt is PVCS:
        obj["status"] = {"phase": "Pending"}
    else:
        obj.pop("status", None)


def _job_selector(obj: dict[str, Any]) -> None:
    """kube's ``generateSelector``: the Job's uid selects its pods, whose template gets the matching labels."""
    spec = obj.setdefault("spec", {})
    if spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    uid, name = meta.get("uid", ""), meta.get("name", "")
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    for key, value in (("batch.kubernetes.io/controller-uid", uid), ("batch.kubernetes.io/job-name", name),
                       ("controller-uid", uid), ("job-name", name)):
        labels.setdefault(key, value)
    if "selector" not in spec:
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def _secret_string_data(obj: dict[str, Any]) -> None:
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _allocate_cluster_ip() -> str:
    """A random address of the service range (10.96.0.0/12, its first ten left out as kube reserves the first
    for the ``kubernetes`` Service).  Not checked for uniqueness: with a million addresses a test suite's Services
    practically never collide."""
    offset = 10 + secrets.randbelow(_SERVICE_RANGE.num_addresses - 11)
    return str(_SERVICE_RANGE.network_address + offset)


def _node_ports(spec: dict[str, Any], old_spec: Mapping[str, Any]) -> None:
    """A NodePort or LoadBalancer Service's ports get a ``nodePort`` (kept from the stored port of the same
    ``port`` on update, else random in kube's 30000-32767, not checked for uniqueness)."""
    if spec.get("type") not in ("NodePort", "LoadBalancer"):
        return
    kept = {p.get("port"): p.get("nodePort") for p in old_spec.get("ports") or () if isinstance(p, Mapping)}
    for port in spec.get("ports") or ():
        if isinstance(port, dict) and not port.get("nodePort"):
            port["nodePort"] = kept.get(port.get("port")) or 30000 + secrets.randbelow(2768)


def _service_ips(obj: dict[str, Any], old: Mapping[str, Any] | None) -> None:
    spec = obj.setdefault("spec", {})
    if spec.get("type") == "ExternalName":
        return
    _node_ports(spec, (old or {}).get("spec") or {})
    if old is not None:
        old_spec = old.get("spec") or {}
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key not in spec and key in old_spec:
                spec[key] = copy.deepcopy(old_spec[key])
        return
    ips = spec.get("clusterIPs") or []
    if "clusterIP" not in spec:
        spec["clusterIP"] = ips[0] if ips else _allocate_cluster_ip()
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] != "None":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")


def prepare_builtin(rt: ResourceType, obj: dict[str, Any], old: Mapping[str, Any] | None,
                    subresource: str = "") -> None:
    """The strategy of a write of ``obj`` (decoded, of ``rt``; ``old`` the stored object of an update, ``None``
    on a create) through the main endpoint (``subresource`` ``""``) or ``/status``, in place (see the module
    docstring).  Does nothing for a type without a client :attr:`~.resources.ResourceType.model`."""
    if not rt.model:
        return
    if old is not None and subresource == "status":
        keep_all_but_status(obj, old)
        return
    if rt is SECRETS:
        _secret_string_data(obj)
    if rt is SERVICES:
        _service_ips(obj, old)
    if old is None and rt is JOBS:
        _job_selector(obj)
    apply_defaults(rt, obj)
    if rt.status:
        if old is None:
            _initial_status(rt, obj)
        elif "status" in old:
            obj["status"] = copy.deepcopy(old["status"])
        else:
            obj.pop("status", None)
    if not _tracks_generation(rt):
        return
    if old is None:
        obj["metadata"]["generation"] = 1
        return
    changed = ({k: v for k, v in obj.items() if k not in ("metadata", "status")}
               != {k: v for k, v in old.items() if k not in ("metadata", "status")})
    generation = int(old["metadata"].get("generation") or 1)
    obj["metadata"]["generation"] = generation + 1 if changed else generation
