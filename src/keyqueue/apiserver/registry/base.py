""":class:`RegistryBase`: what every part of the :class:`~.writes.Registry` stands on.

It holds the registry's state (the backend, the key layout under ``prefix``, the catalogue of served types, the
newest states seen, the open watches), turns objects into their stored form and back, and reads one object.  The
write operations that the namespace and CRD lifecycles call are declared here; :mod:`.writes` implements them.
"""

from __future__ import annotations

import abc
import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .. import errors
from ..admission import Admission
from ..apply import ApplyRequest
from ..catalogue import Catalogue
from ..objects import (
    NAMESPACES,
    WEBHOOK_CONFIGURATIONS,
    ResourceType,
    canonical,
    decode_typed,
    format_time,
    from_stored,
    stored_type,
    to_stored,
)
from ..storage import Backend, BackendUnavailableError, KeyValue, ValueTooLargeError
from .objectwatch import ObjectWatch
from .options import WriteOptions
from .states import _dumps, _plain, _RecentStates, _with_rv

__all__ = ["RegistryBase"]

_CONFLICT_MSG: Final = "the object has been modified; please apply your changes to the latest version and try again"
_FIELD_VALIDATION: Final = ("", "Ignore", "Warn", "Strict")


class RegistryBase(abc.ABC):
    """The state of a :class:`~.writes.Registry`, its codec and its reads of one object (see the module docstring)."""

    def __init__(self, backend: Backend, prefix: str = "/registry", clock: Callable[[], float] = time.time,
                 catalogue: Catalogue | None = None) -> None:
        self.backend = backend
        #: The resource types this registry (and the server on it) serves: the built-ins and its CRDs' resources.
        self.catalogue = catalogue if catalogue is not None else Catalogue()
        self.prefix = prefix.rstrip("/")
        self._clock = clock
        self._watches: set[ObjectWatch] = set()
        self._lock = threading.Lock()
        self._recent = _RecentStates()
        #: The admission webhooks every write passes (:mod:`~keyqueue.apiserver.admission`).
        self.admission = Admission(backend, self.prefix, self._namespace_labels)
        backend.share_watches(self.prefix + "/")  # every watch of this registry (and its GC) is under it

    # ------------------------------------------------------------------ keys and codec
    def key(self, rt: ResourceType, namespace: str | None, name: str) -> str:
        if rt.namespaced:
            return f"{self.prefix}/{rt.storage_name}/{namespace}/{name}"
        return f"{self.prefix}/{rt.storage_name}/{name}"

    def collection_prefix(self, rt: ResourceType, namespace: str | None) -> str:
        if rt.namespaced and namespace:
            return f"{self.prefix}/{rt.storage_name}/{namespace}/"
        return f"{self.prefix}/{rt.storage_name}/"

    def encode(self, rt: ResourceType, obj: dict[str, Any]) -> bytes:
        """The stored form: canonical JSON of the stored type (:func:`~.objects.stored_type`) without
        ``resourceVersion`` and ``selfLink``."""
        return _dumps(self._stored_form(rt, obj))

    @staticmethod
    def _stored_form(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """What :meth:`encode` serialises (a new dict; leaves may be shared with ``obj``)."""
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "selfLink")}
        return canonical(stored_type(rt), to_stored(rt, {**obj, "metadata": meta}))

    def decode(self, kv: KeyValue, rv: int | None = None, rt: ResourceType | None = None) -> dict[str, Any]:
        """The API form of a stored value as ``rt`` serves it (as stored if ``None``), with ``resourceVersion`` =
        ``rv`` or its ``mod_revision``."""
        obj: dict[str, Any] = json.loads(kv.value)
        if rt is not None:
            obj = from_stored(rt, obj)
        return _with_rv(obj, rv if rv is not None else kv.mod_revision)

    def _shared(self, kv: KeyValue, rt: ResourceType, remember: bool = True) -> dict[str, Any]:
        """:meth:`decode` of ``kv`` as ``rt`` serves it, parsed at most once per state: the result is shared (with
        the answer to the write that stored it, other watches, the next update's starting point) and must not be
        modified.  ``remember=False``: a state that is gone (the last one before a delete) is not kept."""
        if not _plain(rt):
            return self.decode(kv, rt=rt)
        obj = self._recent.decoded(kv)
        if obj is None:
            obj = self.decode(kv, rt=rt)
            if remember:
                self._recent.put(kv, obj)
        return obj

    def _written(self, rt: ResourceType, kv: KeyValue, stored: dict[str, Any]) -> dict[str, Any]:
        """After ``stored`` (:meth:`_stored_form`) was written as ``kv``: the API form, remembered for the update
        and the watch events that follow (for ``rt`` whose API form is its stored form, without parsing)."""
        if rt in WEBHOOK_CONFIGURATIONS:  # in force for the writes that follow
            self.admission.observe(kv.key, kv.mod_revision, stored)
        if not _plain(rt):
            self._recent.put(kv)
            return self.decode(kv, rt=rt)
        obj = _with_rv(stored, kv.mod_revision)
        self._recent.put(kv, obj)
        return obj

    # ------------------------------------------------------------------ backend
    def _backend_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except BackendUnavailableError as exc:
            raise errors.internal_error(str(exc)) from None
        except ValueTooLargeError as exc:
            raise errors.request_entity_too_large(str(exc)) from None

    def compact(self) -> int:
        """Compact the backend up to its current revision; return that revision."""
        rev = self.backend.revision()
        self.backend.compact(rev)
        return rev

    # ------------------------------------------------------------------ reads
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        key = self.key(rt, namespace, name)
        kv, _ = self._backend_call(self.backend.get, key)
        if kv is None:
            self._recent.forget(key)
            raise errors.not_found(rt.qualified_name, name)
        self._recent.put(kv)
        return self.decode(kv, rt=rt)

    def _namespace_labels(self, name: str) -> dict[str, Any]:
        """The labels of namespace ``name`` (for admission's ``namespaceSelector``); 404 if it does not exist."""
        return dict(self.get(NAMESPACES, None, name)["metadata"].get("labels") or {})

    # ------------------------------------------------------------------ shared by the writes
    def decode_body(self, rt: ResourceType, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """Decode a request body (JSON value) into ``rt``'s shape, applying ``fieldValidation``."""
        if opts.field_validation not in _FIELD_VALIDATION:
            raise errors.bad_request(
                f"fieldValidation {opts.field_validation} is invalid, valid values are: Ignore, Warn, Strict"
            )
        obj, unknown = decode_typed(rt, body)
        if unknown and opts.field_validation == "Strict":
            raise errors.bad_request(
                "strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown)
            )
        if unknown and opts.field_validation in ("", "Warn"):
            opts.warnings.extend(f'unknown field "{u}"' for u in unknown)
        return obj

    def _mark_deleted(self, rt: ResourceType, current: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``current`` with ``deletionTimestamp`` (now) and ``deletionGracePeriodSeconds`` (0)."""
        marked = copy.deepcopy(current)
        marked["metadata"]["deletionTimestamp"] = format_time(self._clock())
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        return marked

    # ------------------------------------------------------------------ the write path (implemented by Registry)
    @abc.abstractmethod
    def create(self, rt: ResourceType, namespace: str | None, body: Any, opts: WriteOptions, *,
               apply: ApplyRequest | None = None) -> dict[str, Any]:
        """Create an object (POST; ``apply``: a server-side apply that creates it)."""

    @abc.abstractmethod
    def _update_checks(
        self, rt: ResourceType, namespace: str | None, name: str, new: dict[str, Any], current: dict[str, Any],
        opts: WriteOptions, subresource: str = "", *, apply: ApplyRequest | None = None,
    ) -> dict[str, Any]:
        """The checks and strategy of an update of ``current`` into ``new``; returns ``new`` as it is stored."""

    @abc.abstractmethod
    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None,
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Delete an object (finalizers and ``propagationPolicy`` respected)."""

    @abc.abstractmethod
    def _guaranteed_update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Read, ``mutate`` a copy, write if ``mod_revision`` is unchanged; retry otherwise."""
