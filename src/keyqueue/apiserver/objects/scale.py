"""The ``autoscaling/v1`` Scale of a workload's ``/scale`` subresource: ``spec.replicas`` of the object, its
``status.replicas`` and its label selector as a string (what ``kubectl scale`` and autoscalers read and write)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import bad_request, invalid
from .resources import ResourceType

__all__ = ["scale_of", "scale_replicas"]


def _selector_string(selector: Mapping[str, Any]) -> str:
    """A ``LabelSelector`` in the string form (``app=web,tier in (a,b)``)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key", ""), expr.get("operator", ""), sorted(expr.get("values") or ())
        if op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append("!" + key)
        else:
            parts.append(f"{key} {'in' if op == 'In' else 'notin'} ({','.join(values)})")
    return ",".join(parts)


def scale_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Scale of a stored workload ``obj``."""
    meta = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                  if k in meta}
    out_status: dict[str, Any] = {"replicas": int(status.get("replicas") or 0)}
    selector = _selector_string(spec.get("selector") or {})
    if selector:
        out_status["selector"] = selector
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta,
            "spec": {"replicas": int(spec.get("replicas") or 0)}, "status": out_status}


def scale_replicas(rt: ResourceType, name: str, body: Any) -> tuple[int, str]:
    """``(spec.replicas, metadata.resourceVersion)`` of a Scale request body; 400 for a body that is not a Scale,
    422 for a negative or non-integer count."""
    if not isinstance(body, dict) or body.get("kind", "Scale") != "Scale":
        raise bad_request("the body of the request must be a Scale object")
    spec = body.get("spec") or {}
    replicas = spec.get("replicas", 0) if isinstance(spec, dict) else None
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise bad_request('Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal into Go '
                          "struct field ScaleSpec.spec.replicas of type int32")
    if replicas < 0:
        raise invalid("Scale", rt.qualified_name, name, [(
            "FieldValueInvalid", "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")])
    rv = (body.get("metadata") or {}).get("resourceVersion", "")
    return replicas, str(rv or "")
