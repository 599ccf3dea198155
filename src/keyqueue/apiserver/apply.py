"""Server-side apply (``PATCH`` with ``Content-Type: application/apply-patch+yaml``), as kube-apiserver's field
manager does it with kubernetes-sigs/structured-merge-diff's ``Updater.Apply``.

The body is the *applied configuration*: a partial object (YAML or JSON) with ``apiVersion``, ``kind`` and
``metadata.name``, holding the fields the manager (``fieldManager``, required) wants to own.  On top of the
live object (an empty one when the object does not exist: apply creates):

1. **merge** (:func:`~.typed.merge`): the configuration's fields are set; maps and structs merge field by field,
   sets and associative lists (``x-kubernetes-list-type``, a built-in kind's list map keys) item by item, anything
   atomic is replaced;
2. **prune**: the merged object's fields and list items (a map only when it is empty) that the manager applied
   last time, omits now and nobody owns (no manager's entry, of either operation, and not the new configuration)
   are removed;
3. **conflicts**: every field the write changes (added or modified, compared after the registry strategy ran) that
   another manager owns is a conflict — a 409 naming each (kube's ``FieldManagerConflict`` causes) unless
   ``force=true``, which moves those fields to the applier.  Fields set to the value they already have are no
   conflict: their managers share them.  Fields the write removes leave every manager;
4. the applier's ``Apply`` entry holds exactly the configuration's field set (:func:`~.typed.to_field_set`) —
   through ``/status`` only ``status``, through the main endpoint not ``status`` when that is a subresource
   (kube's reset fields) — with a new ``time`` when the object changed or the entry is new.

An object that has no ``managedFields`` yet gets a ``before-first-apply`` ``Update`` entry owning every field
first, as in kube, so that an apply does not silently take them over.

As kube-apiserver does for ``kubectl`` (the manager ``kubectl apply --server-side`` uses) on an object last written
by client-side apply: conflicts on fields whose live values are still those of the ``last-applied-configuration``
annotation are no conflicts (the object moves to server-side apply without ``--force-conflicts``), and the
annotation is rewritten to the applied configuration.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from . import errors
from .errors import APIError
from .managedfields import Managers, strip, strip_paths, writable_paths
from .objects import ResourceType
from .typed import MISSING, TypedError, compare, describe_path, merge, node_of, remove_paths, to_field_set

__all__ = ["APPLY_PATCH", "LAST_APPLIED", "ApplyRequest", "apply_options_error", "conflict_error", "parse_apply_body"]

APPLY_PATCH: Final = "application/apply-patch+yaml"
_Path = tuple[str, ...]
_Id = tuple[str, str, str, str]
_BEFORE_FIRST_APPLY: Final = "before-first-apply"
_KUBECTL: Final = "kubectl"
#: Client-side apply's annotation (kubectl's last applied configuration).
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
_LAST_APPLIED_PATH: Final = ("f:metadata", "f:annotations", "f:" + LAST_APPLIED)


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """YAML as sigs.k8s.io/yaml reads it into JSON: timestamps and ``=`` stay strings."""


_UNRESOLVED: Final = ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _UNRESOLVED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_apply_body(body: bytes) -> Any:
    """The applied configuration of a request body (JSON or YAML).  400 (kube's ``error decoding YAML``) for a body
    that is neither or is not an object; an empty body is an empty object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.bad_request(f"error decoding YAML: invalid UTF-8: {exc}") from None
    try:
        value = json.loads(text) if text.lstrip().startswith("{") else yaml.load(text, Loader=_Loader)
    except (ValueError, yaml.YAMLError) as exc:
        try:  # JSON-looking YAML (flow style) that JSON rejects
            value = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            raise errors.bad_request(f"error decoding YAML: {' '.join(str(exc).split())}") from None
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        what = {list: "array", str: "string", bool: "bool", int: "number", float: "number"}.get(type(value), "object")
        raise errors.bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
                                 f"unmarshal {what} into Go value of type map[string]interface {{}}")
    return value


def apply_options_error(apply: bool, field_manager: str, force: str) -> APIError | None:
    """kube's ``PatchOptions`` validation: ``fieldManager`` is required for an apply patch, ``force`` forbidden for
    any other patch (422); ``force`` must be a boolean (400)."""
    if force and force not in ("true", "false", "1", "0", "True", "False"):
        return errors.bad_request(f'strconv.ParseBool: parsing "{force}": invalid syntax')
    cause = None
    if apply and not field_manager:
        cause = ("FieldValueRequired", "fieldManager", "Required value: is required for apply patch")
    elif not apply and force:
        cause = ("FieldValueForbidden", "force", "Forbidden: may not be specified for non-apply patch")
    if cause is None:
        return None
    reason, path, message = cause
    return APIError(422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: {path}: {message}',
                    {"group": "meta.k8s.io", "kind": "PatchOptions",
                     "causes": [{"reason": reason, "message": message, "field": path}]})


def _print_manager(key: _Id) -> str:
    """A manager as kube's conflict messages name it: ``"name"`` for an applier, ``"name" using apps/v1`` for an
    updater, with ``with subresource "status"`` for one through a subresource."""
    manager, operation, api_version, subresource = key
    out = json.dumps(manager)
    if subresource:
        out += f" with subresource {json.dumps(subresource)}"
    if operation == "Update":
        out += f" using {api_version}"
    return out


def conflict_error(conflicts: list[tuple[_Id, _Path]]) -> APIError:
    """kube's 409 for an apply's conflicts: one ``FieldManagerConflict`` cause per field and manager, and its
    message (``Apply failed with 1 conflict: conflict with "m" using apps/v1: .spec.replicas``)."""
    ordered = sorted(conflicts, key=lambda c: (_print_manager(c[0]), describe_path(c[1])))
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_print_manager(key)}",
               "field": describe_path(path)} for key, path in ordered]
    if len(ordered) == 1:
        key, path = ordered[0]
        message = f"Apply failed with 1 conflict: conflict with {_print_manager(key)}: {describe_path(path)}"
    else:
        lines: list[str] = []
        by_manager: dict[str, list[str]] = {}
        for key, path in ordered:
            by_manager.setdefault(_print_manager(key), []).append(describe_path(path))
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by_manager[manager])
        message = f"Apply failed with {len(ordered)} conflicts: " + "\n".join(lines)
    return APIError(409, "Conflict", message, {"causes": causes})


def _typed_error(rt: ResourceType, config: Mapping[str, Any], exc: TypedError) -> APIError:
    meta = config.get("metadata") if isinstance(config.get("metadata"), Mapping) else {}
    name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)  # type: ignore[union-attr]
    return errors.bad_request(f"failed to create typed patch object ({rt.api_version}, Kind={rt.kind}) {name}: "
                              f"{exc}")


def _copy_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _unchanged_since_client_side_apply(rt: ResourceType, live: Mapping[str, Any]) -> set[_Path]:
    """kube's last-applied manager: the fields of client-side apply's ``last-applied-configuration`` whose live
    values are still the applied ones — ``kubectl apply --server-side`` may take them from
    ``kubectl-client-side-apply`` (or any manager) without a conflict, so that switching an object from client-side
    to server-side apply just works.  Empty without a readable annotation."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        applied = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return set()
    if not isinstance(applied, dict):
        return set()
    node = node_of(rt)
    try:
        paths = to_field_set(node, applied)
    except TypedError:
        return set()
    differ = compare(node, strip(rt, applied), strip(rt, live)).modified
    return paths - differ


def _restrict(decoded: Any, raw: Any) -> Any:
    """``decoded`` with only the fields ``raw`` has (and ``raw``'s ``null`` s and empty maps and lists, which
    decoding drops but which the applier owns)."""
    if isinstance(raw, dict) and isinstance(decoded, dict):
        return {k: _restrict(decoded[k], v) if k in decoded else v for k, v in raw.items()
                if k in decoded or v is None or v == {} or v == []}
    if isinstance(raw, list) and isinstance(decoded, list) and len(raw) == len(decoded):
        return [_restrict(d, r) for d, r in zip(decoded, raw, strict=True)]
    return decoded


@dataclass
class ApplyRequest:
    """One apply of ``config`` (the parsed body) to an object of ``rt`` named ``name`` by ``manager``.

    :meth:`check` validates the configuration (400s), :meth:`normalize` takes the registry's decoding of it;
    :meth:`merged` gives the object to store from the live one
    (merge and prune); :meth:`managed_fields` the new ``managedFields`` once the registry strategy ran on it
    (409 on conflicts unless ``force``).  Holds no lock: the registry calls it inside its read-modify-write loop,
    again on every retry."""

    rt: ResourceType
    name: str
    config: dict[str, Any]
    manager: str
    force: bool = False
    subresource: str = ""
    #: Paths a ``/scale`` apply may set (on the workload); ``None`` elsewhere.
    scale_paths: frozenset[_Path] | None = None
    _applied: set[_Path] = field(default_factory=set)

    def check(self) -> None:
        """400 for a configuration of another apiVersion or kind, with ``managedFields``, without the URL's name,
        or whose lists do not fit the type (an item without its key, two items with one key)."""
        rt, config = self.rt, self.config
        version = config.get("apiVersion", "")
        kind = config.get("kind", "")
        if version != rt.api_version:
            raise errors.bad_request("Incorrect version specified in apply patch. "
                                     f"Specified patch version: {version}, expected: {rt.api_version}")
        meta = config.get("metadata")
        if kind != rt.kind:
            raise errors.bad_request(f"failed to create typed patch object ({rt.api_version}, Kind={kind}): "
                                     f"no corresponding type for {rt.api_version}, Kind={kind}")
        if meta is not None and not isinstance(meta, dict):
            raise errors.bad_request("failed to create typed patch object: .metadata: expected map, got "
                                     f"{type(meta).__name__}")
        meta = meta or {}
        if meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        if meta.get("name", "") != self.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({self.name})")
        try:
            to_field_set(node_of(rt), config)
        except TypedError as exc:
            raise _typed_error(rt, config, exc) from None

    def normalize(self, decoded: Mapping[str, Any]) -> None:
        """Take the configuration as the registry decoded it (``decoded``: values normalised, unknown fields
        dropped, defaults added) back to the fields the body set: the applier owns what it sent, not the
        defaults; a ``null`` it sent stays (it owns the field and unsets it)."""
        self.config = _restrict(decoded, self.config)
        paths = strip_paths(self.rt, to_field_set(node_of(self.rt), self.config))
        self._applied = (set(self.scale_paths) & paths if self.scale_paths is not None
                         else writable_paths(self.rt, paths, self.subresource))

    @property
    def identity(self) -> _Id:
        return (self.manager, "Apply", "", self.subresource)

    def merged(self, live: dict[str, Any] | None) -> dict[str, Any]:
        """The live object (``None``: a create) with the configuration merged in and what the manager no longer
        applies pruned."""
        node = node_of(self.rt)
        try:
            merged: dict[str, Any] = merge(node, MISSING if live is None else live, self.config)
        except TypedError as exc:
            raise _typed_error(self.rt, self.config, exc) from None
        if live is None:
            return merged
        managers = self._managers(live)
        last = managers.sets.get(self.identity)
        if not last:
            return merged
        owned = set(self._applied)
        for key, paths in managers.sets.items():
            if key != self.identity:
                owned |= paths
        # structured-merge-diff's prune, addBackOwnedItems and addBackDanglingItems together: of the merged
        # object's fields (leaves, list items, empty maps), those the applier had and nobody owns now go; a map
        # that still holds anything stays
        try:
            present = to_field_set(node, merged)
        except TypedError as exc:
            raise _typed_error(self.rt, self.config, exc) from None
        return remove_paths(node, merged, (present & last) - owned)  # type: ignore[no-any-return]

    def _syncs_last_applied(self, live: Mapping[str, Any] | None) -> bool:
        return (self.manager == _KUBECTL and live is not None
                and bool(((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)))

    def sync_last_applied(self, live: Mapping[str, Any], new: dict[str, Any]) -> None:
        """kube's last-applied updater: an apply by ``kubectl`` to an object that carries client-side apply's
        ``last-applied-configuration`` annotation rewrites it to the applied configuration (so that a later
        client-side apply diffs against what was applied), in ``new`` (the merged object)."""
        if not self._syncs_last_applied(live):
            return
        config = _copy_json(self.config)
        meta = config.setdefault("metadata", {})
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)
        new.setdefault("metadata", {}).setdefault("annotations", {})[LAST_APPLIED] = (
            json.dumps(config, sort_keys=True, separators=(",", ":")) + "\n")

    def _managers(self, live: Mapping[str, Any]) -> Managers:
        entries = (live.get("metadata") or {}).get("managedFields")
        managers = Managers(entries)
        if not managers.entries:
            try:
                paths = to_field_set(node_of(self.rt), live)
            except TypedError as exc:
                raise _typed_error(self.rt, live, exc) from None
            managers.put((_BEFORE_FIRST_APPLY, "Update", self.rt.api_version, ""), strip_paths(self.rt, paths),
                         self.rt.api_version, str((live.get("metadata") or {}).get("creationTimestamp") or ""))
        return managers

    def managed_fields(self, live: dict[str, Any] | None, new: Mapping[str, Any], now: str) -> list[dict[str, Any]]:
        """The ``managedFields`` of ``new`` (the object about to be stored, after the registry strategy) written
        over ``live`` (``None``: a create) at ``now``.  409 (:func:`conflict_error`) when the write changes a field
        another manager owns, unless ``force``."""
        node = node_of(self.rt)
        comparison = compare(node, MISSING if live is None else strip(self.rt, live), strip(self.rt, new))
        if self._syncs_last_applied(live):  # the server's own change, owned by whoever owned it
            comparison.modified.discard(_LAST_APPLIED_PATH)
        managers = self._managers(live) if live is not None else Managers(None)
        changed = comparison.changed
        conflicts = [(key, path) for key, paths in managers.sets.items() if key != self.identity
                     for path in paths & changed]
        if conflicts and not self.force and live is not None and self.manager == _KUBECTL:
            allowed = _unchanged_since_client_side_apply(self.rt, live)
            conflicts = [(key, path) for key, path in conflicts if path not in allowed]
        if conflicts and not self.force:
            raise conflict_error(conflicts)
        managers.take(self.identity, comparison, changed)
        is_new = self.identity not in managers.entries
        managers.put(self.identity, set(self._applied), self.rt.api_version,
                     now if is_new or not comparison.empty() else None)
        return managers.encode()
