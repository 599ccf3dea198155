"""Object storage with kube-apiserver's semantics, on any :class:`~.storage.Backend`.

Layout and concurrency follow kube-apiserver's etcd3 storage:

* key ``<prefix>/<resource>/<namespace>/<name>`` (``<prefix>/namespaces/<name>``
  for namespaces), value = the object as JSON without ``resourceVersion``;
* an object's ``resourceVersion`` is its key's ``mod_revision``; a list's is the
  revision it was read at;
* create is a transaction on ``version == 0`` (else 409 AlreadyExists);
* update and patch are a transaction on ``mod_revision`` from the newest state
  this registry saw for the key (its own writes, its reads and the watch events
  it delivered; decoded once and shared), with a read from the backend only when
  there is none, when the compare fails, or before an answer that a stale state
  could get wrong (an error, a no-op): one etcd round trip in the common case, as
  kube-apiserver's ``GuaranteedUpdate`` with its watch cache.
  When the client gave a ``resourceVersion`` (in a PUT body or inside a patch)
  a mismatch is 409 Conflict; without one the read-modify-write is retried
  until it wins (kube-apiserver's ``GuaranteedUpdate``).  An update that does not
  change the stored bytes writes nothing and keeps the resourceVersion;
* watch = a backend watch from ``resourceVersion + 1``; ADDED or MODIFIED is
  decided from ``create_revision``; DELETED carries the last state with the
  deletion's revision; a compacted start revision gives a 410 Expired ERROR event.

Finalizers as kube-apiserver's generic store handles them: deleting an object
with ``metadata.finalizers`` only sets ``deletionTimestamp`` and
``deletionGracePeriodSeconds`` (0); no finalizer may be added afterwards; the
update that removes the last one deletes the object instead of writing it.

A delete's ``propagationPolicy`` sets the garbage collector's finalizers (``orphan``, ``foregroundDeletion``:
:mod:`.propagation`); the collector thread of :mod:`.gc` acts on them and on ``ownerReferences``.

Differences from kube-apiserver, on purpose: no admission chain beyond the
namespace-exists check, no server-side apply (managedFields for non-apply writes: :mod:`.managedfields`), no watch
cache for lists and gets (they read the backend; its watches are shared instead: the registry asks the backend to
serve all of them, the garbage collector's included, from one stream, :meth:`~.storage.Backend.share_watches`), and
a namespace's deletion is done within the DELETE call (no namespace controller):
the namespace is marked ``Terminating`` (creates in it are then refused with
403 ``NamespaceTerminating``; every create's transaction also requires the
namespace's ``mod_revision`` it checked, so none slips in), its objects are
deleted (those with finalizers marked), then the namespace -- at once if it is
empty, else by the delete of its last object.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from . import errors
from .catalogue import Catalogue
from .crd import CRD_FINALIZER, crd_causes, prepare_crd, served_types
from .errors import APIError
from .managedfields import managed_fields
from .objects import (
    CRDS,
    NAMESPACES,
    ResourceType,
    canonical,
    decode_typed,
    field_value,
    format_time,
    from_stored,
    invalid_kind,
    stored_type,
    to_stored,
    validate,
)
from .objects import validate_update as _validate_update
from .patch import apply_patch
from .propagation import deletion_finalizers
from .selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from .storage import (
    DEFAULT_WATCH_BUFFER,
    Backend,
    BackendUnavailableError,
    BackendWatch,
    CompactedError,
    FutureRevisionError,
    KeyValue,
    WatchOverflowError,
)
from .validation import namespace_finalizer_causes

__all__ = ["MAX_RESOURCE_VERSION", "SYSTEM_NAMESPACES", "Matcher", "ObjectWatch", "Registry", "WriteOptions",
           "parse_resource_version"]

SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public")
_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generateName suffixes
_CONFLICT_MSG: Final = "the object has been modified; please apply your changes to the latest version and try again"
_FIELD_VALIDATION: Final = ("", "Ignore", "Warn", "Strict")


@dataclass
class WriteOptions:
    """Per-request options of a write.

    ``dry_run`` validates and answers without writing.  ``field_validation`` is
    ``Strict`` (unknown fields are a 400 error), ``Warn`` (the default: they are
    dropped and reported in ``warnings``) or ``Ignore``.  ``propagation_policy`` (a delete's
    ``Background``/``Foreground``/``Orphan``, ``""`` = unset) decides the garbage collector's finalizers
    (:func:`~.propagation.deletion_finalizers`).
    """

    dry_run: bool = False
    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    propagation_policy: str = ""
    #: Who writes (``metadata.managedFields``; :func:`~.managedfields.manager_from`); ``""``: the server itself.
    field_manager: str = ""


@dataclass(frozen=True, slots=True)
class Matcher:
    """Label and field selectors of a list or watch."""

    rt: ResourceType
    labels: LabelSelector
    fields: FieldSelector

    @property
    def match_all(self) -> bool:
        return self.labels.empty and not self.fields.terms

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if not self.labels.matches(meta.get("labels")):
            return False
        if not self.fields.terms:
            return True
        return self.fields.matches({f: field_value(self.rt, obj, f) for f, _op, _value in self.fields.terms})


MAX_RESOURCE_VERSION: Final = 2**63 - 2  # etcd revisions are int64, and a watch starts at resourceVersion + 1


def parse_resource_version(value: str) -> int:
    """A resourceVersion from a request (400 unless a decimal within 0..2^63-2)."""
    rv = int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else -1
    if not 0 <= rv <= MAX_RESOURCE_VERSION:
        raise errors.bad_request(f"invalid resource version: {json.dumps(value[:100])}") from None
    return rv


def _phase(kv: KeyValue) -> str:
    """``status.phase`` of a stored namespace."""
    try:
        return str((json.loads(kv.value).get("status") or {}).get("phase", ""))
    except (ValueError, AttributeError):
        return ""


def _finalized(rt: ResourceType, obj: dict[str, Any]) -> bool:
    """True for an object being deleted whose finalizers are all gone (a namespace's ``spec.finalizers`` too)."""
    meta = obj.get("metadata") or {}
    if rt is NAMESPACES and (obj.get("spec") or {}).get("finalizers"):
        return False
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def _clone(value: Any) -> Any:
    """A deep copy of a decoded object (dicts, lists, scalars), several times faster than ``copy.deepcopy``,
    except ``managedFields``, which is shared: nothing modifies an entry in place (:mod:`.managedfields` builds new
    ones, :func:`~.patch.apply_patch` copies), and copying its field trees was most of an update's cost."""
    if isinstance(value, dict):
        return {k: v if k == "managedFields" else _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """Put ``metadata.resourceVersion`` in its canonical place (after ``uid``)."""
    meta = obj.get("metadata") or {}
    out: dict[str, Any] = {}
    placed = False
    for k, v in meta.items():
        if not placed and k not in ("name", "generateName", "namespace", "selfLink", "uid"):
            out["resourceVersion"] = str(rv)
            placed = True
        if k != "resourceVersion":
            out[k] = v
    if not placed:
        out["resourceVersion"] = str(rv)
    obj["metadata"] = out
    return obj


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _plain(rt: ResourceType) -> bool:
    """True if ``rt`` serves objects exactly as they are stored (no conversion, no renames, not a CRD, whose
    decoded form the catalogue keeps parts of): its decoded objects may be shared (:meth:`Registry._shared`)."""
    return rt.custom is None and not rt.renames and rt is not CRDS


class _RecentStates:
    """The newest state this process saw per key (bounded LRU), with its decoded API form when known.

    A key's value at a given ``mod_revision`` never changes, so an entry can be
    out of date but never wrong about the revision it claims.  The decoded form
    (``metadata.resourceVersion`` = the ``mod_revision``) is shared by every
    reader and must never be modified: it lets an update start from the object
    it wrote last and a watch event reuse the object its write answered with,
    instead of parsing the stored JSON again.  Bounded by ``capacity`` entries
    and by ``max_bytes`` of stored values.
    """

    def __init__(self, capacity: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[KeyValue, dict[str, Any] | None]] = OrderedDict()

    def get(self, key: str) -> KeyValue | None:
        with self._lock:
            item = self._items.get(key)
        return item[0] if item is not None else None

    def decoded(self, kv: KeyValue) -> dict[str, Any] | None:
        """The shared decoded form of ``kv`` if this is the state held for its key (same ``mod_revision``)."""
        with self._lock:
            item = self._items.get(kv.key)
        if item is None or item[0].mod_revision != kv.mod_revision:
            return None
        return item[1]

    def put(self, kv: KeyValue, decoded: dict[str, Any] | None = None) -> None:
        with self._lock:
            have = self._items.get(kv.key)
            if have is not None:
                if have[0].mod_revision > kv.mod_revision or (
                        have[0].mod_revision == kv.mod_revision and (have[1] is not None or decoded is None)):
                    return
                self._bytes -= len(have[0].value)
            self._items[kv.key] = (kv, decoded)
            self._items.move_to_end(kv.key)
            self._bytes += len(kv.value)
            while len(self._items) > self._capacity or (self._bytes > self._max_bytes and len(self._items) > 1):
                _key, (old, _obj) = self._items.popitem(last=False)
                self._bytes -= len(old.value)

    def forget(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is not None:
                self._bytes -= len(item[0].value)


class Registry:
    """Objects of every stored :class:`~.objects.ResourceType` in a :class:`Backend`, the way kube-apiserver
    stores them.

    Thread-safe: all shared state is in the backend; every method blocks on
    backend calls only.  Errors are raised as :class:`~.errors.APIError`.
    """

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
        if not _plain(rt):
            self._recent.put(kv)
            return self.decode(kv, rt=rt)
        obj = _with_rv(stored, kv.mod_revision)
        self._recent.put(kv, obj)
        return obj

    # ------------------------------------------------------------------ setup
    def ensure_namespaces(self, names: tuple[str, ...] = SYSTEM_NAMESPACES) -> None:
        """Create the given namespaces unless they exist (idempotent)."""
        for name in names:
            try:
                self.create(NAMESPACES, None, {"metadata": {"name": name}}, WriteOptions())
            except APIError as exc:
                if exc.code != 409:
                    raise

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

    def matcher(self, rt: ResourceType, label_selector: str | None, field_selector: str | None) -> Matcher:
        """Parse ``labelSelector`` and ``fieldSelector`` (400 if malformed or on an unsupported field)."""
        fields = parse_field_selector(field_selector, rt.field_selectors)
        return Matcher(rt, parse_label_selector(label_selector), fields)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        matcher: Matcher,
        resource_version: str = "",
        resource_version_match: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """List objects; returns ``(items, list metadata)``.

        ``resourceVersion``/``resourceVersionMatch``/``limit``/``continue``
        follow the Kubernetes rules: unset = most recent; ``0`` = any (here: most
        recent); ``N`` = not older than N, or exactly N with
        ``resourceVersionMatch=Exact`` or with ``limit`` (410 Expired if N was
        compacted).  ``limit`` pages with a ``continue`` token that reads the
        next page at the same revision.
        """
        prefix = self.collection_prefix(rt, namespace)
        start_key = ""
        read_rev = 0
        if continue_token:
            if resource_version not in ("", "0") or resource_version_match:
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            read_rev, start_key = self._decode_continue(continue_token, prefix)
        elif resource_version_match not in ("", "Exact", "NotOlderThan"):
            raise errors.bad_request(f'invalid resourceVersionMatch: "{resource_version_match}"')
        elif resource_version_match and resource_version == "":
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        elif resource_version not in ("", "0"):
            rv = parse_resource_version(resource_version)
            if resource_version_match == "Exact" or (not resource_version_match and limit > 0):
                read_rev = rv
            else:
                current = self._backend_call(self.backend.revision)
                if rv > current:
                    raise errors.too_large_resource_version(rv, current)
        elif resource_version_match == "Exact":
            raise errors.bad_request("resourceVersionMatch=Exact is forbidden for resourceVersion \"0\"")
        try:
            kvs, rev = self.backend.range(prefix, read_rev)
        except CompactedError:
            if continue_token:  # as kube: a fresh token (revision -1 = the latest) continues inconsistently
                exc = errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list."
                )
                exc.list_meta = {"continue": self._encode_continue(-1, start_key, prefix)}
                raise exc from None
            raise errors.expired("The resourceVersion for the provided list is too old.") from None
        except FutureRevisionError:
            raise errors.too_large_resource_version(read_rev, self._backend_call(self.backend.revision)) from None
        except BackendUnavailableError as exc:
            raise errors.internal_error(str(exc)) from None
        items: list[dict[str, Any]] = []
        meta: dict[str, Any] = {"resourceVersion": str(rev)}
        for i, kv in enumerate(kvs):
            if kv.key < start_key:
                continue
            obj = self.decode(kv, rt=rt)
            if not matcher.matches(obj):
                continue
            if limit > 0 and len(items) == limit:
                meta["continue"] = self._encode_continue(rev, kv.key, prefix)
                if matcher.match_all:
                    meta["remainingItemCount"] = sum(1 for k in kvs[i:] if k.key >= start_key)
                break
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            items.append(obj)
        return items, meta

    @staticmethod
    def _encode_continue(rev: int, next_key: str, prefix: str) -> str:
        token = {"v": "meta.k8s.io/v1", "rv": rev, "start": next_key[len(prefix) :]}
        return base64.urlsafe_b64encode(json.dumps(token, separators=(",", ":")).encode()).decode()

    @staticmethod
    def _decode_continue(token: str, prefix: str) -> tuple[int, str]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rev, start = data["rv"], data["start"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise errors.bad_request("continue key is not valid: invalid token") from None
        if (not isinstance(rev, int) or isinstance(rev, bool) or not isinstance(start, str)
                or not (0 < rev <= MAX_RESOURCE_VERSION or rev == -1) or ".." in start or start.startswith("/")):
            raise errors.bad_request("continue key is not valid: invalid token")
        return max(rev, 0), prefix + start  # -1 (a token handed out with 410): continue at the latest revision

    def _backend_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except BackendUnavailableError as exc:
            raise errors.internal_error(str(exc)) from None

    # ------------------------------------------------------------------ writes
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

    def _check_namespace(self, rt: ResourceType, obj: dict[str, Any], namespace: str | None) -> None:
        meta = obj["metadata"]
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace

    def _prepare(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The registry strategy: server-owned fields of a new or updated object."""
        meta = obj["metadata"]
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = format_time(self._clock())
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
        else:
            old_meta = old["metadata"]
            meta.setdefault("uid", old_meta.get("uid", ""))
            for kept in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
                else:
                    meta.pop(kept, None)
        if rt is NAMESPACES:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
            if old is None:  # as kube's namespace strategy: the client's spec.finalizers plus "kubernetes"
                finalizers = list((obj.get("spec") or {}).get("finalizers") or ())
                obj["spec"] = {"finalizers": finalizers if "kubernetes" in finalizers else [*finalizers, "kubernetes"]}
                obj["status"] = {"phase": "Active"}
            else:
                for part in ("spec", "status"):
                    if part in old:
                        obj[part] = copy.deepcopy(old[part])
                    else:
                        obj.pop(part, None)

    def create(self, rt: ResourceType, namespace: str | None, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """Create an object (POST).  ``body`` is the decoded JSON request body.  405 for a custom resource whose
        CRD is being deleted."""
        if rt.custom is not None and rt.custom.terminating:
            raise errors.APIError(405, "MethodNotAllowed",
                                  "create not allowed while custom resource definition is terminating")
        obj = self.decode_body(rt, body, opts)
        meta = obj["metadata"]
        self._check_namespace(rt, obj, namespace)
        if meta.get("resourceVersion"):
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        generate = meta.get("generateName", "") if not meta.get("name") else ""
        if generate:
            meta["name"] = generate + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
        self._prepare(rt, obj, None)
        self._prepare_extension(rt, obj, None)
        managed = managed_fields(rt, None, obj, opts.field_manager, meta["creationTimestamp"])
        if managed:
            meta["managedFields"] = managed
        validate(rt, obj)
        guard = self._namespace_guard(rt, namespace, meta["name"])
        for _attempt in range(8):
            key = self.key(rt, namespace, meta["name"])
            if opts.dry_run:
                kv, _ = self._backend_call(self.backend.get, key)
                if kv is not None:
                    raise errors.already_exists(rt.qualified_name, meta["name"])
                return obj
            stored = self._stored_form(rt, obj)
            result = self._backend_call(self.backend.create, key, _dumps(stored), guard)
            if result.succeeded:
                assert result.kv is not None
                created = self._written(rt, result.kv, stored)
                if rt is CRDS:
                    self._serve_crd(created)
                return created
            if result.kv is None and guard is not None:  # the namespace changed meanwhile: check it again
                guard = self._namespace_guard(rt, namespace, meta["name"])
                continue
            if not generate:
                raise errors.already_exists(rt.qualified_name, meta["name"])
            meta["name"] = generate + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
        raise errors.conflict(rt.qualified_name, meta["name"], "the namespace or the name kept changing; try again")

    def _namespace_guard(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, int] | None:
        """For a namespaced create: ``(namespace key, its mod_revision)``, the condition the create's transaction
        carries, so that no object is created in a namespace that changed since this check (e.g. began
        terminating).  404 if the namespace does not exist, 403 ``NamespaceTerminating`` while it terminates."""
        if not rt.namespaced:
            return None
        ns_key = self.key(NAMESPACES, None, str(namespace))
        ns_kv, _ = self._backend_call(self.backend.get, ns_key)
        if ns_kv is None:
            raise errors.not_found("namespaces", str(namespace))
        if _phase(ns_kv) == "Terminating":
            raise errors.namespace_terminating(rt.qualified_name, name, str(namespace))
        return ns_key, ns_kv.mod_revision

    def _guaranteed_update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Read, ``mutate`` a copy, write if ``mod_revision`` is unchanged; retry otherwise.

        ``mutate`` raises to abort (e.g. 409 on a resourceVersion precondition).
        """
        key = self.key(rt, namespace, name)
        # Like kube-apiserver's GuaranteedUpdate with its watch cache: start from the
        # last state this registry saw for the key (saves a read).  That state may be
        # stale; the transaction's mod_revision compare catches it, and any decision
        # that a stale state could get wrong (an error, a no-op) is re-checked on a
        # fresh read first.
        kv = None if opts.dry_run else self._recent.get(key)
        confirmed = kv is None
        if kv is None:
            kv, _ = self._backend_call(self.backend.get, key)
        while True:
            if kv is None:
                self._recent.forget(key)
                raise errors.not_found(rt.qualified_name, name)
            current = self._shared(kv, rt)
            try:
                new = mutate(_clone(current))
            except APIError:
                if confirmed:
                    raise
                kv, _ = self._backend_call(self.backend.get, key)
                confirmed = True
                continue
            stored = self._stored_form(rt, new)
            data = _dumps(stored)
            if data == kv.value:
                if not confirmed:
                    kv, _ = self._backend_call(self.backend.get, key)
                    confirmed = True
                    continue
                return current  # no-op: nothing written, resourceVersion unchanged
            if opts.dry_run:
                return _with_rv(new, kv.mod_revision)
            if _finalized(rt, new):  # the last finalizer of an object being deleted is gone: delete it
                result = self._backend_call(self.backend.delete, key, kv.mod_revision)
                if result.succeeded:
                    self._recent.forget(key)
                    if namespace is not None:
                        self._finish_namespace(namespace)
                    if rt is CRDS:
                        self._unserve_crd(new, kv.mod_revision + 1)
                    if rt.custom is not None:
                        self._finish_crd(rt.custom.crd_name)
                    return _with_rv(new, kv.mod_revision)
                kv = result.kv
                confirmed = True
                continue
            result = self._backend_call(self.backend.update, key, data, kv.mod_revision)
            if result.succeeded:
                assert result.kv is not None
                updated = self._written(rt, result.kv, stored)
                if rt is CRDS:
                    self._serve_crd(updated)
                return updated
            kv = result.kv
            confirmed = True

    def _update_checks(
        self, rt: ResourceType, namespace: str | None, name: str, new: dict[str, Any], current: dict[str, Any],
        opts: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        meta = new["metadata"]
        if not meta.get("name"):
            meta["name"] = name
        if meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        self._check_namespace(rt, new, namespace)
        rv = meta.get("resourceVersion", "")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.qualified_name, name, _CONFLICT_MSG)
        self._prepare(rt, new, current)
        self._prepare_extension(rt, new, current, subresource)
        new["metadata"]["managedFields"] = managed_fields(rt, current, new, opts.field_manager,
                                                          format_time(self._clock()))
        if not new["metadata"]["managedFields"]:
            del new["metadata"]["managedFields"]
        _validate_update(rt, new, current)
        if current["metadata"].get("deletionTimestamp"):
            had = set(current["metadata"].get("finalizers") or ())
            added = [f for f in new["metadata"].get("finalizers") or () if f not in had]
            if added:
                raise errors.invalid(rt.kind, rt.qualified_name, name, [(
                    "FieldValueForbidden", "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new "
                    "finalizers []string{" + ", ".join(json.dumps(f) for f in added) + "}")])
        return new

    def update(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, opts: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Replace an object (PUT).  With ``metadata.resourceVersion`` in ``body`` it is a compare-and-swap.
        ``subresource`` ``"status"``: a custom resource's status subresource (only ``status`` is taken from
        ``body``; the main endpoint then ignores ``status``)."""
        obj = self.decode_body(rt, body, opts)

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            return self._update_checks(rt, namespace, name, _clone(obj), current, opts, subresource)

        return self._guaranteed_update(rt, namespace, name, mutate, opts)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        opts: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Patch an object.  A ``resourceVersion`` set by the patch is a precondition.  ``subresource`` as for
        :meth:`update`."""

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            patched = apply_patch(patch_type, current, patch)
            new = self.decode_body(rt, patched, opts)
            return self._update_checks(rt, namespace, name, new, current, opts, subresource)

        return self._guaranteed_update(rt, namespace, name, mutate, opts)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None,
        opts: WriteOptions,
    ) -> dict[str, Any]:
        """Delete an object; returns a ``Status`` with ``status: Success`` once it is gone.

        An object with ``metadata.finalizers`` is not removed: it gets ``deletionTimestamp`` (now) and
        ``deletionGracePeriodSeconds`` (0), which one write (a MODIFIED event) stores, and the object is returned
        (also when it was being deleted already); it is removed when an update takes its last finalizer away.
        ``preconditions`` (``uid``/``resourceVersion`` from DeleteOptions) that do not hold give 409 Conflict.
        Deleting a namespace deletes its objects (marking those with finalizers), then the namespace once it is
        empty; the system namespaces cannot be deleted (403).
        """
        key = self.key(rt, namespace, name)
        kv, _ = self._backend_call(self.backend.get, key)
        while True:
            if kv is None:
                raise errors.not_found(rt.qualified_name, name)
            current = self.decode(kv, rt=rt)
            meta = current["metadata"]
            for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = (preconditions or {}).get(field_name)
                if want and want != meta.get(field_name):
                    raise errors.conflict(
                        rt.qualified_name, name,
                        f"Precondition failed: {label} in precondition: {want}, "
                        f"{label} in object meta: {meta.get(field_name)}",
                    )
            if rt is NAMESPACES:
                if name in SYSTEM_NAMESPACES:
                    raise errors.forbidden(rt.name, name, "this namespace may not be deleted")
                if not opts.dry_run:
                    self._delete_namespace(key, kv, current)
                return errors.success_status(rt.qualified_name, name, meta.get("uid", ""))
            finalizers = deletion_finalizers(meta.get("finalizers"), opts.propagation_policy)
            if finalizers:
                if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
                    return current  # being deleted already: waiting for its finalizers
                marked = copy.deepcopy(current) if meta.get("deletionTimestamp") else self._mark_deleted(rt, current)
                marked["metadata"]["finalizers"] = finalizers
                if opts.dry_run:
                    return marked
                result = self._backend_call(self.backend.update, key, self.encode(rt, marked), kv.mod_revision)
                if result.succeeded:
                    assert result.kv is not None
                    self._recent.put(result.kv)
                    stored = self.decode(result.kv, rt=rt)
                    if rt is CRDS:  # kube's CRD finalizer: its objects are deleted, then the CRD
                        self._terminate_crd(stored)
                    return stored
                kv = result.kv
                continue
            if opts.dry_run:
                return errors.success_status(rt.qualified_name, name, meta.get("uid", ""))
            if rt is CRDS:  # its objects go first, and nothing more is served for it
                self._unserve_crd(current, kv.mod_revision + 1)
            result = self._backend_call(self.backend.delete, key, kv.mod_revision)
            if result.succeeded:
                self._recent.forget(key)
                if rt is CRDS:
                    self._delete_custom_objects(current)  # any created while it was going
                if namespace is not None and meta.get("deletionTimestamp"):
                    self._finish_namespace(namespace)
                if rt.custom is not None and rt.custom.terminating:
                    self._finish_crd(rt.custom.crd_name)
                return errors.success_status(rt.qualified_name, name, meta.get("uid", ""))
            kv = result.kv

    def _mark_deleted(self, rt: ResourceType, current: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``current`` with ``deletionTimestamp`` (now) and ``deletionGracePeriodSeconds`` (0)."""
        marked = copy.deepcopy(current)
        marked["metadata"]["deletionTimestamp"] = format_time(self._clock())
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        return marked

    def _delete_namespace(self, key: str, kv: KeyValue, current: dict[str, Any]) -> None:
        """Delete a namespace as kube-apiserver and its namespace controller do, in one call: mark it
        ``Terminating`` (from then on creates in it get 403 ``NamespaceTerminating``; a create that checked the
        namespace before is refused by its transaction's guard), delete everything in it, then the namespace."""
        while True:
            if current.get("status", {}).get("phase") != "Terminating":
                marked = copy.deepcopy(current)
                marked.setdefault("status", {})["phase"] = "Terminating"
                marked["metadata"]["deletionTimestamp"] = format_time(self._clock())
                result = self._backend_call(self.backend.update, key, self.encode(NAMESPACES, marked),
                                            kv.mod_revision)
                if not result.succeeded:
                    if result.kv is None:
                        return  # deleted meanwhile
                    kv = result.kv
                    current = self.decode(kv)
                    continue
                assert result.kv is not None
                kv = result.kv
                self._recent.put(kv)
            name = current["metadata"]["name"]
            for rt in self.catalogue.namespaced():
                self._delete_all(rt, name)
            if self._namespace_has_objects(name):
                self._report_remaining(key, name)
                return  # objects with finalizers remain: the last one to go finishes the namespace
            self._finish_namespace(name)
            return

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, matcher: Matcher, opts: WriteOptions
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Delete every matching object; returns the deleted objects and list metadata."""
        items, meta = self.list_objects(rt, namespace, matcher)
        deleted = []
        for obj in items:
            name = obj["metadata"]["name"]
            try:
                self.delete(rt, obj["metadata"].get("namespace"), name, None, opts)
                deleted.append(obj)
            except APIError as exc:
                if exc.code not in (403, 404):
                    raise
        return deleted, meta

    def _delete_all(self, rt: ResourceType, namespace: str) -> None:
        """Delete every ``rt`` object of ``namespace``; those with finalizers are marked deleted instead."""
        kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)
        for kv in kvs:
            while kv is not None:
                meta = self.decode(kv)["metadata"]
                if meta.get("finalizers"):
                    if meta.get("deletionTimestamp"):
                        break
                    marked = self._mark_deleted(rt, self.decode(kv))
                    result = self._backend_call(self.backend.update, kv.key, self.encode(rt, marked),
                                                kv.mod_revision)
                else:
                    result = self._backend_call(self.backend.delete, kv.key, kv.mod_revision)
                if result.succeeded:
                    self._recent.forget(kv.key)
                kv = None if result.succeeded else result.kv

    def _report_remaining(self, key: str, namespace: str) -> None:
        """Set the conditions kube's namespace controller sets on a namespace waiting for finalizers
        (``NamespaceContentRemaining``, ``NamespaceFinalizersRemaining``), so that ``kubectl get ns -o yaml``
        shows what it waits for.  Retried on a conflict; nothing is written once the namespace is gone."""
        while True:
            kv, _ = self._backend_call(self.backend.get, key)
            if kv is None:
                return
            resources: dict[str, int] = {}
            finalizers: dict[str, int] = {}
            for rt in self.catalogue.namespaced():
                for item in self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)[0]:
                    resources[rt.qualified_name] = resources.get(rt.qualified_name, 0) + 1
                    for f in self.decode(item)["metadata"].get("finalizers") or ():
                        finalizers[f] = finalizers.get(f, 0) + 1
            if not resources:
                return  # emptied meanwhile: whoever emptied it deletes the namespace
            ns = self.decode(kv)
            now = format_time(self._clock())
            ns.setdefault("status", {})["conditions"] = [
                {"type": "NamespaceContentRemaining", "status": "True", "lastTransitionTime": now,
                 "reason": "SomeResourcesRemain", "message": "Some resources are remaining: " + ", ".join(
                     f"{r} has {n} resource instances" for r, n in sorted(resources.items()))},
                {"type": "NamespaceFinalizersRemaining", "status": "True", "lastTransitionTime": now,
                 "reason": "SomeFinalizersRemain",
                 "message": "Some content in the namespace has finalizers remaining: " + ", ".join(
                     f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))},
            ]
            data = self.encode(NAMESPACES, ns)
            if data == kv.value:
                return
            result = self._backend_call(self.backend.update, key, data, kv.mod_revision)
            if result.succeeded:
                assert result.kv is not None
                self._recent.put(result.kv)
                return

    def _namespace_has_objects(self, namespace: str) -> bool:
        return any(self._backend_call(self.backend.range, self.collection_prefix(rt, namespace), 0)[0]
                   for rt in self.catalogue.namespaced())

    def _finish_namespace(self, namespace: str) -> None:
        """Once a terminating ``namespace`` is empty (its own deletion emptied it, or the last object that waited
        for its finalizers is gone): remove the ``kubernetes`` finalizer from ``spec.finalizers``, as kube's
        namespace controller does, and delete the namespace if that leaves no finalizer there nor in
        ``metadata.finalizers`` (else it stays ``Terminating`` until whoever owns them removes them: an update for
        ``metadata.finalizers``, ``/finalize`` for ``spec.finalizers``).  Whichever of this and the namespace's own
        deletion looks last sees it empty, so one of them finishes it."""
        ns_key = self.key(NAMESPACES, None, namespace)
        while True:
            ns_kv, _ = self._backend_call(self.backend.get, ns_key)
            if ns_kv is None or _phase(ns_kv) != "Terminating" or self._namespace_has_objects(namespace):
                return
            ns = self.decode(ns_kv)
            finalizers = list((ns.get("spec") or {}).get("finalizers") or ())
            rest = [f for f in finalizers if f != "kubernetes"]
            deleting = not rest and not ns["metadata"].get("finalizers")
            if deleting:
                result = self._backend_call(self.backend.delete, ns_key, ns_kv.mod_revision)
            elif rest != finalizers:
                ns["spec"] = {**(ns.get("spec") or {}), "finalizers": rest}
                result = self._backend_call(self.backend.update, ns_key, self.encode(NAMESPACES, ns),
                                            ns_kv.mod_revision)
            else:
                return  # waiting for finalizers that someone else removes
            if result.succeeded and not deleting:
                assert result.kv is not None
                self._recent.put(result.kv)
                continue  # written: look again (the others may have gone meanwhile)
            if result.succeeded or result.kv is None:
                self._recent.forget(ns_key)
                return
            # changed meanwhile: read it again

    def finalize_namespace(self, name: str, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """``PUT /api/v1/namespaces/<name>/finalize``: set ``spec.finalizers`` from ``body`` (a Namespace; nothing
        else of it is taken; its ``metadata.resourceVersion`` is a precondition).  A terminating namespace left
        with no finalizer at all is deleted, as kube's namespace controller does after finalizing."""
        obj = self.decode_body(NAMESPACES, body, opts)
        finalizers = list((obj.get("spec") or {}).get("finalizers") or ())
        causes = namespace_finalizer_causes(finalizers)
        if causes:
            raise errors.invalid(NAMESPACES.kind, NAMESPACES.qualified_name, name, causes)

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            rv = obj["metadata"].get("resourceVersion", "")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(NAMESPACES.qualified_name, name, _CONFLICT_MSG)
            current["spec"] = {**(current.get("spec") or {}), "finalizers": finalizers}
            if not finalizers:
                current["spec"].pop("finalizers")
            return current

        return self._guaranteed_update(NAMESPACES, None, name, mutate, opts)

    # ------------------------------------------------------------------ CustomResourceDefinitions
    def _prepare_extension(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
                           subresource: str = "") -> None:
        """The strategies of CRDs and custom resources on a create (``old`` ``None``) or an update: a CR's
        generation and status subresource (:class:`~.custom.CustomSchema`); a CRD's defaults, status and
        validation (:mod:`.crd`, 422 if invalid)."""
        if rt.custom is not None:
            if old is None:
                rt.custom.prepare_create(obj)
            else:
                rt.custom.prepare_update(obj, old, subresource)
        elif rt is CRDS:
            spec = obj.get("spec") or {}
            conflict = self.catalogue.name_conflict(obj["metadata"].get("name", ""), str(spec.get("group", "")),
                                                    spec.get("names") or {})
            prepare_crd(obj, old, self._clock(), conflict)
            causes = crd_causes(obj, old)
            if causes:
                raise errors.invalid(invalid_kind(CRDS), CRDS.qualified_name, obj["metadata"].get("name", ""),
                                     causes)

    def serve_stored_crds(self) -> int:
        """Serve the custom resources of every CRD in storage (a server started on an etcd that has CRDs);
        returns how many CRDs are served."""
        kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(CRDS, None), 0)
        for kv in kvs:
            self._serve_crd(self.decode(kv, rt=CRDS))
        return len(kvs)

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        """After a CRD was stored: serve its versions (while it is being deleted, for everything but creates).
        Open watches on versions no longer served are ended."""
        name = crd["metadata"]["name"]
        types = served_types(crd)
        if not self.catalogue.set_custom(name, types, int(crd["metadata"]["resourceVersion"])):
            return  # a later state of this CRD is served already
        self._end_watches(name, frozenset(t.version for t in types))

    def _terminate_crd(self, crd: dict[str, Any]) -> None:
        """A CRD was marked deleted: refuse creates of its resources, delete its objects (those with finalizers
        are marked and waited for), and once none is left remove its cleanup finalizer, which deletes it."""
        self._serve_crd(crd)
        name = crd["metadata"]["name"]
        storage = [rt for rt in self.catalogue.custom(name)
                   if rt.custom is not None and rt.version == rt.custom.storage_version]
        if not storage:  # its storage version is not served: nothing can wait for it
            self._delete_custom_objects(crd)
        else:
            kvs, _ = self._backend_call(self.backend.range, self.collection_prefix(storage[0], None), 0)
            for kv in kvs:
                meta = json.loads(kv.value).get("metadata") or {}
                try:
                    self.delete(storage[0], meta.get("namespace"), meta.get("name", ""), None, WriteOptions())
                except APIError as exc:
                    if exc.code not in (404, 409):
                        raise
        self._finish_crd(name)

    def _finish_crd(self, crd_name: str) -> None:
        """If the CRD ``crd_name`` is being deleted and has no objects left: remove its cleanup finalizer (the
        CRD goes with its last finalizer).  Whichever of this and the CRD's deletion looks last sees no objects."""
        types = self.catalogue.custom(crd_name)
        if not types or types[0].custom is None or not types[0].custom.terminating:
            return
        if self._backend_call(self.backend.range, self.collection_prefix(types[0], None), 0)[0]:
            return

        def drop(current: dict[str, Any]) -> dict[str, Any]:
            meta = current["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != CRD_FINALIZER]
            return current

        try:
            self._guaranteed_update(CRDS, None, crd_name, drop, WriteOptions())
        except APIError as exc:
            if exc.code != 404:
                raise

    def _unserve_crd(self, crd: dict[str, Any], revision: int) -> None:
        """A CRD is going (at ``revision``): stop serving it, end the watches on its resources, delete its
        objects."""
        self.catalogue.remove_custom(crd["metadata"]["name"], revision)
        self._end_watches(crd["metadata"]["name"])
        self._delete_custom_objects(crd)

    def _end_watches(self, crd_name: str, keep: frozenset[str] = frozenset()) -> None:
        """End the open watches on the resources of the CRD ``crd_name``, but for the versions in ``keep``."""
        with self._lock:
            watches = [w for w in self._watches if w.rt.custom is not None and w.rt.custom.crd_name == crd_name
                       and w.rt.version not in keep]
        for w in watches:
            w.close()

    def _delete_custom_objects(self, crd: dict[str, Any]) -> None:
        """Delete every stored object of the CRD ``crd`` (finalizers are not waited for)."""
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        if not group or not plural:
            return
        prefix = f"{self.prefix}/{group}/{plural}/"
        while True:
            kvs, _ = self._backend_call(self.backend.range, prefix, 0)
            if not kvs:
                return
            for kv in kvs:
                self._backend_call(self.backend.delete, kv.key, kv.mod_revision)
                self._recent.forget(kv.key)

    # ------------------------------------------------------------------ watch
    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        matcher: Matcher,
        resource_version: str = "",
        allow_bookmarks: bool = False,
        send_initial_events: bool | None = None,
        max_pending: int = DEFAULT_WATCH_BUFFER,
    ) -> ObjectWatch:
        """Start a watch.

        ``resourceVersion`` unset or ``0``: ADDED events for the current state,
        then changes (as kube-apiserver does).  ``N``: changes after N.
        ``sendInitialEvents=true`` also sends the current state first, ended by a
        BOOKMARK annotated ``k8s.io/initial-events-end``.  ``max_pending``: events the watch may hold
        undelivered; a consumer further behind gets its watch ended (:meth:`ObjectWatch.next` raises EOFError and
        ``overflowed`` is set), as kube-apiserver ends the watch of an unresponsive client.
        """
        prefix = self.collection_prefix(rt, namespace)
        initial: list[dict[str, Any]] = []
        rv = parse_resource_version(resource_version) if resource_version not in ("", "0") else 0
        if send_initial_events and not allow_bookmarks:
            raise errors.bad_request("sendInitialEvents requires allowWatchBookmarks=true")
        if resource_version in ("", "0") or send_initial_events:
            kvs, rev = self._backend_call(self.backend.range, prefix, 0)
            for kv in kvs:
                obj = self.decode(kv, rt=rt)
                if matcher.matches(obj):
                    initial.append({"type": "ADDED", "object": obj})
            if send_initial_events:
                initial.append(
                    {"type": "BOOKMARK", "object": {
                        "kind": rt.kind, "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(rev),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}}
                )
            rv = rev
        backend_watch = self._backend_call(self.backend.watch, prefix, rv + 1, max_pending)
        w = ObjectWatch(self, rt, matcher, backend_watch, rv, initial, allow_bookmarks)
        with self._lock:
            self._watches.add(w)
        return w

    def close_watches(self) -> None:
        """Close every open watch (their :meth:`ObjectWatch.next` then raises EOFError)."""
        with self._lock:
            watches = list(self._watches)
        for w in watches:
            w.close()

    def _forget(self, w: ObjectWatch) -> None:
        with self._lock:
            self._watches.discard(w)


class ObjectWatch:
    """The events of one watch request, as JSON-ready dicts (shared with other readers of the same state: read
    them, never modify them).  Used by one thread; ``close`` from any."""

    def __init__(
        self,
        registry: Registry,
        rt: ResourceType,
        matcher: Matcher,
        backend_watch: BackendWatch,
        start_rv: int,
        initial: list[dict[str, Any]],
        allow_bookmarks: bool,
    ) -> None:
        self._registry = registry
        self.rt = rt
        self._matcher = matcher
        self._watch = backend_watch
        self.start_rv = start_rv
        self.last_rv = start_rv  # every change <= last_rv has been delivered
        self._pending = initial
        self._allow_bookmarks = allow_bookmarks
        self._ended = False

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` (from any thread, must not block) whenever :meth:`next` may have something new."""
        self._watch.set_listener(listener)

    @property
    def overflowed(self) -> bool:
        """True once the backend ended the watch because its consumer fell too far behind."""
        return self._watch.overflowed
    def next(self, timeout: float | None) -> list[dict[str, Any]] | None:
        """Block up to ``timeout`` seconds for events; ``None`` on timeout.

        Raises :class:`EOFError` once the stream is over (after an ERROR event,
        or when the watch was closed).
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        if self._ended:
            raise EOFError("watch ended")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                batch = self._watch.next(remaining)
            except WatchOverflowError:
                self._ended = True
                raise EOFError("watch ended: the consumer fell behind") from None
            except CompactedError as exc:
                self._ended = True
                shown = exc.compacted or self._registry.backend.revision()
                status = errors.expired(f"too old resource version: {self.start_rv} ({shown})").status()
                return [{"type": "ERROR", "object": status}]
            except BackendUnavailableError as exc:
                self._ended = True
                return [{"type": "ERROR", "object": errors.internal_error(str(exc)).status()}]
            if batch is None:
                return None
            if batch.progress is not None:
                self.last_rv = max(self.last_rv, batch.progress)
                continue
            events = self._convert(batch.events)
            if events:
                return events
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _convert(self, batch: tuple[Any, ...]) -> list[dict[str, Any]]:
        reg, rt, match_all = self._registry, self.rt, self._matcher.match_all
        out: list[dict[str, Any]] = []
        for ev in batch:
            rev = ev.kv.mod_revision
            self.last_rv = max(self.last_rv, rev)
            old: dict[str, Any] | None = None
            if ev.prev is not None and (ev.type == "DELETE" or not match_all):  # else only its presence matters
                old = _with_rv(dict(reg._shared(ev.prev, rt, ev.type != "DELETE")), rev)  # a copy: its own RV
            old_match = ev.prev is not None and (match_all or (old is not None and self._matcher.matches(old)))
            if ev.type == "DELETE":
                if old is not None and old_match:
                    out.append({"type": "DELETED", "object": old})
                continue
            new = reg._shared(ev.kv, rt)
            new_match = match_all or self._matcher.matches(new)
            if ev.kv.create_revision == rev:
                if new_match:
                    out.append({"type": "ADDED", "object": new})
            elif ev.prev is None:  # previous state unknown (compacted): assume it matched iff no selector
                if new_match:
                    out.append({"type": "MODIFIED" if match_all else "ADDED", "object": new})
            elif new_match:
                out.append({"type": "MODIFIED" if old_match else "ADDED", "object": new})
            elif old_match:  # not match_all: old was decoded
                out.append({"type": "DELETED", "object": old})
        return out

    def bookmark(self) -> dict[str, Any] | None:
        """A BOOKMARK event with the newest safe resourceVersion, if bookmarks were asked for.

        Also asks the backend for a progress notification, which lets later
        bookmarks advance past changes that did not match this watch.
        """
        if not self._allow_bookmarks or self._ended:
            return None
        self._watch.request_progress()
        return {"type": "BOOKMARK", "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version,
                                               "metadata": {"resourceVersion": str(self.last_rv)}}}

    def close(self) -> None:
        """Stop the watch; idempotent."""
        self._ended = True
        self._watch.close()
        self._registry._forget(self)
