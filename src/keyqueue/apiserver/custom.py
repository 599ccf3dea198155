"""Custom resources: what one served version of a CustomResourceDefinition gives its objects.

A :class:`CustomSchema` sits in the :attr:`~.objects.ResourceType.custom` of the type the catalogue serves for a
CRD version; the registry's generic code path (the one ConfigMaps take) calls it where a built-in type has its
field spec:

* decoding (:meth:`CustomSchema.complete`; :func:`~.objects.decode_typed` checks ``kind``/``apiVersion`` and
  decodes ``metadata`` as ``ObjectMeta`` first, keeping only its fields): every other field pruned to the structural
  schema unless ``x-kubernetes-preserve-unknown-fields`` (at any depth; the pruned paths are reported for
  ``fieldValidation``), ``null`` dropped where the schema is not ``nullable``, then the schema's defaults applied;
* validation (:meth:`CustomSchema.causes`): types (``integer`` vs ``number``, ``x-kubernetes-int-or-string``),
  ``required``, ``enum``, ``minimum``/``maximum`` (and exclusive), ``multipleOf``, ``minLength``/``maxLength``,
  ``pattern``, ``minItems``/``maxItems``, ``minProperties``/``maxProperties``, ``nullable``, with
  kube-apiserver's 422 messages and field paths;
* the ``status`` subresource (:meth:`CustomSchema.prepare_update`): the main endpoint ignores ``status``, ``/status``
  ignores everything else; ``metadata.generation`` starts at 1 and grows with every change outside ``metadata``
  (and ``status`` when it is a subresource);
* reads (:meth:`CustomSchema.complete` again, from :func:`~.objects.from_stored`): the served version's
  ``apiVersion`` (conversion strategy ``None``) and the defaults, applied again on every read as kube does;
* the Table form from ``additionalPrinterColumns`` (kubectl's JSONPath, :mod:`.jsonpath`) and the OpenAPI v3
  schema of the version.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .cel.rules import SchemaRules
from .jsonpath import JSONPath, JSONPathError, print_value
from .jsonpath import parse as parse_jsonpath
from .patterns import PatternError, pattern_matches

__all__ = ["PRINTER_COLUMN_FORMATS", "PRINTER_COLUMN_TYPES", "CustomSchema", "check_value", "keep_all_but_status",
           "type_name"]

_Cause = tuple[str, str, str]
_TYPE_NAMES: Final = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object",
                      list: "array", type(None): "null"}


def type_name(value: Any) -> str:
    """The JSON schema type name of a decoded JSON value (``integer`` for whole numbers without a fraction)."""
    return _TYPE_NAMES.get(type(value), "object")


def _show(value: Any) -> str:
    """A value as kube's field errors print it (Go ``%q`` for strings, ``%v`` otherwise)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if value is None:
        return "null"
    return str(value) if isinstance(value, int) else json.dumps(value, separators=(",", ":"))[:200]


def _matches_type(value: Any, want: str) -> bool:
    if want == "object":
        return isinstance(value, dict)
    if want == "array":
        return isinstance(value, list)
    if want == "string":
        return isinstance(value, str)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if want == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _preserves(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(
        schema.get("x-kubernetes-embedded-resource"))


def _prune(value: Any, schema: Mapping[str, Any], path: str, unknown: list[str]) -> Any:
    """``value`` with the fields ``schema`` does not specify removed (their paths added to ``unknown``) and
    ``null`` removed where not ``nullable``.  A value of the wrong type is left for validation to report."""
    if isinstance(value, dict):
        props: Mapping[str, Any] | None = schema.get("properties")
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if props is not None and key in props:
                item_schema: Mapping[str, Any] | None = props[key]
            elif isinstance(extra, Mapping):
                item_schema = extra
            elif _preserves(schema) or extra is True:
                item_schema = None  # kept as it is, unknown fields included
            else:
                unknown.append(sub)
                continue
            if item is None and not (item_schema or {}).get("nullable") and item_schema is not None:
                continue  # kube prunes null where the schema does not allow it (and defaults it)
            out[key] = item if item_schema is None else _prune(item, item_schema, sub, unknown)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(v, schema["items"], f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    return value


def _default(value: Any, schema: Mapping[str, Any]) -> Any:
    """Apply ``default``s of ``schema``'s properties to ``value`` (in place, nested defaults included)."""
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _default(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key in value:
                if key not in props:
                    _default(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(item, schema["items"])
    return value


def _check(value: Any, schema: Mapping[str, Any], path: str, causes: list[_Cause]) -> None:
    """Validate ``value`` against ``schema`` (kube-openapi's checks and messages)."""
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            causes.append(("FieldValueInvalid", path, f'Invalid value: "null": {path} in body must be of type '
                           f'{schema["type"]}: "null"'))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (_matches_type(value, "integer") or isinstance(value, str)):
            got = type_name(value)
            causes.append(("FieldValueInvalid", path,
                           f'Invalid value: "{got}": {path} in body must be of type integer,string: "{got}"'))
            return
    elif (want := schema.get("type")) and not _matches_type(value, want):
        got = type_name(value)
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{got}": {path} in body must be of type {want}: '
                       f'"{got}"'))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v) for v in schema["enum"])
        causes.append(("FieldValueNotSupported", path, f"Unsupported value: {_show(value)}: supported values: "
                       f"{allowed}"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, causes)
    elif isinstance(value, str):
        _check_string(value, schema, path, causes)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(("FieldValueTooMany", path,
                           f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have at "
                           f"least {schema['minItems']} items"))
        if isinstance(schema.get("items"), Mapping):
            for i, item in enumerate(value):
                _check(item, schema["items"], f"{path}[{i}]", causes)
    elif isinstance(value, dict):
        _check_object(value, schema, path, causes)


def check_value(value: Any, schema: Mapping[str, Any], path: str, causes: list[_Cause]) -> None:
    """Append to ``causes`` what is wrong with ``value`` against the structural ``schema`` (``path`` names it in the
    messages, as kube's field errors do)."""
    _check(value, schema, path, causes)


def _check_number(value: float, schema: Mapping[str, Any], path: str, causes: list[_Cause]) -> None:
    shown = _show(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        if schema.get("exclusiveMinimum") and value <= low:
            causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body should be greater "
                           f"than {_show(low)}"))
        elif value < low:
            causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body should be greater "
                           f"than or equal to {_show(low)}"))
    if high is not None:
        if schema.get("exclusiveMaximum") and value >= high:
            causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body should be less than "
                           f"{_show(high)}"))
        elif value > high:
            causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body should be less than "
                           f"or equal to {_show(high)}"))
    step = schema.get("multipleOf")
    if step and (value / step) != int(value / step):
        causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body should be a multiple "
                       f"of {_show(step)}"))


def _check_string(value: str, schema: Mapping[str, Any], path: str, causes: list[_Cause]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        causes.append(("FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be at "
                       f"least {schema['minLength']} chars long"))
    pattern = schema.get("pattern")
    if pattern is not None and not _pattern_matches(str(pattern), value):
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should match "
                       f"'{pattern}'"))


def _pattern_matches(pattern: str, value: str) -> bool:
    """Go's ``regexp.MatchString`` (RE2); a pattern that does not compile (a CRD stored before it was checked)
    matches nothing rather than failing the request."""
    try:
        return pattern_matches(pattern, value)
    except PatternError:
        return False


def _check_object(value: dict[str, Any], schema: Mapping[str, Any], path: str, causes: list[_Cause]) -> None:
    for key in schema.get("required") or ():
        if key not in value:
            causes.append(("FieldValueRequired", f"{path}.{key}" if path else key, "Required value"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        causes.append(("FieldValueTooMany", path,
                       f"Too many: {len(value)}: must have at most {schema['maxProperties']} items"))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have at "
                       f"least {schema['minProperties']} properties"))
    props: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            _check(item, props[key], f"{path}.{key}" if path else key, causes)
        elif isinstance(extra, Mapping):
            _check(item, extra, f"{path}[{key}]" if path else key, causes)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


#: The column types kube-apiserver allows in ``additionalPrinterColumns``, and the formats.
PRINTER_COLUMN_TYPES: Final = ("boolean", "date", "integer", "number", "string")
PRINTER_COLUMN_FORMATS: Final = ("byte", "date", "date-time", "double", "float", "int32", "int64", "password")


def _cell(kind: str, value: Any, date: Callable[[str, float], str], now: float) -> Any:
    """A printer column's cell from the first value its JSONPath selected, as kube-apiserver's table convertor
    makes it: a ``string`` column prints any value (objects and arrays as JSON); other types take a value of their
    own type (an integer column truncates a float) and are empty (``None``) otherwise."""
    if kind == "string":
        return print_value(value)
    if value is None:
        return None
    if kind == "integer" and not isinstance(value, bool) and isinstance(value, int | float):
        return int(value)
    if kind == "number" and not isinstance(value, bool) and isinstance(value, int | float):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return date(value, now)
    return None


@functools.lru_cache(maxsize=1024)
def _compiled_column(path: str) -> JSONPath:
    """A printer column's ``jsonPath`` parsed as kube-apiserver does (``{<path>}``), once per distinct path."""
    return parse_jsonpath("{" + path + "}")



def keep_all_but_status(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """A write through ``/status``, in place: ``new`` becomes a copy of ``old`` with ``new``'s status (none if
    ``new`` has none), as kube-apiserver's status strategies do for every kind."""
    status = new.get("status")
    new.clear()
    new.update(copy.deepcopy(dict(old)))
    if status is None:
        new.pop("status", None)
    else:
        new["status"] = status


@dataclass(frozen=True, eq=False)
class CustomSchema:
    """One served version of a CRD: its structural schema (``openAPIV3Schema``) and subresources."""

    crd_name: str
    storage_version: str
    schema: Mapping[str, Any]
    #: True if the version declares the ``status`` subresource.
    status: bool = False
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    categories: tuple[str, ...] = ()
    #: The CRD's ``metadata.uid``: a CRD deleted and created again under the same name is another one.
    crd_uid: str = ""
    #: True while the CRD is being deleted: its objects are still served, creates are refused (405).
    terminating: bool = False
    #: The schema's ``x-kubernetes-validations`` rules (None: the schema has none).
    rules: SchemaRules | None = None

    # ------------------------------------------------------------------ decoding
    def complete(self, head: dict[str, Any], rest: Mapping[str, Any], unknown: list[str]) -> dict[str, Any]:
        """An object of this version from ``head`` (its ``apiVersion``, ``kind`` and ``metadata``, already decoded)
        and ``rest`` (its other fields): ``head`` with ``rest`` pruned to the schema (the paths of the pruned unknown
        fields added to ``unknown``) and the schema's defaults applied, as kube decodes a custom resource from a
        request body or from storage."""
        head.update(_prune(rest, self.schema, "", unknown))
        _default(head, self.schema)
        return head

    def causes(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[_Cause]:
        """The schema validation errors of ``obj`` as ``(reason, field, message)``, then its CEL rules' (``old``:
        the stored object on an update, for transition rules)."""
        causes: list[_Cause] = []
        rest = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "metadata")}
        schema = {k: v for k, v in self.schema.items() if k != "required"}
        _check(rest, schema, "", causes)
        for key in self.schema.get("required") or ():
            if key not in obj:
                causes.append(("FieldValueRequired", key, "Required value"))
        if self.rules is not None:
            causes.extend(self.rules.causes(obj, old, causes))
        return causes

    def canonical(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """``obj`` with every key sorted (kube encodes custom resources as JSON maps)."""
        out: dict[str, Any] = _sorted(obj)
        return out

    # ------------------------------------------------------------------ writes
    def prepare_create(self, obj: dict[str, Any]) -> None:
        """A new object: ``metadata.generation`` 1; ``status`` dropped if it is a subresource."""
        obj["metadata"]["generation"] = 1
        if self.status:
            obj.pop("status", None)

    def prepare_update(self, new: dict[str, Any], old: Mapping[str, Any], subresource: str) -> None:
        """An update of ``old`` into ``new`` (in place), through the main endpoint (``subresource`` ``""``) or
        ``status``: the main endpoint keeps ``old``'s status if it is a subresource; ``/status`` keeps everything
        of ``old`` but the status.  ``metadata.generation`` grows by one if anything but ``metadata`` (and a
        subresource ``status``) changed."""
        if subresource == "status":
            keep_all_but_status(new, old)
        elif self.status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        skip = ("metadata", "status") if self.status else ("metadata",)
        changed = ({k: v for k, v in new.items() if k not in skip}
                   != {k: v for k, v in old.items() if k not in skip})
        generation = int(old["metadata"].get("generation") or 1)
        new["metadata"]["generation"] = generation + 1 if changed else generation

    # ------------------------------------------------------------------ table and OpenAPI
    def columns(self, date: Callable[[str, float], str]) -> list[tuple[dict[str, Any], Callable[..., Any]]]:
        """The ``additionalPrinterColumns`` as Table columns and their cells, as kube-apiserver's table convertor
        makes them: each column's ``jsonPath`` is a kubectl JSONPath (:mod:`.jsonpath`) evaluated as ``{<path>}``,
        its cell the first value selected (:func:`_cell`; ``date`` columns through ``date(value, now)``), empty
        (``None``) when nothing is selected or the path cannot be evaluated on the object.  A path that does not
        parse ends the columns there, as in kube (the CRD was accepted: kube checks only that it starts with
        ``.``)."""
        out: list[tuple[dict[str, Any], Callable[..., Any]]] = []
        for col in self.printer_columns:
            path = str(col.get("jsonPath", ""))
            try:
                template = _compiled_column(path)
            except JSONPathError:
                break
            kind = str(col.get("type", "string"))
            definition = {"name": col.get("name", ""), "type": kind, "format": col.get("format", ""),
                          "description": col.get("description") or "Custom resource definition column (in "
                          f"JSONPath format): {path}", "priority": int(col.get("priority", 0))}

            def cell(obj: Mapping[str, Any], now: float, template: JSONPath = template, kind: str = kind) -> Any:
                found, value = template.first(obj)
                return _cell(kind, value, date, now) if found else None

            out.append((definition, cell))
        return out

    def openapi_schema(self, object_meta: dict[str, Any]) -> dict[str, Any]:
        """The version's schema as an OpenAPI v3 component: ``apiVersion``, ``kind`` and ``metadata`` (a reference
        to ``ObjectMeta``) added."""
        schema = copy.deepcopy(dict(self.schema))
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned schema of this "
                               "representation of an object."}
        props["kind"] = {"type": "string", "description": "Kind is a string value representing the REST resource "
                         "this object represents."}
        props["metadata"] = {"allOf": [object_meta], "description": "Standard object's metadata."}
        schema.setdefault("type", "object")
        return schema
