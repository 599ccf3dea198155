"""Admission: the checks kube-apiserver runs on a write between decoding it and storing it, here the dynamic
admission webhooks of ``admissionregistration.k8s.io/v1`` (Validating- and MutatingWebhookConfigurations).

The write path (:mod:`~keyqueue.apiserver.registry.writes`) calls :meth:`Admission.mutate` on the decoded object
(mutating webhooks), then checks the object against its schema, then calls :meth:`Admission.validate`
(validating webhooks), then stores it: kube's order.  Creates, updates and patches (of the main resource and of
``/status``) and deletes are admitted; a write of a webhook configuration itself is not (as kube exempts them, so
that a broken webhook can always be removed), nor a ``/scale`` write.

The package, each module importing only those listed before it:

* :mod:`.request`: :class:`Attributes` of one write and the ``AdmissionReview`` request sent about it;
* :mod:`.configs`: the stored webhook configurations, kept current by a storage watch;
* :mod:`.matching`: ``rules``, ``namespaceSelector`` and ``objectSelector``;
* :mod:`.client`: one HTTPS call of a webhook, with its timeout, TLS and kube's error texts;
* :mod:`.webhooks`: the mutating and validating webhooks of one write, with reinvocation, ``failurePolicy`` and
  kube's answers.

``matchConditions`` are CEL: :mod:`keyqueue.apiserver.matchconditions`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..blocking import waiting_outside
from ..objects import WEBHOOK_CONFIGURATIONS
from ..storage import Backend
from .client import CallError
from .configs import Hook, WebhookConfigs
from .request import ANONYMOUS, Attributes, review_request
from .webhooks import Decode, NamespaceLabels, run_mutating, run_validating

__all__ = ["ANONYMOUS", "Admission", "Attributes", "CallError", "Hook", "review_request"]

_ADMITTED_SUBRESOURCES = ("", "status")


class Admission:
    """The admission webhooks of one registry's storage (see the package docstring).

    ``namespace_labels(name)`` reads a namespace's labels for ``namespaceSelector`` (the registry's read; a missing
    namespace raises its 404).  Thread-safe; no lock is held while a webhook is called, and a storage thread waiting
    for webhooks does not count against the server's bound (:mod:`~keyqueue.apiserver.blocking`), so a slow webhook
    delays only the requests it admits.
    """

    def __init__(self, backend: Backend, prefix: str, namespace_labels: NamespaceLabels) -> None:
        self.configs = WebhookConfigs(backend, prefix)
        self._namespace_labels = namespace_labels
        self._services: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start keeping the webhook configurations current from a storage watch (with the server)."""
        self.configs.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch (idempotent); blocks up to ``timeout`` seconds."""
        self.configs.stop(timeout)

    # ------------------------------------------------------------------ services
    def set_service_address(self, namespace: str, name: str, port: int, address: tuple[str, int] | None) -> None:
        """Reach a webhook configured with ``clientConfig.service`` ``namespace``/``name`` on ``port`` at
        ``address`` (``(host, port)``; ``None`` forgets it).  This server runs no pods: a service without an address
        fails the call as kube's does for a Service without endpoints.  The webhook's certificate is still checked
        for the Service's name (``<name>.<namespace>.svc``).  Raises ``ValueError`` for a bad port or address."""
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError(f"port must be an int within 1..65535, got {port!r}")
        with self._lock:
            if address is None:
                self._services.pop((namespace, name, port), None)
                return
            host, target = address
            if not isinstance(host, str) or not host or not isinstance(target, int) or not 1 <= target <= 65535:
                raise ValueError(f"address must be (host, port) with a port within 1..65535, got {address!r}")
            self._services[(namespace, name, port)] = (host, target)

    def _resolve(self, namespace: str, name: str, port: int) -> tuple[str, int] | None:
        with self._lock:
            return self._services.get((namespace, name, port))

    # ------------------------------------------------------------------ the write path
    def active(self) -> bool:
        """Whether any webhook is configured (then a write may block on one).  Blocks on a storage read only while
        the watch is not running."""
        validating, mutating = self.configs.hooks()
        return bool(validating or mutating)

    def _admitted(self, attrs: Attributes) -> bool:
        return attrs.rt not in WEBHOOK_CONFIGURATIONS and attrs.subresource in _ADMITTED_SUBRESOURCES

    def mutate(self, attrs: Attributes, decode: Decode) -> dict[str, Any] | None:
        """Run the mutating webhooks for ``attrs``; return the object as they left it (``attrs.obj``, decoded with
        ``decode`` after each patch).  Raises :class:`~.errors.APIError` for a refusal or a failed webhook under
        ``failurePolicy: Fail``.  Blocks while webhooks are called (each at most its ``timeoutSeconds``)."""
        if self._admitted(attrs):
            _validating, mutating = self.configs.hooks()
            if mutating:
                with waiting_outside():
                    run_mutating(mutating, attrs, self._namespace_labels, self._resolve, decode)
        return attrs.obj

    def validate(self, attrs: Attributes) -> None:
        """Run the validating webhooks for ``attrs`` (in parallel).  Raises as :meth:`mutate`; blocks until all
        answered (each at most its ``timeoutSeconds``)."""
        if self._admitted(attrs):
            validating, _mutating = self.configs.hooks()
            if validating:
                with waiting_outside():
                    run_validating(validating, attrs, self._namespace_labels, self._resolve)

    def observe(self, key: str, revision: int, obj: Mapping[str, Any] | None) -> None:
        """A write of this registry stored ``obj`` at ``key`` (``None``: deleted it) at ``revision``: if it is a
        webhook configuration, it is in force from now on."""
        self.configs.observe(key, revision, obj)

