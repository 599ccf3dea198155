"""CustomResourceDefinitions (``apiextensions.k8s.io/v1``): their validation, status and the types they serve.

The CRD itself is stored like every type (:data:`~.objects.CRDS`, cluster-scoped); the registry calls this module
where kube-apiserver's CRD strategy and its apiextensions controllers act:

* :func:`crd_causes` -- kube's validation of a CRD (``metadata.name`` = ``<plural>.<group>``, the names, the
  scope, exactly one storage version, served versions, a structural ``openAPIV3Schema`` per version, the
  conversion strategy ``None``, immutable scope, ``status.storedVersions`` still listed);
* :func:`prepare_crd` -- the defaults (``singular``, ``listKind``) and the status the naming and establishing
  controllers write (``acceptedNames``, conditions ``NamesAccepted`` and ``Established``, ``storedVersions``);
* :func:`served_types` -- one :class:`~.objects.ResourceType` per served version, which the registry's
  :class:`~.catalogue.Catalogue` then serves.

Differences from kube-apiserver, on purpose: the status is computed within the CRD's own write (no controllers,
so the CRD is ``Established`` when the create returns, and a CRD refused for a name conflict in its group
(``NamesAccepted`` False) is accepted only when it is next written, not when the conflicting one goes);
conversion webhooks are refused (422) -- every version is served from the same stored objects with ``apiVersion``
rewritten (strategy ``None``); ``scale`` is accepted but not served (404).  Deleting a CRD works as kube's
cleanup finalizer (:data:`CRD_FINALIZER`): the CRD is marked, creates of its resources get 405, its objects are
deleted within the DELETE call (those with finalizers are marked and waited for), and the CRD goes with the last
of them -- but no ``Terminating`` condition is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from .cel.rules import SchemaRules, rule_causes
from .custom import PRINTER_COLUMN_FORMATS, PRINTER_COLUMN_TYPES, CustomSchema, check_value
from .objects import ResourceType, format_time
from .patterns import PatternError, compile_pattern
from .validation import DNS1035_LABEL, DNS1123_LABEL, MSG_DNS1035_LABEL, MSG_DNS1123_LABEL

__all__ = ["CRD_FINALIZER", "crd_causes", "prepare_crd", "served_types"]

#: The finalizer every CRD gets on create, as in kube: deleting the CRD marks it, its objects are deleted (those
#: with finalizers waited for), then this finalizer is removed and the CRD goes.
CRD_FINALIZER: Final = "customresourcecleanup.apiextensions.k8s.io"

_Cause = tuple[str, str, str]
_DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_FORBIDDEN: Final = ("$ref", "$schema", "id", "definitions", "dependencies", "patternProperties", "additionalItems")
_SCOPES: Final = ("Cluster", "Namespaced")


def _q(value: Any) -> str:
    """A value quoted as kube's field errors quote it (Go's ``%q``: quotes and backslashes escaped)."""
    return json.dumps(str(value), ensure_ascii=False)


def _label_causes(path: str, value: Any, required: bool = True) -> list[_Cause]:
    if not value:
        return [("FieldValueRequired", path, "Required value")] if required else []
    if not isinstance(value, str) or len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        return [("FieldValueInvalid", path, f"Invalid value: {_q(value)}: {MSG_DNS1123_LABEL}")]
    return []


def _kind_causes(path: str, value: Any, required: bool = True) -> list[_Cause]:
    if not value:
        return [("FieldValueRequired", path, "Required value")] if required else []
    if not DNS1035_LABEL.fullmatch(str(value).lower()):
        return [("FieldValueInvalid", path, f"Invalid value: {_q(value)}: may have mixed case, but should otherwise "
                 "match: [a-z]([-a-z0-9]*[a-z0-9])?")]
    return []


def _schema_causes(schema: Any, path: str, root: bool) -> list[_Cause]:
    """Structural-schema rules (a subset of kube's): every specified field has a known ``type`` (unless
    ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``), arrays have ``items``,
    ``properties`` and ``additionalProperties`` exclude each other, no ``$ref`` and the like, patterns compile."""
    if not isinstance(schema, Mapping):
        return [("FieldValueInvalid", path, "Invalid value: must be an object")]
    causes: list[_Cause] = []
    for key in _FORBIDDEN:
        if key in schema:
            causes.append(("FieldValueForbidden", f"{path}.{key}", f"Forbidden: {key} is not supported"))
    kind = schema.get("type")
    int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
    if root and kind != "object":
        causes.append(("FieldValueInvalid", f"{path}.type", f"Invalid value: {_q(kind or '')}: must be object at "
                       "the root"))
    elif kind is None and not int_or_string and not schema.get("x-kubernetes-preserve-unknown-fields"):
        causes.append(("FieldValueRequired", f"{path}.type", "Required value: must not be empty for specified "
                       "object fields"))
    elif kind is not None and kind not in _TYPES:
        causes.append(("FieldValueNotSupported", f"{path}.type", f"Unsupported value: {_q(kind)}: supported "
                       "values: " + ", ".join(_q(t) for t in _TYPES)))
    elif int_or_string and kind is not None:
        causes.append(("FieldValueForbidden", f"{path}.type", "Forbidden: must be empty if "
                       "x-kubernetes-int-or-string is true"))
    if "properties" in schema and "additionalProperties" in schema:
        causes.append(("FieldValueForbidden", f"{path}.additionalProperties", "Forbidden: additionalProperties "
                       "and properties are mutual exclusive"))
    if kind == "array":
        if "items" not in schema:
            causes.append(("FieldValueRequired", f"{path}.items", "Required value: must be specified"))
        else:
            causes.extend(_schema_causes(schema["items"], f"{path}.items", False))
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            compile_pattern(str(pattern))
        except PatternError as exc:
            causes.append(("FieldValueInvalid", f"{path}.pattern", f"Invalid value: {_q(pattern)}: must be a valid "
                           f"regular expression, but isn't: {exc}"))
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            if root and name == "metadata" and isinstance(sub, Mapping) and set(sub) - {"type", "description"}:
                causes.append(("FieldValueForbidden", f"{path}.properties[metadata]", "Forbidden: must not specify "
                               "anything other than name and generateName, but metadata is implicitly specified"))
                continue
            causes.extend(_schema_causes(sub, f"{path}.properties[{name}]", False))
    elif props is not None:
        causes.append(("FieldValueInvalid", f"{path}.properties", "Invalid value: must be an object"))
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        causes.extend(_schema_causes(extra, f"{path}.additionalProperties", False))
    if "default" in schema and not causes:  # a default must itself be valid (kube checks it against its schema)
        problems: list[_Cause] = []
        check_value(schema["default"], schema, f"{path}.default", problems)
        causes.extend(problems)
    return causes


def _column_causes(col: Mapping[str, Any], path: str) -> list[_Cause]:
    """kube's checks of one printer column (its field names as kube writes them, ``JSONPath`` included): a name, a
    known type and format, and a ``jsonPath`` starting with ``.`` -- kube does not parse the rest at this point."""
    causes: list[_Cause] = []
    if not col.get("name"):
        causes.append(("FieldValueRequired", f"{path}.name", "Required value"))
    kind, fmt, json_path = col.get("type"), col.get("format"), col.get("jsonPath")
    types = ",".join(PRINTER_COLUMN_TYPES)
    if not kind:
        causes.append(("FieldValueRequired", f"{path}.type", f"Required value: must be one of {types}"))
    elif kind not in PRINTER_COLUMN_TYPES:
        causes.append(("FieldValueInvalid", f"{path}.type", f"Invalid value: {_q(kind)}: must be one of {types}"))
    if fmt and fmt not in PRINTER_COLUMN_FORMATS:
        causes.append(("FieldValueInvalid", f"{path}.format", f"Invalid value: {_q(fmt)}: must be one of "
                       + ",".join(PRINTER_COLUMN_FORMATS)))
    if not json_path:
        causes.append(("FieldValueRequired", f"{path}.JSONPath", "Required value"))
    elif not str(json_path).startswith("."):
        causes.append(("FieldValueInvalid", f"{path}.JSONPath", f"Invalid value: {_q(json_path)}: must be a simple "
                       "json path starting with ."))
    return causes


def crd_causes(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[_Cause]:
    """kube's validation of a CRD (already defaulted by :func:`prepare_crd`) as ``(reason, field, message)``."""
    spec: Mapping[str, Any] = crd.get("spec") or {}
    names: Mapping[str, Any] = spec.get("names") or {}
    name = (crd.get("metadata") or {}).get("name", "")
    group = spec.get("group", "")
    causes: list[_Cause] = []
    if name and name != f"{names.get('plural', '')}.{group}":
        causes.append(("FieldValueInvalid", "metadata.name",
                       f'Invalid value: {_q(name)}: must be spec.names.plural+"."+spec.group'))
    if not group:
        causes.append(("FieldValueRequired", "spec.group", "Required value"))
    elif len(group) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(group) or "." not in group:
        causes.append(("FieldValueInvalid", "spec.group",
                       f"Invalid value: {_q(group)}: should be a domain with at least one dot"))
    causes.extend(_label_causes("spec.names.plural", names.get("plural")))
    causes.extend(_label_causes("spec.names.singular", names.get("singular")))
    causes.extend(_kind_causes("spec.names.kind", names.get("kind")))
    causes.extend(_kind_causes("spec.names.listKind", names.get("listKind")))
    if names.get("kind") and names.get("kind") == names.get("listKind"):
        causes.append(("FieldValueInvalid", "spec.names.listKind",
                       f"Invalid value: {_q(names['listKind'])}: kind and listKind may not be the same"))
    for i, short in enumerate(names.get("shortNames") or ()):
        causes.extend(_label_causes(f"spec.names.shortNames[{i}]", short))
    for i, category in enumerate(names.get("categories") or ()):
        causes.extend(_label_causes(f"spec.names.categories[{i}]", category))
    scope = spec.get("scope", "")
    if not scope:
        causes.append(("FieldValueRequired", "spec.scope", "Required value"))
    elif scope not in _SCOPES:
        causes.append(("FieldValueNotSupported", "spec.scope",
                       f'Unsupported value: {_q(scope)}: supported values: "Cluster", "Namespaced"'))
    causes.extend(_version_causes(spec.get("versions") or []))
    strategy = (spec.get("conversion") or {}).get("strategy", "None")
    if strategy != "None":
        causes.append(("FieldValueNotSupported", "spec.conversion.strategy",
                       f'Unsupported value: {_q(strategy)}: supported values: "None" (keyqueue\'s test API server '
                       "does not call conversion webhooks)"))
    if spec.get("preserveUnknownFields"):
        causes.append(("FieldValueInvalid", "spec.preserveUnknownFields",
                       "Invalid value: true: must be false in order to use defaults in the schema"))
    if old is not None:
        old_scope = (old.get("spec") or {}).get("scope")
        if old_scope and scope != old_scope:
            causes.append(("FieldValueInvalid", "spec.scope", f"Invalid value: {_q(scope)}: field is immutable"))
    listed = {v.get("name") for v in spec.get("versions") or ()}
    for i, stored in enumerate((crd.get("status") or {}).get("storedVersions") or ()):
        if stored not in listed:
            causes.append(("FieldValueInvalid", f"status.storedVersions[{i}]",
                           f"Invalid value: {_q(stored)}: must appear in spec.versions"))
    return causes


def _version_causes(versions: list[Mapping[str, Any]]) -> list[_Cause]:
    if not versions:
        return [("FieldValueRequired", "spec.versions", "Required value: must have exactly one version marked as "
                 "storage version")]
    causes: list[_Cause] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        vname = version.get("name", "")
        if not vname:
            causes.append(("FieldValueRequired", f"{path}.name", "Required value"))
        elif len(vname) > 63 or not DNS1035_LABEL.fullmatch(vname):
            causes.append(("FieldValueInvalid", f"{path}.name", f"Invalid value: {_q(vname)}: {MSG_DNS1035_LABEL}"))
        elif vname in seen:
            causes.append(("FieldValueDuplicate", f"{path}.name", f"Duplicate value: {_q(vname)}"))
        seen.add(vname)
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            causes.append(("FieldValueRequired", f"{path}.schema.openAPIV3Schema", "Required value: schemas are "
                           "required"))
        else:
            problems = _schema_causes(schema, f"{path}.schema.openAPIV3Schema", True)
            causes.extend(problems or rule_causes(schema, f"{path}.schema.openAPIV3Schema"))
        for j, col in enumerate(version.get("additionalPrinterColumns") or ()):
            causes.extend(_column_causes(col, f"{path}.additionalPrinterColumns[{j}]"))
    storage = [v.get("name", "") for v in versions if v.get("storage")]
    if len(storage) != 1:
        causes.append(("FieldValueInvalid", "spec.versions", f"Invalid value: {_q(storage)}: must have exactly "
                       "one version marked as storage version"))
    if not any(v.get("served") for v in versions):
        causes.append(("FieldValueInvalid", "spec.versions", "Invalid value: no served versions: must have at "
                       "least one served version"))
    return causes


def prepare_crd(crd: dict[str, Any], old: Mapping[str, Any] | None, now: float,
                conflict: tuple[str, str] | None = None) -> None:
    """Defaults and the server-written status of a CRD being created (``old`` ``None``) or updated (in place).
    The status a client sends is ignored (the CRD's status is a subresource); ``storedVersions`` only grows.
    ``conflict``: ``(reason, message)`` if one of its names is taken in its group (:meth:`Catalogue.name_conflict
    <.catalogue.Catalogue.name_conflict>`): then ``NamesAccepted`` and ``Established`` are False, no names are
    accepted and its resources are not served."""
    spec = crd.setdefault("spec", {})
    if old is None and CRD_FINALIZER not in (crd["metadata"].get("finalizers") or ()):
        crd["metadata"]["finalizers"] = [*(crd["metadata"].get("finalizers") or ()), CRD_FINALIZER]
    old_generation = int(((old or {}).get("metadata") or {}).get("generation") or 0)
    changed = old is None or spec != old.get("spec")
    crd["metadata"]["generation"] = old_generation + 1 if changed else old_generation
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    stored: list[str] = list(((old or {}).get("status") or {}).get("storedVersions") or ())
    storage = [v.get("name", "") for v in spec.get("versions") or () if v.get("storage")]
    if len(storage) == 1 and storage[0] not in stored:
        stored.append(storage[0])
    when = format_time(now)
    old_conditions = {c.get("type"): c for c in ((old or {}).get("status") or {}).get("conditions") or ()}

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        before = old_conditions.get(kind) or {}
        since = before.get("lastTransitionTime", when) if before.get("status") == status else when
        return {"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}

    if conflict is not None:
        crd["status"] = {
            "conditions": [condition("NamesAccepted", "False", *conflict),
                           condition("Established", "False", "NotAccepted", "not all names are accepted")],
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": stored,
        }
        return
    crd["status"] = {
        "conditions": [
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
            condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": {k: v for k, v in names.items()},
        "storedVersions": stored,
    }


def served_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types of a (valid, stored) CRD: one per served version; none while its names are not
    accepted."""
    conditions = {c.get("type"): c.get("status") for c in (crd.get("status") or {}).get("conditions") or ()}
    if conditions.get("NamesAccepted") != "True":
        return []
    spec: Mapping[str, Any] = crd["spec"]
    names: Mapping[str, Any] = spec["names"]
    namespaced = spec.get("scope") == "Namespaced"
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    selectors = frozenset({"metadata.name", "metadata.namespace"} if namespaced else {"metadata.name"})
    out = []
    for version in spec["versions"]:
        if not version.get("served"):
            continue
        custom = CustomSchema(
            crd_name=crd["metadata"]["name"],
            storage_version=storage,
            schema=version["schema"]["openAPIV3Schema"],
            status="status" in (version.get("subresources") or {}),
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            categories=tuple(names.get("categories") or ()),
            crd_uid=crd["metadata"].get("uid", ""),
            terminating=bool(crd["metadata"].get("deletionTimestamp")),
            rules=SchemaRules(version["schema"]["openAPIV3Schema"]),
        )
        out.append(ResourceType(
            names["plural"], names.get("singular") or str(names["kind"]).lower(), names["kind"], namespaced,
            tuple(names.get("shortNames") or ()), selectors, spec["group"], version["name"], custom=custom,
        ))
    return out
