"""Lease reads and writes through the official ``kubernetes`` client, as raw JSON dicts (blocking calls)."""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = ["LeaseAPIError", "LeaseClient", "LeaseConflict"]


class LeaseAPIError(Exception):
    """A Lease request failed (server unreachable, timeout, 5xx, ...). ``status`` is the HTTP status or 0."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class LeaseConflict(LeaseAPIError):
    """409: the update's resourceVersion was stale, or the create found the Lease existing (a lost race)."""


class LeaseClient:
    """GET/POST/PUT of one Lease with ``CoordinationV1Api`` on ``api_client`` (a ``kubernetes.client.ApiClient``).

    Every call takes a ``timeout`` in seconds (the client's ``_request_timeout``) and raises
    :class:`LeaseConflict` for 409, :class:`LeaseAPIError` for any other failure. The requests go through a
    private ``ApiClient`` on a copy of ``api_client``'s configuration with urllib3's retries off: otherwise a
    hung server could hold one call for several timeouts (urllib3 retries idempotent requests), and a leader's
    step-down would come late. :meth:`close` closes that client.
    """

    def __init__(self, api_client: Any, name: str, namespace: str) -> None:
        from kubernetes import client

        self.name = name
        self.namespace = namespace
        conf = copy.deepcopy(api_client.configuration)
        conf.retries = False
        self._client = client.ApiClient(conf)
        self._client.default_headers.update(getattr(api_client, "default_headers", {}) or {})
        self._api = client.CoordinationV1Api(self._client)
        self._api_exception: type[Exception] = client.ApiException

    def close(self) -> None:
        """Close the private ``ApiClient`` (its connections)."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def _call(self, fn: Any, *args: Any, timeout: float) -> dict[str, Any]:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=timeout)
            data: dict[str, Any] = json.loads(resp.data)
            return data
        except self._api_exception as exc:
            status = int(getattr(exc, "status", 0) or 0)
            kind = LeaseConflict if status == 409 else LeaseAPIError
            raise kind(f"lease {self.namespace}/{self.name}: HTTP {status}: {getattr(exc, 'reason', '')}",
                       status) from None
        except Exception as exc:  # urllib3 connection errors, timeouts, bad JSON
            raise LeaseAPIError(f"lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}") from None

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The Lease, or ``None`` if it does not exist (404)."""
        try:
            return self._call(self._api.read_namespaced_lease, self.name, self.namespace, timeout=timeout)
        except LeaseAPIError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self._call(self._api.create_namespaced_lease, self.namespace, body, timeout=timeout)

    def update(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """PUT ``body``; its ``metadata.resourceVersion`` makes it a compare-and-swap (409 if stale)."""
        return self._call(self._api.replace_namespaced_lease, self.name, self.namespace, body, timeout=timeout)
