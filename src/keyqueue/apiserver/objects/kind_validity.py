"""The 422 checks of the built-in kinds with client-model specs (Pods, Services, workloads, RBAC, ...), with
kube-apiserver's field paths and messages.

What is checked (a subset of kube's ``validation.go`` files, the rules operators' tests run into):

* Pod specs (a Pod's, and every workload's pod template): ``containers`` required, each container's ``name`` (an
  RFC 1123 label, unique) and ``image`` required, ``restartPolicy`` and ``dnsPolicy`` among kube's values, port
  numbers in range;
* label selectors (``matchLabels`` as labels, ``matchExpressions`` operators and values);
* Deployments, ReplicaSets, StatefulSets, DaemonSets: ``selector`` required, non-empty and matching the template's
  labels, ``replicas`` not negative; on update the selector is immutable;
* Jobs: the template's ``restartPolicy`` ``OnFailure`` or ``Never``; on update ``selector`` and ``template`` are
  immutable (a suspended Job's template may change, as kube allows); CronJobs: ``schedule`` required;
* Services: a DNS-1035 name, ``type`` and ``sessionAffinity`` values, ports required (except headless and
  ExternalName) and in range; on update ``clusterIP``/``clusterIPs`` may not change;
* Pods: on update only container images, ``activeDeadlineSeconds``, ``tolerations`` and
  ``terminationGracePeriodSeconds`` may change;
* Secrets: ``data`` keys; on update ``type`` is immutable; RBAC: rules' ``verbs`` required, ``roleRef`` required
  and immutable; PodDisruptionBudgets: not both ``minAvailable`` and ``maxUnavailable``; Ingresses: each path's
  ``pathType``; EndpointSlices: ``addressType`` required and immutable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from ..validation import DNS1035_LABEL, DNS1123_LABEL, MSG_DNS1035_LABEL, MSG_DNS1123_LABEL, qualified_name_causes
from .defaults import pod_template_of
from .resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    INGRESSES,
    JOBS,
    PDBS,
    PODS,
    REPLICASETS,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    ResourceType,
)

__all__ = ["kind_causes", "kind_update_causes", "name_rule", "selector_causes", "selector_matches"]

_Cause = tuple[str, str, str]
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_DNS_POLICIES: Final = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_SERVICE_TYPES: Final = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_REPLICATED: Final = (DEPLOYMENTS, REPLICASETS, STATEFULSETS, DAEMONSETS)


def _required(field: str, detail: str = "") -> _Cause:
    return ("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def _invalid(field: str, shown: str, message: str) -> _Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {shown}: {message}")


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> _Cause:
    listed = ", ".join(json.dumps(s) for s in supported)
    return ("FieldValueNotSupported", field, f"Unsupported value: {json.dumps(value)}: supported values: {listed}")


def _go_map(value: Mapping[str, Any] | None) -> str:
    """A ``map[string]string`` as Go's ``%#v`` prints it."""
    return "map[string]string{" + ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in
                                             sorted((value or {}).items())) + "}"


def _go_selector(selector: Mapping[str, Any] | None) -> str:
    selector = selector or {}
    labels = _go_map(selector.get("matchLabels")) if selector.get("matchLabels") else "map[string]string(nil)"
    exprs = selector.get("matchExpressions")
    shown = ("[]v1.LabelSelectorRequirement{" + ", ".join(
        f"v1.LabelSelectorRequirement{{Key:{json.dumps(e.get('key', ''))}, Operator:{json.dumps(e.get('operator', ''))}"
        f", Values:{json.dumps(e.get('values') or [])}}}" for e in exprs if isinstance(e, Mapping)) + "}"
             if exprs else "[]v1.LabelSelectorRequirement(nil)")
    return f"v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{shown}}}"


def name_rule(rt: ResourceType) -> tuple[str, re.Pattern[str], str] | None:
    """``(what, pattern, message)`` of a kind whose names are labels rather than subdomains (Services: DNS-1035,
    StatefulSets: RFC 1123 labels, both at most 63 characters), else ``None``."""
    if rt is SERVICES:
        return "label", DNS1035_LABEL, MSG_DNS1035_LABEL
    if rt is STATEFULSETS:
        return "label", DNS1123_LABEL, MSG_DNS1123_LABEL
    return None


def _label_causes(field: str, labels: Mapping[str, Any]) -> list[_Cause]:
    causes: list[_Cause] = list()
    for key, value in labels.items():
        causes.extend(qualified_name_causes(field, key))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            causes.append(_invalid(field, json.dumps(value), "a valid label must be an empty string or consist of "
                                   "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                   "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
                                   "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"))
    return causes


def selector_causes(field: str, selector: Any) -> list[_Cause]:
    """apimachinery's ``ValidateLabelSelector``."""
    if not isinstance(selector, Mapping):
        return []
    causes = _label_causes(f"{field}.matchLabels", selector.get("matchLabels") or {})
    for i, expr in enumerate(selector.get("matchExpressions") or ()):
        at = f"{field}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            continue
        op, values = expr.get("operator"), expr.get("values") or []
        if op not in _SELECTOR_OPERATORS:
            causes.append(_invalid(f"{at}.operator", json.dumps(op or ""), "not a valid selector operator"))
        elif op in ("In", "NotIn") and not values:
            causes.append(_required(f"{at}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            causes.append(("FieldValueForbidden", f"{at}.values",
                           "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        causes.extend(qualified_name_causes(f"{at}.key", str(expr.get("key") or "")))
    return causes


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        if not isinstance(expr, Mapping):
            continue
        key, op, values = str(expr.get("key", "")), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if ((op == "In" and labels.get(key) not in values) or (op == "NotIn" and present and labels[key] in values)
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present)):
            return False
    return True


def _port_causes(field: str, port: Any) -> list[_Cause]:
    if isinstance(port, int) and not 1 <= port <= 65535:
        return [_invalid(field, str(port), "must be between 1 and 65535, inclusive")]
    return []


def _pod_spec_causes(field: str, spec: Any, restart_policies: tuple[str, ...] = _RESTART_POLICIES) -> list[_Cause]:
    if not isinstance(spec, Mapping):
        return [_required(field)]
    causes: list[_Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(_required(f"{field}.containers"))
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or ()):
            at = f"{field}.{key}[{i}]"
            if not isinstance(container, Mapping):
                continue
            name = container.get("name") or ""
            if not name:
                causes.append(_required(f"{at}.name"))
            elif len(name) > 63 or not DNS1123_LABEL.fullmatch(name):
                causes.append(_invalid(f"{at}.name", json.dumps(name), MSG_DNS1123_LABEL))
            elif name in names:
                causes.append(("FieldValueDuplicate", f"{at}.name", f"Duplicate value: {json.dumps(name)}"))
            names.add(name)
            if not container.get("image"):
                causes.append(_required(f"{at}.image"))
            for j, port in enumerate(container.get("ports") or ()):
                if isinstance(port, Mapping):
                    causes.extend(_port_causes(f"{at}.ports[{j}].containerPort", port.get("containerPort", 0)))
    policy = spec.get("restartPolicy")
    if policy not in restart_policies:
        causes.append(_unsupported(f"{field}.restartPolicy", policy, restart_policies))
    dns = spec.get("dnsPolicy")
    if dns not in _DNS_POLICIES:
        causes.append(_unsupported(f"{field}.dnsPolicy", dns, _DNS_POLICIES))
    return causes


def _replicated_causes(rt: ResourceType, obj: Mapping[str, Any]) -> list[_Cause]:
    spec = obj.get("spec") or {}
    causes: list[_Cause] = []
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        causes.append(_invalid("spec.replicas", str(replicas), "must be greater than or equal to 0"))
    selector = spec.get("selector")
    if not selector:
        causes.append(_required("spec.selector"))
    selector_problems = selector_causes("spec.selector", selector) if selector else []
    causes.extend(selector_problems)
    if selector and not selector.get("matchLabels") and not selector.get("matchExpressions"):
        causes.append(_invalid("spec.selector", _go_selector(selector), "empty selector is invalid for deployment"))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    # a selector that is itself invalid is not matched against the labels (kube cannot parse it either)
    if selector and not selector_problems and (selector.get("matchLabels") or selector.get("matchExpressions")) \
            and not selector_matches(selector, labels):
        causes.append(_invalid("spec.template.metadata.labels", _go_map(labels),
                               "`selector` does not match template `labels`"))
    policies = ("Always",) if rt is not REPLICASETS else _RESTART_POLICIES
    causes.extend(_pod_spec_causes("spec.template.spec", template.get("spec"), policies))
    return causes


def _service_causes(obj: Mapping[str, Any]) -> list[_Cause]:
    spec = obj.get("spec") or {}
    causes: list[_Cause] = []
    kind = spec.get("type")
    if kind not in _SERVICE_TYPES:
        causes.append(_unsupported("spec.type", kind, _SERVICE_TYPES))
    if spec.get("sessionAffinity") not in ("None", "ClientIP"):
        causes.append(_unsupported("spec.sessionAffinity", spec.get("sessionAffinity"), ("ClientIP", "None")))
    ports = spec.get("ports") or []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(_required("spec.ports"))
    if kind == "ExternalName" and not spec.get("externalName"):
        causes.append(_required("spec.externalName"))
    for i, port in enumerate(ports):
        if isinstance(port, Mapping):
            causes.extend(_port_causes(f"spec.ports[{i}].port", port.get("port", 0)))
            if len(ports) > 1 and not port.get("name"):
                causes.append(_required(f"spec.ports[{i}].name"))
    return causes


def kind_causes(rt: ResourceType, obj: Mapping[str, Any]) -> list[_Cause]:
    """The 422 causes of ``obj`` (decoded and defaulted, of ``rt``) on a create or update; ``[]`` if valid or of a
    type without rules here."""
    spec = obj.get("spec") or {}
    if rt is PODS:
        return _pod_spec_causes("spec", obj.get("spec"))
    if rt in _REPLICATED:
        return _replicated_causes(rt, obj)
    if rt is JOBS:
        return (selector_causes("spec.selector", spec.get("selector"))
                + _pod_spec_causes("spec.template.spec", (spec.get("template") or {}).get("spec"),
                                   ("OnFailure", "Never")))
    if rt is CRONJOBS:
        causes = [] if spec.get("schedule") else [_required("spec.schedule")]
        template = pod_template_of(rt, dict(obj)) or {}
        return causes + _pod_spec_causes("spec.jobTemplate.spec.template.spec", template.get("spec"),
                                         ("OnFailure", "Never"))
    if rt is SERVICES:
        return _service_causes(obj)
    if rt is SECRETS:
        return [("FieldValueInvalid", f"data[{key}]", f'Invalid value: "{key}": a valid config key must consist '
                 "of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', "
                 "regex used for validation is '[-._a-zA-Z0-9]+')")
                for key in obj.get("data") or {} if not re.fullmatch(r"[-._a-zA-Z0-9]+", key)]
    if rt in (ROLES, CLUSTER_ROLES):
        return [_required(f"rules[{i}].verbs", "verbs must contain at least one value")
                for i, rule in enumerate(obj.get("rules") or ()) if isinstance(rule, Mapping) and not rule.get("verbs")]
    if rt in (ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS):
        ref = obj.get("roleRef") or {}
        causes = [_required(f"roleRef.{key}") for key in ("kind", "name") if not ref.get(key)]
        kinds = ("Role", "ClusterRole") if rt is ROLE_BINDINGS else ("ClusterRole",)
        if ref.get("kind") and ref["kind"] not in kinds:
            causes.append(_unsupported("roleRef.kind", ref["kind"], kinds))
        return causes
    if rt is PDBS:
        causes = selector_causes("spec.selector", spec.get("selector"))
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            causes.append(_invalid("spec", json.dumps(spec, sort_keys=True),
                                   "minAvailable and maxUnavailable cannot be both set"))
        return causes
    if rt is INGRESSES:
        return [_required(f"spec.rules[{i}].http.paths[{j}].pathType", "pathType must be specified")
                for i, rule in enumerate(spec.get("rules") or ()) if isinstance(rule, Mapping)
                for j, path in enumerate((rule.get("http") or {}).get("paths") or ())
                if isinstance(path, Mapping) and not path.get("pathType")]
    if rt is ENDPOINT_SLICES and not obj.get("addressType"):
        return [_required("addressType")]
    return []


def _immutable(field: str, shown: str) -> _Cause:
    return _invalid(field, shown, "field is immutable")


_POD_UPDATE_FORBIDDEN: Final = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
    "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _pod_spec_mutable_masked(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod spec without the fields an update may change (kube's ``ValidatePodUpdate``): container images,
    ``activeDeadlineSeconds``, ``tolerations`` and ``terminationGracePeriodSeconds``."""
    out = {k: v for k, v in spec.items()
           if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")}
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, Mapping) else c
                        for c in out[key]]
    return out


def kind_update_causes(rt: ResourceType, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[_Cause]:
    """The 422 causes of changing ``old`` into ``new`` (both of ``rt``): the immutable fields, and a Pod spec's
    fields other than those an update may change."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes: list[_Cause] = []
    if rt is PODS and _pod_spec_mutable_masked(new_spec) != _pod_spec_mutable_masked(old_spec):
        causes.append(("FieldValueForbidden", "spec", _POD_UPDATE_FORBIDDEN))
    if (rt in _REPLICATED or rt is JOBS) and new_spec.get("selector") != old_spec.get("selector"):
        causes.append(_immutable("spec.selector", _go_selector(new_spec.get("selector"))))
    if rt is JOBS and new_spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
        causes.append(_immutable("spec.template", "core.PodTemplateSpec{...}"))
    if rt is SERVICES:
        old_ips, new_ips = old_spec.get("clusterIPs") or [], new_spec.get("clusterIPs") or []
        if old_ips and new_ips[:1] != old_ips[:1]:
            causes.append(_invalid("spec.clusterIPs[0]", "[]string{" + ", ".join(json.dumps(ip) for ip in new_ips)
                                   + "}", "may not change once set"))
        elif old_spec.get("clusterIP") and new_spec.get("clusterIP") != old_spec.get("clusterIP"):
            causes.append(_immutable("spec.clusterIP", json.dumps(new_spec.get("clusterIP", ""))))
    if rt is SECRETS and new.get("type") != old.get("type"):
        causes.append(_immutable("type", json.dumps(new.get("type", ""))))
    if rt in (ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS) and new.get("roleRef") != old.get("roleRef"):
        causes.append(_invalid("roleRef", json.dumps(new.get("roleRef")), "cannot change roleRef"))
    if rt is ENDPOINT_SLICES and new.get("addressType") != old.get("addressType"):
        causes.append(_immutable("addressType", json.dumps(new.get("addressType", ""))))
    return causes
