"""A compiled CEL expression (:class:`Program`): parsed and checked once, evaluated by celpy with the Kubernetes
libraries, its runtime cost bounded as kube bounds it."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final

from celpy import celtypes as _celtypes
from celpy.evaluation import CELEvalError

from .checker import check
from .library import FUNCTIONS, Optional
from .syntax import TOO_DEEP, CelSyntaxError, environment, lock, parse
from .types import CelType, escape, value_type

#: celpy's value classes, used dynamically: CEL values reach these functions untyped, and the union celpy
#: declares cannot be narrowed usefully by isinstance.
celtypes: Any = _celtypes

__all__ = ["PER_CALL_LIMIT", "CelEvalError", "Program", "to_cel", "to_json"]

#: kube's runtime cost limit of one expression (``PerCallLimit``).
PER_CALL_LIMIT: Final = 1_000_000



class CelEvalError(Exception):
    """An expression that failed at runtime; the message is cel-go's (``no such key: x``, ``no such overload``,
    ``operation cancelled: actual cost limit exceeded``)."""


_MESSAGES: Final = (
    (re.compile(r"no such member in mapping: '(.*)'"), r"no such key: \1"),
    (re.compile(r".*divide by zero.*"), "division by zero"),
    (re.compile(r".*does not support field selection.*"), "no such overload"),
    (re.compile(r"no such overload.*"), "no such overload"),
    (re.compile(r"found no matching overload.*", re.S), "no such overload"),
    (re.compile(r"return error for overflow.*"), "return error for overflow"),
    (re.compile(r"undeclared reference.*"), "no such overload"),
)


def _message(exc: CELEvalError) -> str:
    raw = str(exc.args[0]) if exc.args else "evaluation error"
    for pattern, replacement in _MESSAGES:
        if pattern.fullmatch(raw):
            return pattern.sub(replacement, raw)
    return raw


class Program:
    """``text`` compiled against the variables ``decls`` (name -> :class:`~.types.CelType`).

    Raises :class:`CelSyntaxError` (cel-go's ``ERROR: <input>:L:C: ...`` form) if it does not parse or check.
    Thread-safe: :meth:`evaluate` shares nothing between calls."""

    def __init__(self, text: str, decls: Mapping[str, CelType]) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.text = text
        _source, tree, node = parse(text)
        try:
            checked = check(node, decls)
        except RecursionError:
            raise CelSyntaxError(TOO_DEEP) from None
        self.node = node
        self.type = checked.type
        #: the worst-case cost for values within the declared types' bounds
        self.cost = checked.cost
        #: the declared variables the expression refers to
        self.uses = checked.uses
        with lock:
            self._runner = environment().program(tree, functions=FUNCTIONS)

    def runtime_cost(self, values: Mapping[str, Any]) -> int:
        """The cost of this expression for these JSON ``values`` of its variables: the worst case for their
        actual sizes (kube counts the cost of the evaluation itself; see the docs)."""
        try:
            decls = {name: value_type(v) for name, v in values.items()}
            return check(self.node, decls).cost
        except (CelSyntaxError, RecursionError):
            return self.cost

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The value for ``activation`` (variable name -> CEL value, see :func:`to_cel`).  Raises
        :class:`CelEvalError`."""
        try:
            result = self._runner.evaluate(dict(activation))
        except CELEvalError as exc:
            raise CelEvalError(_message(exc)) from None
        except RecursionError:
            raise CelEvalError("expression too deeply nested") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise CelEvalError(f"no such overload: {exc}") from None
        if isinstance(result, CELEvalError):
            raise CelEvalError(_message(result))
        return result


def to_cel(value: Any, type_: CelType | None) -> Any:
    """The CEL value of the JSON ``value`` typed by ``type_`` (``number`` fields are doubles even when whole,
    ``format: byte`` strings bytes); untyped parts (``None``/``dyn``) as JSON types map."""
    if value is None:
        return None
    kind = type_.kind if type_ is not None else "dyn"
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if kind == "double" and isinstance(value, int | float):
        return celtypes.DoubleType(float(value))
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        if kind == "bytes":
            try:
                return celtypes.BytesType(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                return celtypes.StringType(value)
        return celtypes.StringType(value)
    if isinstance(value, list):
        elem = type_.elem if type_ is not None and type_.kind == "list" else None
        return celtypes.ListType([to_cel(v, elem) for v in value])
    if isinstance(value, dict):
        if type_ is not None and type_.kind == "object":  # a schema object: its properties by their CEL names
            fields = type_.fields
            out = {}
            for k, v in value.items():
                name = escape(k)
                if name is not None:
                    out[celtypes.StringType(name)] = to_cel(v, fields.get(name))
            return celtypes.MapType(out)
        elem = type_.elem if type_ is not None and type_.kind == "map" else None
        return celtypes.MapType({celtypes.StringType(k): to_cel(v, elem) for k, v in value.items()})
    return value


def to_json(value: Any) -> Any:
    """A CEL result as JSON-like Python (for messages and tests)."""
    if isinstance(value, Optional):
        return to_json(value.value) if value.present else None
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.MapType):
        return {to_json(k): to_json(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [to_json(v) for v in value]
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value
