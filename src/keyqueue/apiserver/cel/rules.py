"""CRD validation rules (``x-kubernetes-validations``): checked when the CRD is written (:func:`rule_causes`),
evaluated on every write of its objects (:class:`SchemaRules`), with kube-apiserver's messages and cost limits.

A rule sees ``self`` (the value where it is declared) and, on an update where the old value can be correlated
(object properties, map values, items of ``x-kubernetes-list-type: map`` lists by key), ``oldSelf``; a rule that
uses ``oldSelf`` (a transition rule) runs only then, unless ``optionalOldSelf`` makes ``oldSelf`` an optional.
A rule that does not use ``oldSelf`` and fails on a value equal to its old value is not an error (kube's
validation ratcheting).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .library import Optional
from .program import PER_CALL_LIMIT, CelEvalError, Program, to_cel
from .syntax import CelSyntaxError
from .types import CelType, max_cardinality, schema_type

__all__ = ["RUNTIME_BUDGET", "STATIC_COST_LIMIT", "STATIC_CRD_COST_LIMIT", "SchemaRules", "rule_causes"]

_Cause = tuple[str, str, str]

#: kube's limits: one rule's estimated cost, all rules of one CRD version, and all rules of one object at runtime.
STATIC_COST_LIMIT: Final = 10_000_000
STATIC_CRD_COST_LIMIT: Final = 100_000_000
RUNTIME_BUDGET: Final = 10_000_000
_MAX_MESSAGE: Final = 5 * 1024
_REASONS: Final = {"FieldValueInvalid": "FieldValueInvalid", "FieldValueForbidden": "FieldValueForbidden",
                   "FieldValueRequired": "FieldValueRequired", "FieldValueDuplicate": "FieldValueDuplicate"}
_BLOCKING: Final = ("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
                    "FieldValueTypeInvalid")
_NEWLINES: Final = re.compile(r"[\n\r]+")
_FIELD_TOKEN: Final = re.compile(r"'(?:\\.|[^'\\])*'|[.\[\]]|[^.\[\]']+")
_TRIVIAL_COST: Final = 10_000


def _go(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _rule_repr(rule: Mapping[str, Any]) -> str:
    """A rule as kube prints it in a CRD's 422 (Go's ``%#v`` of ``apiextensions.ValidationRule``)."""
    reason = rule.get("reason")
    optional = rule.get("optionalOldSelf")
    return ("apiextensions.ValidationRule{"
            f"Rule:{_go(str(rule.get('rule', '')))}, Message:{_go(str(rule.get('message', '')))}, "
            f"MessageExpression:{_go(str(rule.get('messageExpression', '')))}, "
            f"Reason:(*apiextensions.FieldValueErrorReason)({'nil' if reason is None else _go(str(reason))}), "
            f"FieldPath:{_go(str(rule.get('fieldPath', '')))}, "
            f"OptionalOldSelf:(*bool)({'nil' if optional is None else json.dumps(optional)})}}")


def _cost_message(name: str, cost: int, limit: int) -> str:
    factor = cost / limit
    shown = "more than 100x" if factor > 100 else f"{factor:f}x" if factor < 1.5 else f"{factor:.1f}x"
    return (f"{name} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, "
            "maxProperties, and maxLength where arrays, maps, and strings are declared)")


def _field_path(path: str, schema: Mapping[str, Any]) -> tuple[str, str] | None:
    """kube's ``ValidFieldPath``: ``fieldPath`` (``.a.b``, ``.a['b.c']``, ``.m[key]``) as a field path suffix
    (``.a.b``, ``.m[key]``), or None if it does not name a field of ``schema``."""
    out = ""
    node: Any = schema
    tokens = _FIELD_TOKEN.findall(path)
    if "".join(tokens) != path:
        return None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == ".":
            if i + 1 >= len(tokens) or tokens[i + 1] in (".", "[", "]"):
                return None
            name = tokens[i + 1]
            i += 2
        elif tok == "[":
            if i + 2 >= len(tokens) or tokens[i + 2] != "]" or not tokens[i + 1].startswith("'"):
                return None
            name = tokens[i + 1][1:-1].replace("\\'", "'").replace("\\\\", "\\")
            i += 3
        else:
            return None
        if not isinstance(node, Mapping):
            return None
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if isinstance(props, Mapping) and props:
            if name not in props:
                return None
            out += f".{name}"
            node = props[name]
        elif isinstance(extra, Mapping):
            out += f"[{name}]"
            node = extra
        else:
            return None
    return (out, path) if out else None


# ---------------------------------------------------------------------------------------------- CRD time
@dataclass
class _Walk:
    causes: list[_Cause] = field(default_factory=list)
    total: int = 0
    expensive: list[tuple[int, str]] = field(default_factory=list)

    def observe(self, path: str, cost: int) -> None:
        self.total += cost
        if cost >= STATIC_CRD_COST_LIMIT // 100:
            self.expensive = sorted([*self.expensive, (cost, path)], key=lambda e: -e[0])[:4]


def _children(schema: Mapping[str, Any], path: str, card: int | None, forbid: str | None
              ) -> Iterator[tuple[Mapping[str, Any], str, int | None, str | None]]:
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            if isinstance(sub, Mapping):
                yield sub, f"{path}.properties[{name}]", card, forbid
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        bound = schema.get("maxProperties")
        yield extra, f"{path}.additionalProperties", (card * int(bound) if card is not None and bound is not None
                                                      else None), forbid
    items = schema.get("items")
    if isinstance(items, Mapping):
        bound = schema.get("maxItems")
        uncorrelated = schema.get("x-kubernetes-list-type") != "map"
        yield items, f"{path}.items", (card * int(bound) if card is not None and bound is not None else None), \
            (forbid or (path if uncorrelated else None))


def _declared(schema: Mapping[str, Any], root: bool) -> CelType | None:
    return schema_type(schema, root)


def _check_rules(schema: Mapping[str, Any], path: str, root: bool, card: int | None, forbid: str | None,
                 walk: _Walk) -> None:
    rules = schema.get("x-kubernetes-validations")
    if isinstance(rules, list) and rules:
        _check_node(schema, rules, path, root, card, forbid, walk)
    elif rules is not None and not isinstance(rules, list):
        walk.causes.append(("FieldValueInvalid", f"{path}.x-kubernetes-validations",
                            "Invalid value: must be a list of validation rules"))
    for sub, sub_path, sub_card, sub_forbid in _children(schema, path, card, forbid):
        _check_rules(sub, sub_path, bool(sub.get("x-kubernetes-embedded-resource")), sub_card, sub_forbid, walk)


def _check_node(schema: Mapping[str, Any], rules: list[Any], path: str, root: bool, card: int | None,
                forbid: str | None, walk: _Walk) -> None:
    base = f"{path}.x-kubernetes-validations"
    shape_causes: list[_Cause] = []
    for i, rule in enumerate(rules):
        where = f"{base}[{i}]"
        if not isinstance(rule, Mapping):
            shape_causes.append(("FieldValueInvalid", where, "Invalid value: must be an object"))
            continue
        text, message = str(rule.get("rule", "")), str(rule.get("message", ""))
        if not text.strip():
            shape_causes.append(("FieldValueRequired", f"{where}.rule", "Required value: rule is not specified"))
        elif message and not message.strip():
            shape_causes.append(("FieldValueInvalid", f"{where}.message",
                                 f"Invalid value: {_go(message)}: message must be non-empty if specified"))
        elif _NEWLINES.search(message.strip()):
            shape_causes.append(("FieldValueInvalid", f"{where}.message",
                                 f"Invalid value: {_go(message)}: message must not contain line breaks"))
        elif _NEWLINES.search(text.strip()) and not message.strip():
            shape_causes.append(("FieldValueRequired", f"{where}.message",
                                 "Required value: message must be specified if rule contains line breaks"))
        expression = rule.get("messageExpression")
        if expression is not None and str(expression) and not str(expression).strip():
            shape_causes.append(("FieldValueRequired", f"{where}.messageExpression",
                                 "Required value: messageExpression must be non-empty if specified"))
        reason = rule.get("reason")
        if reason is not None and reason not in _REASONS:
            shape_causes.append(("FieldValueNotSupported", f"{where}.reason",
                                 f"Unsupported value: {_go(str(reason))}: supported values: "
                                 + ", ".join(_go(r) for r in sorted(_REASONS))))
        field_path = rule.get("fieldPath")
        if field_path is not None and str(field_path):
            fp = str(field_path)
            if not fp.strip():
                shape_causes.append(("FieldValueInvalid", f"{where}.fieldPath",
                                     f"Invalid value: {_go(fp)}: fieldPath must be non-empty if specified"))
            elif _NEWLINES.search(fp):
                shape_causes.append(("FieldValueInvalid", f"{where}.fieldPath",
                                     f"Invalid value: {_go(fp)}: fieldPath must not contain line breaks"))
            elif _field_path(fp, schema) is None:
                shape_causes.append(("FieldValueInvalid", f"{where}.fieldPath",
                                     f"Invalid value: {_go(fp)}: fieldPath must be a valid path"))
    walk.causes.extend(shape_causes)
    if shape_causes:
        return
    declared = _declared(schema, root)
    if declared is None:
        walk.causes.append(("InternalError", base, "Internal error: rule declared on schema that does not support "
                            f"validation rules type: '{schema.get('type', '')}' x-kubernetes-preserve-unknown-fields: "
                            f"'{str(bool(schema.get('x-kubernetes-preserve-unknown-fields'))).lower()}'"))
        return
    decls = {"self": declared, "oldSelf": declared}
    cardinality = card if card is not None else max_cardinality(schema)
    for i, rule in enumerate(rules):
        where = f"{base}[{i}]"
        text = str(rule.get("rule", ""))
        try:
            program = Program(text, decls)
        except CelSyntaxError as exc:
            walk.causes.append(("FieldValueInvalid", f"{where}.rule",
                                f"Invalid value: {_rule_repr(rule)}: compilation failed: {exc}"))
            continue
        if program.type.kind not in ("bool", "dyn"):
            walk.causes.append(("FieldValueInvalid", f"{where}.rule",
                                f"Invalid value: {_rule_repr(rule)}: cel expression must evaluate to a bool"))
            continue
        cost = program.cost * cardinality
        if cost > STATIC_COST_LIMIT:
            walk.causes.append(("FieldValueForbidden", f"{where}.rule",
                                "Forbidden: " + _cost_message("estimated rule cost", cost, STATIC_COST_LIMIT)))
        walk.observe(f"{where}.rule", cost)
        expression = str(rule.get("messageExpression") or "")
        if expression.strip():
            try:
                message_program = Program(expression, decls)
            except CelSyntaxError as exc:
                walk.causes.append(("FieldValueInvalid", f"{where}.messageExpression",
                                    f"Invalid value: {_rule_repr(rule)}: messageExpression compilation failed: "
                                    f"{exc}"))
            else:
                if message_program.type.kind not in ("string", "dyn"):
                    walk.causes.append(("FieldValueInvalid", f"{where}.messageExpression",
                                        f"Invalid value: {_rule_repr(rule)}: messageExpression must evaluate to "
                                        "a string"))
                else:
                    message_cost = message_program.cost * cardinality
                    if message_cost > STATIC_COST_LIMIT:
                        walk.causes.append(("FieldValueForbidden", f"{where}.messageExpression", "Forbidden: "
                                            + _cost_message("estimated messageExpression cost", message_cost,
                                                            STATIC_COST_LIMIT)))
                    walk.observe(f"{where}.messageExpression", message_cost)
        if "oldSelf" in program.uses:
            if forbid is not None:
                walk.causes.append(("FieldValueInvalid", f"{where}.rule",
                                    f"Invalid value: {_go(text)}: oldSelf cannot be used on the uncorrelatable "
                                    f"portion of the schema within {forbid}"))
        elif rule.get("optionalOldSelf") is not None:
            walk.causes.append(("FieldValueInvalid", f"{where}.optionalOldSelf",
                                f"Invalid value: {json.dumps(rule['optionalOldSelf'])}: may not be set if oldSelf "
                                "is not used in rule"))


def rule_causes(schema: Mapping[str, Any], path: str) -> list[_Cause]:
    """kube's checks of every ``x-kubernetes-validations`` rule of a CRD version's ``openAPIV3Schema`` (at
    ``path``) as ``(reason, field, message)``: the rule's fields, compilation, the result type, ``oldSelf``
    only where the old value can be correlated, and the estimated costs (per rule and for the whole schema)."""
    walk = _Walk()
    _check_rules(schema, path, True, 1, None, walk)
    if walk.total > STATIC_CRD_COST_LIMIT:
        for _cost, where in walk.expensive:
            walk.causes.append(("FieldValueForbidden", where, "Forbidden: contributed to estimated rule cost total "
                                "exceeding cost limit for entire OpenAPIv3 schema"))
        walk.causes.append(("FieldValueForbidden", path, "Forbidden: " + _cost_message(
            "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema", walk.total,
            STATIC_CRD_COST_LIMIT)))
    return walk.causes


# ---------------------------------------------------------------------------------------------- write time
@dataclass
class _Rule:
    spec: Mapping[str, Any]
    program: Program | None
    error: str
    message: Program | None
    field_path: str


class _Node:
    """The compiled rules of one schema node and its children's."""

    def __init__(self, schema: Mapping[str, Any], root: bool) -> None:
        self.schema = schema
        self.type = schema_type(schema, root)
        self.rules: list[_Rule] = []
        rules = schema.get("x-kubernetes-validations")
        if isinstance(rules, list) and self.type is not None:
            decls = {"self": self.type, "oldSelf": self.type}
            for spec in rules:
                if not isinstance(spec, Mapping) or not str(spec.get("rule", "")).strip():
                    continue
                program, error, message = None, "", None
                try:
                    program = Program(str(spec["rule"]), decls)
                except CelSyntaxError as exc:
                    error = f"rule compile error: compilation failed: {exc}"
                if str(spec.get("messageExpression") or "").strip():
                    try:
                        message = Program(str(spec["messageExpression"]), decls)
                    except CelSyntaxError:
                        message = None
                found = _field_path(str(spec.get("fieldPath") or ""), schema) if spec.get("fieldPath") else None
                self.rules.append(_Rule(spec, program, error, message, found[0] if found else ""))
        props = schema.get("properties")
        self.properties = {k: _Node(v, bool(v.get("x-kubernetes-embedded-resource")))
                           for k, v in (props.items() if isinstance(props, Mapping) else ())
                           if isinstance(v, Mapping) and _has_rules(v)}
        extra = schema.get("additionalProperties")
        self.extra = _Node(extra, bool(extra.get("x-kubernetes-embedded-resource"))) \
            if isinstance(extra, Mapping) and _has_rules(extra) else None
        items = schema.get("items")
        self.items = _Node(items, bool(items.get("x-kubernetes-embedded-resource"))) \
            if isinstance(items, Mapping) and _has_rules(items) else None
        self.map_keys: tuple[str, ...] = tuple(schema.get("x-kubernetes-list-map-keys") or ()) \
            if schema.get("x-kubernetes-list-type") == "map" else ()
        self.correlatable_map = schema.get("x-kubernetes-map-type") in (None, "granular", "atomic")


def _has_rules(schema: Mapping[str, Any]) -> bool:
    if schema.get("x-kubernetes-validations"):
        return True
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping) and _has_rules(schema[key]):
            return True
    props = schema.get("properties")
    return isinstance(props, Mapping) and any(isinstance(v, Mapping) and _has_rules(v) for v in props.values())


class _Run:
    def __init__(self) -> None:
        self.budget = RUNTIME_BUDGET
        self.causes: list[_Cause] = []
        self.stopped = False


def _child(path: str, name: str) -> str:
    return name if path == "<nil>" else f"{path}.{name}"


class SchemaRules:
    """The rules of one CRD version's schema, compiled on first use (thread-safe)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = schema
        self._root: _Node | None = None
        self._lock = threading.Lock()
        self.present = _has_rules(schema)

    def _tree(self) -> _Node:
        with self._lock:
            if self._root is None:
                self._root = _Node(self._schema, True)
            return self._root

    def causes(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None,
               schema_causes: list[_Cause]) -> list[_Cause]:
        """The rule failures of ``obj`` (``old``: the stored object on an update) as ``(reason, field,
        message)``; none but kube's one "not checked" cause if ``schema_causes`` has a blocking error."""
        if not self.present:
            return []
        if any(reason in _BLOCKING or "must be of type" in message for reason, _f, message in schema_causes):
            return [("FieldValueInvalid", "<nil>", 'Invalid value: "null": some validation rules were not checked '
                     "because the object was invalid; correct the existing errors to complete validation")]
        run = _Run()
        _validate(self._tree(), dict(obj), dict(old) if old is not None else None, "<nil>", run, True)
        return run.causes


def _validate(node: _Node, value: Any, old: Any, path: str, run: _Run, correlated: bool) -> None:
    if value is None or run.stopped:
        return
    if node.rules and node.type is not None:
        _evaluate(node, value, old if correlated else None, path, run)
    if run.stopped:
        return
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) and correlated else {}
        for key, sub in node.properties.items():
            if key in value:
                _validate(sub, value[key], old_map.get(key), _child(path, key), run,
                          correlated and node.correlatable_map)
                if run.stopped:
                    return
        if node.extra is not None:
            for key, item in value.items():
                _validate(node.extra, item, old_map.get(key), f"{'' if path == '<nil>' else path}[{key}]", run,
                          correlated and node.correlatable_map)
                if run.stopped:
                    return
    elif isinstance(value, list) and node.items is not None:
        olds: dict[tuple[Any, ...], Any] = {}
        if node.map_keys and isinstance(old, list) and correlated:
            for item in old:
                if isinstance(item, dict):
                    olds[tuple(json.dumps(item.get(k), sort_keys=True) for k in node.map_keys)] = item
        for i, item in enumerate(value):
            key = tuple(json.dumps(item.get(k), sort_keys=True) for k in node.map_keys) \
                if node.map_keys and isinstance(item, dict) else None
            _validate(node.items, item, olds.get(key) if key is not None else None,
                      f"{'' if path == '<nil>' else path}[{i}]", run, key is not None and key in olds)
            if run.stopped:
                return


def _type_name(node: _Node) -> str:
    kind = node.schema.get("type")
    return str(kind) if kind else ("object" if node.schema.get("properties") else "")


def _evaluate(node: _Node, value: Any, old: Any, path: str, run: _Run) -> None:
    assert node.type is not None
    shown = _go(_type_name(node))
    self_value = to_cel(value, node.type)
    old_value = to_cel(old, node.type) if old is not None else None
    for rule in node.rules:
        spec = rule.spec
        text = str(spec.get("rule", "")).strip()
        label = str(spec.get("message") or "").strip() or text
        if rule.program is None:
            run.causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {rule.error}"))
            continue
        uses_old = "oldSelf" in rule.program.uses
        optional_old = bool(spec.get("optionalOldSelf"))
        if uses_old and old is None and not optional_old:
            continue
        activation: dict[str, Any] = {"self": self_value}
        if optional_old:
            activation["oldSelf"] = Optional(old_value, True) if old is not None else Optional()
        elif old is not None:
            activation["oldSelf"] = old_value
        cost = rule.program.cost
        if cost > _TRIVIAL_COST:
            cost = rule.program.runtime_cost({"self": value, **({"oldSelf": old} if old is not None else {})})
        if cost > PER_CALL_LIMIT:
            run.causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: 'operation cancelled: actual "
                               "cost limit exceeded': no further validation rules will be run due to call cost "
                               f"exceeds limit for rule: {label}"))
            run.stopped = True
            return
        if cost > run.budget:
            run.causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: validation failed due to running "
                               "out of cost budget, no further validation rules will be run"))
            run.stopped = True
            return
        run.budget -= cost
        try:
            result = rule.program.evaluate(activation)
        except CelEvalError as exc:
            if str(exc).startswith("no such overload"):
                run.causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: '{exc}': call arguments did "
                                   "not match a supported operator, function or macro signature for rule: "
                                   f"{label}"))
            else:
                run.causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {exc} evaluating rule: "
                                   f"{label}"))
            continue
        if result is True or (type(result).__name__ == "BoolType" and bool(result)):
            continue
        if not uses_old and old is not None and old == value:
            continue  # ratcheting: an unchanged value keeps passing
        where = path
        if rule.field_path:
            where = rule.field_path.lstrip(".") if path == "<nil>" else path + rule.field_path
        detail = str(spec.get("message") or "").strip() or f"failed rule: {label}"
        if rule.message is not None:
            try:
                out = rule.message.evaluate(activation)
            except CelEvalError:
                out = None
            text_out = str(out).strip() if isinstance(out, str) else ""
            if text_out and not _NEWLINES.search(text_out) and len(text_out) <= _MAX_MESSAGE:
                detail = text_out
        reason = _REASONS.get(str(spec.get("reason") or "FieldValueInvalid"), "FieldValueInvalid")
        if reason == "FieldValueForbidden":
            run.causes.append((reason, where, f"Forbidden: {detail}"))
        elif reason == "FieldValueRequired":
            run.causes.append((reason, where, f"Required value: {detail}"))
        elif reason == "FieldValueDuplicate":
            run.causes.append((reason, where, f"Duplicate value: {shown}"))
        else:
            run.causes.append((reason, where, f"Invalid value: {shown}: {detail}"))
