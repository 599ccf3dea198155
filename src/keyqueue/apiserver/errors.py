"""Kubernetes ``Status`` errors (``metav1.Status`` with ``status: Failure``)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "APIError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "internal_error",
    "invalid",
    "method_not_allowed",
    "namespace_terminating",
    "not_found",
    "path_not_found",
    "request_entity_too_large",
    "success_status",
    "too_large_resource_version",
    "unauthorized",
    "unsupported_media_type",
]


class APIError(Exception):
    """An error answered to the client as a Kubernetes ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.list_meta: dict[str, Any] = {}  # the Status's metadata (e.g. a fresh continue token with a 410)

    def status(self) -> dict[str, Any]:
        """Return the ``Status`` object for this error."""
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(resource: str, name: str) -> dict[str, Any]:
    """``resource`` is ``configmaps`` or, for a named group, ``leases.coordination.k8s.io``."""
    plural, _, group = resource.partition(".")
    return {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": resource}


def not_found(resource: str, name: str) -> APIError:
    return APIError(404, "NotFound", f'{resource} "{name}" not found', _details(resource, name))


def path_not_found() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, name: str) -> APIError:
    return APIError(409, "AlreadyExists", f'{resource} "{name}" already exists', _details(resource, name))


def conflict(resource: str, name: str, why: str) -> APIError:
    return APIError(
        409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {why}', _details(resource, name)
    )


def invalid(kind: str, resource: str, name: str, causes: list[tuple[str, str, str]]) -> APIError:
    """422 Invalid.  ``causes`` are ``(reason, field, message)``, e.g. ``("FieldValueInvalid", ...)``.  ``kind`` is
    the (group-qualified) kind the message names, ``Widget.example.com``; the details carry its kind and group
    apart, as kube's ``NewInvalid`` does (kubectl prints ``The Widget "x" is invalid``)."""
    parts = [f"{field}: {message}" for _, field, message in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    bare, _, group = kind.partition(".")
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = bare
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    del resource  # the details of an Invalid error name the kind, not the resource
    return APIError(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def forbidden(resource: str, name: str, why: str) -> APIError:
    return APIError(403, "Forbidden", f'{resource} "{name}" is forbidden: {why}', _details(resource, name))


def namespace_terminating(resource: str, name: str, namespace: str) -> APIError:
    """403 for a create in a namespace that is being deleted (kube-apiserver's NamespaceLifecycle admission)."""
    return APIError(
        403, "Forbidden",
        f'{resource} "{name}" is forbidden: unable to create new content in namespace {namespace} because it is '
        "being terminated",
        {"name": name, "kind": resource, "causes": [
            {"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being terminated",
             "field": "metadata.namespace"}]},
    )


def unsupported_media_type(content_type: str, accepted: list[str]) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
        {"causes": [{"reason": "UnsupportedMediaType", "message": content_type}]},
    )


def method_not_allowed(method: str) -> APIError:
    message = f"the server does not allow this method on the requested resource ({method})"
    return APIError(405, "MethodNotAllowed", message, {})


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def internal_error(message: str) -> APIError:
    return APIError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def request_entity_too_large(message: str) -> APIError:
    """413: an object the store refuses as too large (kube's reason and code for a body over its limit)."""
    return APIError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def too_large_resource_version(requested: int, current: int) -> APIError:
    return APIError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
         "retryAfterSeconds": 1},
    )


def success_status(resource: str, name: str, uid: str) -> dict[str, Any]:
    """The ``Status`` a delete answers for resources that are removed at once."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "kind": resource, "uid": uid},
    }
