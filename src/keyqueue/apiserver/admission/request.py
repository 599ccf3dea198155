"""What an admission webhook is asked about: :class:`Attributes` of one write, and the ``AdmissionReview`` request
built from them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from ..objects import ResourceType

__all__ = ["ANONYMOUS", "Attributes", "review_request"]

#: The user of a request that carried no token (kube's anonymous user).
ANONYMOUS: Final = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
_OPTIONS_KINDS: Final = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


@dataclass
class Attributes:
    """One write as admission sees it (kube's ``admission.Attributes``).

    ``operation`` is ``CREATE``, ``UPDATE`` (a PUT or a PATCH) or ``DELETE``; ``obj`` the object to be written
    (``None`` for a delete), ``old`` the stored one (``None`` for a create); ``subresource`` ``""`` or ``status``.
    ``warnings`` collects the webhooks' warnings (answered as ``Warning`` headers).
    """

    rt: ResourceType
    operation: str
    namespace: str | None
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    subresource: str = ""
    dry_run: bool = False
    user: dict[str, Any] = field(default_factory=lambda: dict(ANONYMOUS))
    field_manager: str = ""
    propagation_policy: str = ""
    warnings: list[str] = field(default_factory=list)


def _options(attrs: Attributes) -> dict[str, Any]:
    options: dict[str, Any] = {"kind": _OPTIONS_KINDS[attrs.operation], "apiVersion": "meta.k8s.io/v1"}
    if attrs.dry_run:
        options["dryRun"] = ["All"]
    if attrs.operation != "DELETE" and attrs.field_manager:
        options["fieldManager"] = attrs.field_manager
    if attrs.operation == "DELETE" and attrs.propagation_policy:
        options["propagationPolicy"] = attrs.propagation_policy
    return options


def review_request(attrs: Attributes, version: str = "v1") -> dict[str, Any]:
    """The ``AdmissionReview`` (``admission.k8s.io/<version>``) a webhook is sent about ``attrs``, with a new
    ``request.uid``."""
    rt = attrs.rt
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.name}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": attrs.user,
        "object": attrs.obj,
        "oldObject": attrs.old,
        "dryRun": attrs.dry_run,
        "options": _options(attrs),
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview", "request": request}
