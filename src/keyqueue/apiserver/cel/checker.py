"""The static half of compiling a CEL expression: declared names, field access on schema objects, the result
type, and the worst-case cost.

The cost model follows cel-go's estimator (``checker/cost.go``) and kube's library costs: an identifier or a field
selection costs 1, a call 1 plus its arguments, string functions 1 + a tenth of the strings' bounds (``matches`` the
string's tenth times a quarter of the pattern's length, ``contains`` the product of the two), equality of
strings, lists or objects a tenth of what it compares, and a comprehension (``all``, ``exists``, ``exists_one``,
``map``, ``filter``) its range's bound times the cost of one step.  Bounds come from the types (:mod:`.types`).
It is an estimate of an estimate: close to kube's for the shapes real CRDs use, never exactly kube's number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from .syntax import OPT_FIELD, OPT_INDEX, CelSyntaxError, Node
from .types import DYN, CelType, simple

__all__ = ["FUNCTIONS", "Checked", "check"]

_STEP: Final = 3  # the per-iteration bookkeeping of a comprehension (loop condition and accumulator step)

#: Every function an expression may call: CEL's standard ones, the operators, and the Kubernetes libraries.
FUNCTIONS: Final = frozenset({
    "_?_:_", "_&&_", "_||_", "!_", "-_", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in", "_+_", "_-_",
    "_*_", "_/_", "_%_", "_[_]",
    "size", "int", "uint", "double", "string", "bytes", "bool", "type", "dyn", "duration", "timestamp",
    "contains", "startsWith", "endsWith", "matches", "has",
    "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours", "getMilliseconds",
    "getMinutes", "getMonth", "getSeconds",
    # kube lists
    "isSorted", "sum", "min", "max", "indexOf", "lastIndexOf",
    # kube strings (cel-go's strings extension)
    "charAt", "lowerAscii", "upperAscii", "replace", "split", "substring", "trim", "join", "format", "reverse",
    # kube regex
    "find", "findAll",
    # kube URLs
    "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery",
    # kube quantities
    "quantity", "isQuantity", "compareTo", "isLessThan", "isGreaterThan", "add", "sub", "asInteger",
    "asApproximateFloat", "sign", "isInteger",
    # kube IPs and CIDRs (the checks only)
    "isIP", "isCIDR",
    # optionals
    "_kqOptOf", "_kqOptNone", "_kqOptOfNonZero", OPT_FIELD, OPT_INDEX, "value", "hasValue", "orValue", "or",
})

_RESULTS: Final = {
    "size": "int", "int": "int", "uint": "uint", "double": "double", "string": "string", "bytes": "bytes",
    "bool": "bool", "contains": "bool", "startsWith": "bool", "endsWith": "bool", "matches": "bool",
    "isSorted": "bool", "indexOf": "int", "lastIndexOf": "int", "charAt": "string", "lowerAscii": "string",
    "upperAscii": "string", "replace": "string", "substring": "string", "trim": "string", "join": "string",
    "format": "string", "reverse": "string", "find": "string", "isURL": "bool", "getScheme": "string",
    "getHost": "string", "getHostname": "string", "getPort": "string", "getEscapedPath": "string", "url": "url",
    "quantity": "quantity", "isQuantity": "bool", "compareTo": "int", "isLessThan": "bool",
    "isGreaterThan": "bool", "asInteger": "int", "asApproximateFloat": "double", "sign": "int",
    "isInteger": "bool", "isIP": "bool", "isCIDR": "bool", "hasValue": "bool",
    "_<_": "bool", "_<=_": "bool", "_>_": "bool", "_>=_": "bool", "_==_": "bool", "_!=_": "bool", "@in": "bool",
    "!_": "bool", "_&&_": "bool", "_||_": "bool", "timestamp": "timestamp", "duration": "duration",
    "type": "type",
}
_STRING_TRAVERSAL: Final = ("indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "trim", "replace", "split",
                            "substring", "url", "isURL", "quantity", "isQuantity", "isIP", "isCIDR",
                            "reverse", "string", "bytes")


class Checked:
    """The result of :func:`check`: ``type`` of the expression, ``cost`` its worst case, ``uses`` the
    declared variables it refers to."""

    def __init__(self, type_: CelType, cost: int, uses: frozenset[str]) -> None:
        self.type = type_
        self.cost = cost
        self.uses = uses


def _traversal(size: int, factor: float = 0.1) -> int:
    return math.ceil(size * factor)


def _size(t: CelType) -> int:
    """cel-go's size estimate: a string's or list's bound, an object's number of fields."""
    return len(t.fields) if t.kind == "object" else t.size


def _flat_size(t: CelType, depth: int = 0) -> int:
    """How many scalar bytes/elements comparing two values of ``t`` may visit."""
    if depth > 8:
        return 1
    if t.kind in ("string", "bytes"):
        return t.size
    if t.kind in ("list", "map") and t.elem is not None:
        return min(t.size * max(_flat_size(t.elem, depth + 1), 1), 2**62)
    if t.kind == "object":
        return min(sum(max(_flat_size(f, depth + 1), 1) for f in t.fields.values()), 2**62)
    return 1


class _Checker:
    def __init__(self, decls: Mapping[str, CelType]) -> None:
        self.decls = decls
        self.uses: set[str] = set()

    def fail(self, node: Node, message: str) -> CelSyntaxError:
        return CelSyntaxError(f"ERROR: <input>:{node.line}:{node.column}: {message}")

    def visit(self, node: Node, scope: Mapping[str, CelType]) -> tuple[CelType, int]:
        op = node.op
        if op == "lit":
            if node.kind == "string":
                return simple("string", len(node.value)), 0
            return simple(node.kind), 0
        if op == "ident":
            if node.name in scope:
                return scope[node.name], 1
            if node.name in self.decls:
                self.uses.add(node.name)
                return self.decls[node.name], 1
            if node.name in ("int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type",
                             "type", "dyn"):
                return simple("type"), 1
            raise self.fail(node, f"undeclared reference to '{node.name}' (in container '')")
        if op == "select":
            operand, cost = self.visit(node.args[0], scope)
            selected = self.select(node, operand)
            return (simple("bool") if node.test else selected), cost + 1
        if op == "list":
            items = [self.visit(a, scope) for a in node.args]
            elem = items[0][0] if items else DYN
            return CelType("list", elem, size=len(items)), sum(c for _, c in items) + 1
        if op == "map":
            parts = [self.visit(a, scope) for a in node.args]
            values = parts[1::2]
            return CelType("map", values[0][0] if values else DYN, size=len(values)), sum(c for _, c in parts) + 1
        if op == "object":
            raise self.fail(node, "message construction is not supported")
        if op == "comp":
            return self.comprehension(node, scope)
        return self.call(node, scope)

    def select(self, node: Node, operand: CelType) -> CelType:
        if operand.kind == "object":
            if node.name in operand.fields:
                return operand.fields[node.name]
            raise self.fail(node, f"undefined field '{node.name}'")
        if operand.kind in ("map", "optional") and operand.elem is not None:
            return operand.elem
        if operand.kind in ("int", "uint", "double", "string", "bool", "bytes", "list", "null"):
            raise self.fail(node, f"type '{operand}' does not support field selection")
        return DYN

    def comprehension(self, node: Node, scope: Mapping[str, CelType]) -> tuple[CelType, int]:
        assert node.target is not None
        range_type, range_cost = self.visit(node.target, scope)
        if range_type.kind == "list":
            var_type = range_type.elem or DYN
        elif range_type.kind in ("map", "object"):
            var_type = simple("string", 253 * 4)
        elif range_type.kind == "dyn":
            var_type = DYN
        else:
            raise self.fail(node, f"expression of type '{range_type}' cannot be range of a comprehension "
                                  "(must be list, map, or dynamic)")
        inner = {**scope, node.var: var_type}
        bodies = [self.visit(a, inner) for a in node.args]
        step = sum(c for _, c in bodies) + _STEP
        n = range_type.size
        cost = range_cost + n * step + 1
        if node.name in ("all", "exists", "exists_one"):
            return simple("bool"), cost
        if node.name == "filter":
            return CelType("list", var_type, size=n), cost
        return CelType("list", bodies[-1][0], size=n), cost

    def call(self, node: Node, scope: Mapping[str, CelType]) -> tuple[CelType, int]:
        name = node.name
        if name not in FUNCTIONS:
            raise self.fail(node, f"undeclared reference to '{name}' (in container '')")
        target: tuple[CelType, int] | None = self.visit(node.target, scope) if node.target is not None else None
        args = [self.visit(a, scope) for a in node.args]
        cost = sum(c for _, c in args) + (target[1] if target else 0)
        types = ([target[0]] if target else []) + [t for t, _ in args]
        sizes = [t.size for t in types]
        if name == "_?_:_":
            return (args[1][0] if args[1][0].kind != "dyn" else args[2][0]), args[0][1] + max(args[1][1], args[2][1])
        if name in ("_&&_", "_||_"):
            for t in types:
                if t.kind not in ("bool", "dyn"):
                    raise self.fail(node, f"found no matching overload for '{name}' applied to "
                                          f"'({', '.join(str(x) for x in types)})'")
            return simple("bool"), cost
        if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            smallest = min(_size(types[0]), _size(types[1]))
            return simple("bool"), cost + 1 + (_traversal(smallest) if smallest > 1 else 0)
        if name == "@in":
            container = types[1]
            return simple("bool"), cost + 1 + (container.size if container.kind == "list" else 0)
        if name in ("_+_",) and types[0].kind in ("string", "bytes", "list"):
            total = sizes[0] + sizes[1]
            return CelType(types[0].kind, types[0].elem, size=total), cost + 1 + _traversal(total)
        if name in ("_+_", "_-_", "_*_", "_/_", "_%_", "-_"):
            known = [t for t in types if t.kind != "dyn"]
            if len(known) == 2 and known[0].kind != known[1].kind and "quantity" not in (known[0].kind,):
                raise self.fail(node, f"found no matching overload for '{name}' applied to "
                                      f"'({', '.join(str(x) for x in types)})'")
            return (known[0] if known else DYN), cost + 1
        if name == "_[_]":
            base = types[0]
            if base.kind in ("list", "map") and base.elem is not None:
                return base.elem, cost + 1
            return DYN, cost + 1
        if name == "has":
            return simple("bool"), cost + 1
        if name == "size":
            return simple("int"), cost + 1
        if name in ("matches", "find", "findAll"):
            string = sizes[0]
            pattern = sizes[1] if len(sizes) > 1 else 0
            extra = max(_traversal(string), 1) * max(_traversal(pattern, 0.25), 1)
            result = CelType("list", simple("string", string), size=string) if name == "findAll" else \
                simple(_RESULTS[name], string if name == "find" else 0)
            return result, cost + 1 + extra
        if name == "contains":
            if types and types[0].kind in ("string", "bytes"):
                return simple("bool"), cost + 1 + _traversal(sizes[0] * (sizes[1] if len(sizes) > 1 else 1))
            return simple("bool"), cost + 1
        if name in ("startsWith", "endsWith"):
            return simple("bool"), cost + 1 + _traversal(sizes[1] if len(sizes) > 1 else 0)
        if name in ("isSorted", "sum", "min", "max") or (name in ("indexOf", "lastIndexOf") and types
                                                          and types[0].kind == "list"):
            elem = types[0].elem if types and types[0].kind == "list" and types[0].elem else DYN
            per = max(_traversal(_flat_size(elem)), 1)
            result = simple(_RESULTS.get(name, "")) if name in _RESULTS else elem
            return result, cost + 1 + sizes[0] * per
        if name == "join":
            elem = types[0].elem if types and types[0].elem else simple("string")
            total = sizes[0] * max(elem.size, 1)
            return simple("string", total), cost + 1 + _traversal(total)
        if name == "split":
            return CelType("list", simple("string", sizes[0]), size=sizes[0]), cost + 1 + _traversal(sizes[0])
        if name == "format":
            arg = types[1] if len(types) > 1 else DYN
            total = sizes[0] + arg.size * max(_flat_size(arg.elem or DYN), 1)
            return simple("string", total), cost + 1 + _traversal(total)
        if name in _STRING_TRAVERSAL:
            size = sizes[0] if sizes else 0
            kind = _RESULTS.get(name, "dyn")
            return simple(kind, size if kind in ("string", "bytes") else 0), cost + 1 + _traversal(size)
        if name in ("_kqOptOf", "_kqOptOfNonZero"):
            return CelType("optional", types[0] if types else DYN), cost + 1
        if name == OPT_FIELD:
            base = types[0]
            if base.kind == "optional":
                base = base.elem or DYN
            field_name = node.args[0].value.strip("\"'") if node.args and node.args[0].op == "lit" else ""
            inner = base.fields.get(field_name, DYN) if base.kind == "object" else (base.elem or DYN)
            if base.kind == "object" and field_name not in base.fields:
                raise self.fail(node, f"undefined field '{field_name}'")
            return CelType("optional", inner), cost + 1
        if name == OPT_INDEX:
            base = types[0]
            if base.kind == "optional":
                base = base.elem or DYN
            return CelType("optional", base.elem or DYN), cost + 1
        if name == "value":
            return (types[0].elem or DYN) if types and types[0].kind == "optional" else DYN, cost + 1
        if name == "orValue":
            return (types[0].elem or DYN) if types and types[0].kind == "optional" else DYN, cost + 1
        if name == "or":
            return types[0] if types else DYN, cost + 1
        return simple(_RESULTS.get(name, "dyn")), cost + 1


def check(node: Node, decls: Mapping[str, CelType]) -> Checked:
    """Check ``node`` against the declared variables ``decls``; raises :class:`CelSyntaxError` with cel-go's
    message for an undeclared name, an unknown field of a schema object, or a clear type mismatch."""
    checker = _Checker(decls)
    type_, cost = checker.visit(node, {})
    return Checked(type_, cost, frozenset(checker.uses))
