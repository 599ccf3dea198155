"""The Table columns of the built-in kinds with client-model specs, as kube-apiserver's printers define them
(``kubectl get pods`` shows NAME READY STATUS RESTARTS AGE, ``-o wide`` adds the priority-1 columns).

Each entry is a list of ``(column definition, cell)``; a cell is computed from the object and the current time.
Since no controller runs here, most status-derived cells show what an unreconciled object shows (``0/1``,
``Pending``, ``<none>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from .resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    ENDPOINTS,
    INGRESSES,
    JOBS,
    PDBS,
    PODS,
    PVCS,
    REPLICASETS,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    STATEFULSETS,
)
from .times import age, parse_time

__all__ = ["KIND_COLUMNS", "NAME_COLUMN", "since"]

_Cell = Callable[[Mapping[str, Any], float], Any]
_Columns = list[tuple[dict[str, Any], _Cell]]

NAME_COLUMN: Final = {
    "name": "Name", "type": "string", "format": "name", "priority": 0,
    "description": "Name must be unique within a namespace.",
}


def since(value: Any, now: float) -> str:
    """The age of the timestamp ``value`` at ``now``, as kubectl shows it; ``<unknown>`` if unset."""
    when = parse_time(value) if isinstance(value, str) else None
    return age(now - when) if when is not None else "<unknown>"


def _col(name: str, kind: str = "string", priority: int = 0, description: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": "", "priority": priority, "description": description}


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def _name(obj: Mapping[str, Any], now: float) -> Any:
    return _get(obj, "metadata", "name") or ""


def _age(obj: Mapping[str, Any], now: float) -> Any:
    return since(_get(obj, "metadata", "creationTimestamp"), now)


def _int(*path: str) -> _Cell:
    return lambda obj, now: int(_get(obj, *path) or 0)


def _text(*path: str, empty: str = "<none>") -> _Cell:
    def cell(obj: Mapping[str, Any], now: float) -> Any:
        value = _get(obj, *path)
        return empty if value in (None, "", [], {}) else str(value)
    return cell


def _join(values: Any) -> str:
    return ",".join(str(v) for v in values) if values else "<none>"


def _selector_text(selector: Any) -> str:
    if not isinstance(selector, Mapping) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        values = ",".join(expr.get("values") or ())
        op = {"In": "in", "NotIn": "notin"}.get(expr.get("operator", ""), "")
        parts.append(f"{expr.get('key')} {op} ({values})" if op else
                     (expr.get("key", "") if expr.get("operator") == "Exists" else "!" + expr.get("key", "")))
    return ",".join(parts)


def _template_columns(*template_path: str) -> _Columns:
    """The wide columns of a workload: its containers, their images and its selector."""
    def containers(obj: Mapping[str, Any], now: float) -> Any:
        return _join(c.get("name") for c in _get(obj, *template_path, "spec", "containers") or ())

    def images(obj: Mapping[str, Any], now: float) -> Any:
        return _join(c.get("image") for c in _get(obj, *template_path, "spec", "containers") or ())

    return [(_col("Containers", priority=1, description="Names of each container in the template."), containers),
            (_col("Images", priority=1, description="Images referenced by each container in the template."),
             images),
            (_col("Selector", priority=1, description="Label selector."),
             lambda obj, now: _selector_text(_get(obj, "spec", "selector")))]


def _pod_status(obj: Mapping[str, Any], now: float) -> Any:
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        detail = (state.get("waiting") or {}).get("reason") or (state.get("terminated") or {}).get("reason")
        if detail:
            reason = detail
    if _get(obj, "metadata", "deletionTimestamp") and reason != "NodeLost":
        reason = "Terminating"
    return reason


def _pod_ready(obj: Mapping[str, Any], now: float) -> Any:
    statuses = _get(obj, "status", "containerStatuses") or ()
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{len(_get(obj, 'spec', 'containers') or ())}"


def _pod_restarts(obj: Mapping[str, Any], now: float) -> Any:
    return str(sum(int(s.get("restartCount") or 0) for s in _get(obj, "status", "containerStatuses") or ()))


def _service_external(obj: Mapping[str, Any], now: float) -> Any:
    spec = obj.get("spec") or {}
    kind = spec.get("type")
    if kind == "ExternalName":
        return spec.get("externalName") or "<none>"
    ips = list(spec.get("externalIPs") or ())
    if kind == "LoadBalancer":
        ips += [i.get("ip") or i.get("hostname") for i in _get(obj, "status", "loadBalancer", "ingress") or ()]
        return ",".join(ips) if ips else "<pending>"
    return ",".join(ips) if ips else "<none>"


def _service_ports(obj: Mapping[str, Any], now: float) -> Any:
    ports = []
    for port in _get(obj, "spec", "ports") or ():
        node = f":{port['nodePort']}" if port.get("nodePort") else ""
        ports.append(f"{port.get('port')}{node}/{port.get('protocol', 'TCP')}")
    return ",".join(ports) if ports else "<none>"


def _endpoints(obj: Mapping[str, Any], now: float) -> Any:
    found = [f"{a.get('ip')}:{p.get('port')}" if subset.get("ports") else str(a.get("ip"))
             for subset in obj.get("subsets") or () for a in subset.get("addresses") or ()
             for p in (subset.get("ports") or [{}])]
    return ",".join(found) if found else "<none>"


def _ready_of(*, desired: tuple[str, ...], ready: tuple[str, ...]) -> _Cell:
    return lambda obj, now: f"{int(_get(obj, *ready) or 0)}/{int(_get(obj, *desired) or 0)}"


def _job_status(obj: Mapping[str, Any], now: float) -> Any:
    for condition in _get(obj, "status", "conditions") or ():
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed", "Suspended"):
            return str(condition["type"])
    return "Running"


def _job_completions(obj: Mapping[str, Any], now: float) -> Any:
    completions = _get(obj, "spec", "completions")
    succeeded = int(_get(obj, "status", "succeeded") or 0)
    if completions is not None:
        return f"{succeeded}/{completions}"
    return f"{succeeded}/1 of {_get(obj, 'spec', 'parallelism') or 1}"


def _binding_subjects(kind: str) -> _Cell:
    def cell(obj: Mapping[str, Any], now: float) -> Any:
        found = [(f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount" else s.get("name"))
                 for s in obj.get("subjects") or () if s.get("kind") == kind]
        return ", ".join(found)
    return cell


_AGE: Final = (_col("Age", description="CreationTimestamp is a timestamp representing the server time when this "
                    "object was created."), _age)
_NAME: Final = (NAME_COLUMN, _name)
_CREATED_AT: Final = (_col("Created At", "date", description="CreationTimestamp is a timestamp representing the "
                           "server time when this object was created."),
                      lambda obj, now: _get(obj, "metadata", "creationTimestamp") or "")
_ROLE_BINDING_COLUMNS: Final[_Columns] = [
    _NAME,
    (_col("Role", description="Role of the binding."),
     lambda obj, now: f"{_get(obj, 'roleRef', 'kind')}/{_get(obj, 'roleRef', 'name')}"),
    _AGE,
    (_col("Users", priority=1, description="Users in the binding."), _binding_subjects("User")),
    (_col("Groups", priority=1, description="Groups in the binding."), _binding_subjects("Group")),
    (_col("ServiceAccounts", priority=1, description="ServiceAccounts in the binding."),
     _binding_subjects("ServiceAccount")),
]

#: Columns by type (qualified name).
KIND_COLUMNS: Final[dict[str, _Columns]] = {
    PODS.qualified_name: [
        _NAME,
        (_col("Ready", description="The aggregate readiness state of this pod for accepting traffic."), _pod_ready),
        (_col("Status", description="The aggregate status of the containers in this pod."), _pod_status),
        (_col("Restarts", description="The number of times the containers in this pod have been restarted."),
         _pod_restarts),
        _AGE,
        (_col("IP", priority=1, description="IP address allocated to the pod."), _text("status", "podIP")),
        (_col("Node", priority=1, description="Name of the Node this pod is assigned to."),
         _text("spec", "nodeName")),
        (_col("Nominated Node", priority=1, description="Name of the Node nominated for this pod."),
         _text("status", "nominatedNodeName")),
        (_col("Readiness Gates", priority=1, description="Pod readiness gates."),
         lambda obj, now: _join(g.get("conditionType") for g in _get(obj, "spec", "readinessGates") or ())),
    ],
    SERVICES.qualified_name: [
        _NAME,
        (_col("Type", description="The type of the service."), _text("spec", "type")),
        (_col("Cluster-IP", description="The cluster IP of the service."), _text("spec", "clusterIP")),
        (_col("External-IP", description="The external IP addresses of the service."), _service_external),
        (_col("Port(s)", description="The ports of the service."), _service_ports),
        _AGE,
        (_col("Selector", priority=1, description="The selector of the service."),
         lambda obj, now: ",".join(f"{k}={v}" for k, v in sorted((_get(obj, "spec", "selector") or {}).items()))
         or "<none>"),
    ],
    SECRETS.qualified_name: [
        _NAME,
        (_col("Type", description="The type of the secret."), _text("type", empty="")),
        (_col("Data", "integer", description="The number of keys in the secret."),
         lambda obj, now: len(obj.get("data") or {})),
        _AGE,
    ],
    SERVICE_ACCOUNTS.qualified_name: [
        _NAME,
        (_col("Secrets", "integer", description="The number of secrets of the service account."),
         lambda obj, now: len(obj.get("secrets") or ())),
        _AGE,
    ],
    ENDPOINTS.qualified_name: [
        _NAME, (_col("Endpoints", description="Endpoints of the service."), _endpoints), _AGE,
    ],
    PVCS.qualified_name: [
        _NAME,
        (_col("Status", description="The phase of the claim."), _text("status", "phase", empty="")),
        (_col("Volume", description="The volume bound to the claim."), _text("spec", "volumeName", empty="")),
        (_col("Capacity", description="The capacity of the bound volume."),
         lambda obj, now: _get(obj, "status", "capacity", "storage") or ""),
        (_col("Access Modes", description="The access modes of the bound volume."),
         lambda obj, now: ",".join({"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX",
                                    "ReadWriteOncePod": "RWOP"}.get(m, m)
                                   for m in _get(obj, "status", "accessModes") or ())),
        (_col("StorageClass", description="The storage class of the claim."),
         _text("spec", "storageClassName")),
        (_col("VolumeAttributesClass", description="The volume attributes class of the claim."),
         _text("spec", "volumeAttributesClassName")),
        _AGE,
        (_col("VolumeMode", priority=1, description="The volume mode of the claim."),
         _text("spec", "volumeMode", empty="")),
    ],
    DEPLOYMENTS.qualified_name: [
        _NAME,
        (_col("Ready", description="Number of the pod with ready state."),
         _ready_of(desired=("spec", "replicas"), ready=("status", "readyReplicas"))),
        (_col("Up-to-date", "integer", description="Total number of non-terminated pods targeted by this "
              "deployment that have the desired template spec."), _int("status", "updatedReplicas")),
        (_col("Available", "integer", description="Total number of available pods (ready for at least "
              "minReadySeconds) targeted by this deployment."), _int("status", "availableReplicas")),
        _AGE,
        *_template_columns("spec", "template"),
    ],
    STATEFULSETS.qualified_name: [
        _NAME,
        (_col("Ready", description="Number of the pod with ready state."),
         _ready_of(desired=("spec", "replicas"), ready=("status", "readyReplicas"))),
        _AGE,
        *_template_columns("spec", "template")[:2],
    ],
    DAEMONSETS.qualified_name: [
        _NAME,
        (_col("Desired", "integer", description="The desired number of daemon pods."),
         _int("status", "desiredNumberScheduled")),
        (_col("Current", "integer", description="The number of nodes running a daemon pod."),
         _int("status", "currentNumberScheduled")),
        (_col("Ready", "integer", description="The number of nodes with a ready daemon pod."),
         _int("status", "numberReady")),
        (_col("Up-to-date", "integer", description="The number of nodes running the updated daemon pod."),
         _int("status", "updatedNumberScheduled")),
        (_col("Available", "integer", description="The number of nodes with an available daemon pod."),
         _int("status", "numberAvailable")),
        (_col("Node Selector", description="The node selector of the daemon pods."),
         lambda obj, now: ",".join(f"{k}={v}" for k, v in sorted(
             (_get(obj, "spec", "template", "spec", "nodeSelector") or {}).items())) or "<none>"),
        _AGE,
        *_template_columns("spec", "template"),
    ],
    REPLICASETS.qualified_name: [
        _NAME,
        (_col("Desired", "integer", description="Number of desired pods."), _int("spec", "replicas")),
        (_col("Current", "integer", description="Number of actual replicas."), _int("status", "replicas")),
        (_col("Ready", "integer", description="The number of ready replicas."), _int("status", "readyReplicas")),
        _AGE,
        *_template_columns("spec", "template"),
    ],
    JOBS.qualified_name: [
        _NAME,
        (_col("Status", description="Status of the job."), _job_status),
        (_col("Completions", description="The desired number of successfully finished pods the job should be "
              "run with."), _job_completions),
        (_col("Duration", description="Time required to complete the job."),
         lambda obj, now: since(_get(obj, "status", "startTime"), now) if _get(obj, "status", "startTime")
         else ""),
        _AGE,
        *_template_columns("spec", "template"),
    ],
    CRONJOBS.qualified_name: [
        _NAME,
        (_col("Schedule", description="The schedule in Cron format."), _text("spec", "schedule", empty="")),
        (_col("Timezone", description="The time zone of the schedule."), _text("spec", "timeZone")),
        (_col("Suspend", "boolean", description="Whether the cron job is suspended."),
         lambda obj, now: bool(_get(obj, "spec", "suspend"))),
        (_col("Active", "integer", description="The number of running jobs."),
         lambda obj, now: len(_get(obj, "status", "active") or ())),
        (_col("Last Schedule", description="When the job was last scheduled."),
         lambda obj, now: since(_get(obj, "status", "lastScheduleTime"), now)
         if _get(obj, "status", "lastScheduleTime") else "<none>"),
        _AGE,
        *_template_columns("spec", "jobTemplate", "spec", "template"),
    ],
    INGRESSES.qualified_name: [
        _NAME,
        (_col("Class", description="The ingress class."), _text("spec", "ingressClassName")),
        (_col("Hosts", description="Hosts that incoming requests are matched against."),
         lambda obj, now: ",".join(r.get("host") or "*" for r in _get(obj, "spec", "rules") or ()) or "*"),
        (_col("Address", description="Address is a list containing ingress points for the load-balancer."),
         lambda obj, now: ",".join(i.get("ip") or i.get("hostname") or ""
                                   for i in _get(obj, "status", "loadBalancer", "ingress") or ())),
        (_col("Ports", description="Ports of TLS configurations that open."),
         lambda obj, now: "80, 443" if _get(obj, "spec", "tls") else "80"),
        _AGE,
    ],
    PDBS.qualified_name: [
        _NAME,
        (_col("Min Available", description="The minimum number or percentage of available pods."),
         _text("spec", "minAvailable", empty="N/A")),
        (_col("Max Unavailable", description="The maximum number or percentage of unavailable pods."),
         _text("spec", "maxUnavailable", empty="N/A")),
        (_col("Allowed Disruptions", "integer", description="Number of pod disruptions that are allowed."),
         _int("status", "disruptionsAllowed")),
        _AGE,
    ],
    ROLES.qualified_name: [_NAME, _CREATED_AT],
    CLUSTER_ROLES.qualified_name: [_NAME, _CREATED_AT],
    ROLE_BINDINGS.qualified_name: _ROLE_BINDING_COLUMNS,
    CLUSTER_ROLE_BINDINGS.qualified_name: _ROLE_BINDING_COLUMNS,
    ENDPOINT_SLICES.qualified_name: [
        _NAME,
        (_col("AddressType", description="The type of address carried by this EndpointSlice."),
         _text("addressType", empty="")),
        (_col("Ports", description="Port numbers available on the related service."),
         lambda obj, now: ",".join(str(p.get("port")) for p in obj.get("ports") or ()) or "<unset>"),
        (_col("Endpoints", description="Addresses of the endpoints."),
         lambda obj, now: ",".join(a for e in obj.get("endpoints") or () for a in e.get("addresses") or ())
         or "<unset>"),
        _AGE,
    ],
}
