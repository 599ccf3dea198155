"""kubectl's JSONPath (``k8s.io/client-go/util/jsonpath``): templates such as ``{.status.conditions[?(@.type=="Ready")]
.status}``, parsed and evaluated on decoded JSON with the same rules, as kube-apiserver does for a CRD's
``additionalPrinterColumns``.

* :func:`parse` reads a template (text with ``{...}`` actions) and raises :class:`JSONPathError` with client-go's
  message for one it cannot parse;
* :meth:`JSONPath.find_results` evaluates it: one list of values per top-level node (text or action), as client-go's
  ``FindResults``; with ``allow_missing_keys`` (as printer columns use it) a missing field gives no value rather
  than an error;
* :func:`print_value` formats one value as client-go's ``PrintResults`` does (objects and arrays as Go's compact
  JSON, ``null`` as ``<no value>``, floats as Go's ``%v``).

What client-go supports is supported: fields (``.a``, escaped dots ``.a\\.b``, ``['key']``), ``*``, ``..``, indexes
and slices (``[0]``, ``[-1:]``, ``[1:5:2]``, ``[*]``), unions (``[0,2]``, ``['a','b']``), filters
(``[?(@.x=="y")]``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, and existence ``[?(@.x)]``), literals, and
``{range ...}{end}``.  Also what it does oddly: ``['a.b']`` is two fields, ``a`` and ``b``, as there.  Nothing
blocks; a parsed template is immutable and may be evaluated from many threads at once.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

__all__ = ["JSONPath", "JSONPathError", "parse", "print_value"]


class JSONPathError(ValueError):
    """A template that does not parse, or (without ``allow_missing_keys``, or on a type mismatch) one that cannot be
    evaluated on the given data; the message is client-go's."""


# ---------------------------------------------------------------------------------------------------- the nodes
@dataclass(frozen=True, slots=True)
class _List:
    nodes: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Field:
    name: str


@dataclass(frozen=True, slots=True)
class _Param:
    value: int = 0
    known: bool = False
    derived: bool = False


@dataclass(frozen=True, slots=True)
class _Array:
    params: tuple[_Param, _Param, _Param]


@dataclass(frozen=True, slots=True)
class _Filter:
    left: _List
    right: _List
    operator: str


@dataclass(frozen=True, slots=True)
class _Literal:
    value: int | float | bool


@dataclass(frozen=True, slots=True)
class _Wildcard:
    pass


@dataclass(frozen=True, slots=True)
class _Recursive:
    pass


@dataclass(frozen=True, slots=True)
class _Union:
    lists: tuple[_List, ...]


@dataclass(frozen=True, slots=True)
class _Identifier:
    name: str


# ---------------------------------------------------------------------------------------------------- the parser
_EOF: Final = ""
_DICT_KEY: Final = re.compile(r"'([^']*)'")
_SLICE: Final = re.compile(r"(-?[0-9]*)(:-?[0-9]*)?(:-?[0-9]*)?")
_FILTER: Final = re.compile(r"([^!<>=]+)([!<>=~]+)(.+?)", re.DOTALL)
_INT: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)")


def _is_digit(r: str) -> bool:
    return r != _EOF and unicodedata.category(r) == "Nd"


def _is_alnum(r: str) -> bool:
    return r == "_" or (r != _EOF and (r.isalpha() or _is_digit(r)))


def _is_terminator(r: str) -> bool:
    return r == _EOF or r in " \t\r\n.,[]$@{}"


def _rune(r: str) -> str:
    """Go's ``%#U``."""
    return f"U+{ord(r):04X} '{r}'" if r.isprintable() else f"U+{ord(r):04X}"


class _Parser:
    """client-go's parser, as a loop (its recursion per token would reach Python's recursion limit on long
    templates)."""

    def __init__(self, text: str) -> None:
        self.input = text
        self.pos = 0
        self.start = 0
        self.width = 0
        self.root: list[Any] = []

    def consume(self) -> str:
        value = self.input[self.start:self.pos]
        self.start = self.pos
        return value

    def next(self) -> str:
        if self.pos >= len(self.input):
            self.width = 0
            return _EOF
        self.width = 1
        self.pos += 1
        return self.input[self.pos - 1]

    def peek(self) -> str:
        r = self.next()
        self.backup()
        return r

    def backup(self) -> None:
        self.pos -= self.width

    def parse(self) -> _List:
        """The template's top-level nodes: texts and actions (one :class:`_List` each)."""
        while True:
            # text, up to the next action
            while not self.input.startswith("{", self.pos):
                if self.next() == _EOF:
                    if self.pos > self.start:
                        self.root.append(_Text(self.consume()))
                    return _List(tuple(self._freeze(n) for n in self.root))
            if self.pos > self.start:
                self.root.append(_Text(self.consume()))
            self.pos += 1
            self.consume()
            action: list[Any] = []
            self.root.append(action)
            self._action(action)

    def _freeze(self, node: Any) -> Any:
        return _List(tuple(node)) if isinstance(node, list) else node

    def _action(self, cur: list[Any]) -> None:
        """The nodes of one action, up to its closing brace."""
        while True:
            rest = self.input[self.pos:]
            if rest.startswith("}"):
                self.pos += 1
                self.consume()
                return
            if rest.startswith("[?("):
                self._filter(cur)
                continue
            if rest.startswith(".."):
                if cur and isinstance(cur[-1], _Recursive):
                    raise JSONPathError("invalid multiple recursive descent")
                self.pos += 2
                self.consume()
                cur.append(_Recursive())
                if _is_alnum(self.peek()):
                    self._field(cur)
                continue
            r = self.next()
            if r == _EOF or r in "\r\n":
                raise JSONPathError("unclosed action")
            if r in " @$":
                self.consume()
            elif r == "[":
                self._array(cur)
            elif r in "\"'":
                self._quote(cur, r)
            elif r == ".":
                self._field(cur)
            elif r in "+-" or _is_digit(r):
                self.backup()
                self._number(cur)
            elif _is_alnum(r):
                self.backup()
                self._identifier(cur)
            else:
                raise JSONPathError(f"unrecognized character in action: {_rune(r)}")

    def _identifier(self, cur: list[Any]) -> None:
        while not _is_terminator(self.next()):
            pass
        self.backup()
        value = self.consume()
        cur.append(_Literal(value == "true") if value in ("true", "false") else _Identifier(value))

    def _number(self, cur: list[Any]) -> None:
        if self.peek() in ("+", "-"):
            self.next()
        while True:
            r = self.next()
            if r != "." and not _is_digit(r):
                self.backup()
                break
        value = self.consume()
        if _INT.fullmatch(value) and -(2**63) <= int(value) < 2**63:
            cur.append(_Literal(int(value)))
        elif _FLOAT.fullmatch(value):
            cur.append(_Literal(float(value)))
        else:
            raise JSONPathError(f"cannot parse number {value}")

    def _array(self, cur: list[Any]) -> None:
        while True:
            r = self.next()
            if r in (_EOF, "\n"):
                raise JSONPathError("unterminated array")
            if r == "]":
                break
        text = self.consume()[1:-1]
        if text == "*":
            text = ":"
        parts = text.split(",")
        if len(parts) > 1:
            cur.append(_Union(tuple(_action_of(f"[{part.strip(' ')}]") for part in parts)))
            return
        key = _DICT_KEY.fullmatch(text)
        if key is not None:
            cur.extend(_action_of(f".{key.group(1)}").nodes)
            return
        match = _SLICE.fullmatch(text)
        if match is None:
            raise JSONPathError(f"invalid array index {text}")
        params: list[_Param] = []
        for i, raw in enumerate(match.groups(default="")):
            if raw:
                digits = raw[1:] if i > 0 else raw
                if i > 0 and digits == "":
                    params.append(_Param())
                elif not _INT.fullmatch(digits):
                    raise JSONPathError(f"array index {digits} is not a number")
                else:
                    params.append(_Param(int(digits), True))
            elif i == 1:
                params.append(_Param(params[0].value + 1, True, True))
            else:
                params.append(_Param())
        cur.append(_Array((params[0], params[1], params[2])))

    def _filter(self, cur: list[Any]) -> None:
        self.pos += 3
        self.consume()
        begin = end = False
        pair = ""
        while True:
            r = self.next()
            if r in (_EOF, "\n"):
                raise JSONPathError("unterminated filter")
            if r in "\"'":
                if not begin:
                    begin, pair = True, r
                    continue
                if self.input[self.pos - 2] != "\\" and r == pair:
                    end = True
            elif r == ")" and begin == end:
                break
        if self.next() != "]":
            raise JSONPathError("unclosed array expect ]")
        text = self.consume()[:-2]
        match = _FILTER.fullmatch(text)
        if match is None:
            cur.append(_Filter(_action_of(text), _List(), "exists"))
        else:
            cur.append(_Filter(_action_of(match.group(1)), _action_of(match.group(3)), match.group(2)))

    def _quote(self, cur: list[Any], end: str) -> None:
        while True:
            r = self.next()
            if r in (_EOF, "\n"):
                raise JSONPathError("unterminated quoted string")
            if r == end and self.input[self.pos - 2] != "\\":
                break
        value = self.consume()
        try:
            cur.append(_Text(_unquote(value)))
        except ValueError:
            raise JSONPathError(f"unquote string {value} error invalid syntax") from None

    def _field(self, cur: list[Any]) -> None:
        self.consume()
        while True:
            r = self.next()
            if r == "\\":
                self.next()
            elif _is_terminator(r):
                self.backup()
                break
        value = self.consume()
        cur.append(_Wildcard() if value == "*" else _Field(value.replace("\\", "")))


def _action_of(text: str) -> _List:
    """client-go's ``parseAction``: ``text`` parsed as the inside of one action."""
    parsed = _Parser("{" + text + "}").parse()
    first = parsed.nodes[0]
    assert isinstance(first, _List)
    return first


_SIMPLE_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _unquote(quoted: str) -> str:
    """Go's ``strconv.Unquote`` extended to single quotes (client-go's ``UnquoteExtend``); ValueError if invalid."""
    if len(quoted) < 2 or quoted[0] != quoted[-1] or quoted[0] not in "\"'":
        raise ValueError(quoted)
    quote, body = quoted[0], quoted[1:-1]
    if "\\" not in body and quote not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == quote:
            raise ValueError(quoted)
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError(quoted)
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e == quote:
            out.append(e)
        elif e in "xuU":
            size = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i:i + size]
            if len(digits) != size or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(quoted)
            code = int(digits, 16)
            if e != "x" and (code > 0x10FFFF or 0xD800 <= code <= 0xDFFF):
                raise ValueError(quoted)
            out.append(chr(code))
            i += size
        elif e in "01234567":
            digits = body[i - 1:i + 2]
            if len(digits) != 3 or not all(d in "01234567" for d in digits) or int(digits, 8) > 255:
                raise ValueError(quoted)
            out.append(chr(int(digits, 8)))
            i += 2
        else:
            raise ValueError(quoted)
    return "".join(out)


def parse(template: str) -> JSONPath:
    """Parse a template (``"{.metadata.name}"``, ``"name: {.metadata.name}"``); raises :class:`JSONPathError`."""
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    return JSONPath(template, _Parser(template).parse())


# ---------------------------------------------------------------------------------------------------- evaluation
@dataclass
class _Range:
    """The ``range``/``end`` markers one top-level node set while it was walked."""

    depth: int
    begin: int = 0
    end: bool = False


def _kind(value: Any) -> str:
    """Go's basic kind of a decoded JSON value (``text/template``'s comparison rules)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    raise JSONPathError("invalid type for comparison")


def _equal(a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        raise JSONPathError("incompatible types for comparison")
    return bool(a == b)


def _less(a: Any, b: Any) -> bool:
    kind = _kind(a)
    if kind == "bool" or _kind(b) == "bool":
        raise JSONPathError("invalid type for comparison")
    if kind != _kind(b):
        raise JSONPathError("incompatible types for comparison")
    return bool(a < b)


_COMPARE: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    "<": _less,
    "<=": lambda a, b: _less(a, b) or _equal(a, b),
    ">": lambda a, b: not (_less(a, b) or _equal(a, b)),
    ">=": lambda a, b: not _less(a, b),
}


def _children(value: Any) -> list[Any] | None:
    """The values inside ``value`` for ``*`` and ``..`` (a string's bytes, as Go indexes a string); None for a
    scalar."""
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    if isinstance(value, str):
        return list(value.encode())
    return None


def _go_type(value: Any) -> str:
    if isinstance(value, Mapping):
        return "map[string]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string" if isinstance(value, str) else "interface {}"


@dataclass(frozen=True)
class JSONPath:
    """A parsed template (from :func:`parse`)."""

    template: str
    root: _List = field(repr=False)

    def find_results(self, data: Any, allow_missing_keys: bool = True) -> list[list[Any]]:
        """The values each top-level node of the template selects in ``data`` (decoded JSON), in order (client-go's
        ``FindResults``).  Raises :class:`JSONPathError` where client-go returns an error (an index out of range, a
        comparison of different types, a missing field without ``allow_missing_keys``)."""
        return _Walker(allow_missing_keys).find(self.root.nodes, data, 0)[0]

    def first(self, data: Any) -> tuple[bool, Any]:
        """``(True, value)``: the first value the template's first node selects in ``data``, as kube-apiserver takes
        a printer column's value; ``(False, None)`` if it selects nothing or cannot be evaluated."""
        try:
            results = self.find_results(data)
        except (JSONPathError, RecursionError):
            return False, None
        if not results or not results[0]:
            return False, None
        return True, results[0][0]


class _Walker:
    def __init__(self, allow_missing_keys: bool) -> None:
        self.allow_missing_keys = allow_missing_keys

    def find(self, nodes: Sequence[Any], data: Any, depth: int) -> tuple[list[list[Any]], int | None]:
        """client-go's ``FindResults`` on ``nodes``: the results, and the index of the ``{end}`` that closed the
        range this call evaluates the body of (``None`` if none did)."""
        full: list[list[Any]] = []
        i = 0
        while i < len(nodes):
            marks = _Range(depth)
            results = self.walk([data], nodes[i], marks)
            if marks.end:
                return full, i
            if marks.begin:
                body = nodes[i + 1:]
                end_at: int | None = None
                for value in results or [None]:
                    inner, end_at = self.find(body, value, depth + 1)
                    if results:
                        full.extend(inner)
                i = i + 1 + end_at + 1 if end_at is not None else i + 1
                continue
            full.append(results)
            i += 1
        return full, None

    def walk(self, values: list[Any], node: Any, marks: _Range) -> list[Any]:
        if isinstance(node, _List):
            for sub in node.nodes:
                values = self.walk(values, sub, marks)
            return values
        if isinstance(node, _Text):
            return [node.text]
        if isinstance(node, _Field):
            return self._field(values, node.name)
        if isinstance(node, _Array):
            return self._array(values, node.params)
        if isinstance(node, _Filter):
            return self._filter(values, node, marks)
        if isinstance(node, _Literal):
            return [node.value for _ in values]
        if isinstance(node, _Wildcard):
            return [child for v in values if v is not None for child in (_children(v) or ())]
        if isinstance(node, _Recursive):
            return self._recursive(values)
        if isinstance(node, _Union):
            return [r for sub in node.lists for r in self.walk(values, sub, marks)]
        if isinstance(node, _Identifier):
            if node.name == "range":
                marks.begin += 1
                return values
            if node.name == "end":
                if marks.depth > 0:
                    marks.end = True
                    return []
                raise JSONPathError("not in range, nothing to end")
            raise JSONPathError(f"unrecognized identifier {node.name}")
        raise JSONPathError(f"unexpected Node {node!r}")  # pragma: no cover - the parser makes no other nodes

    def _field(self, values: list[Any], name: str) -> list[Any]:
        results = [v[name] for v in values if isinstance(v, Mapping) and name in v]
        if not results and values and not self.allow_missing_keys:
            raise JSONPathError(f"{name} is not found")
        return results

    @staticmethod
    def _array(values: list[Any], params: tuple[_Param, _Param, _Param]) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if value is None:
                continue
            if not isinstance(value, list):
                raise JSONPathError(f"{_go_type(value)} is not array or slice")
            length = len(value)
            start = params[0].value if params[0].known else 0
            if start < 0:
                start += length
            stop = params[1].value if params[1].known else length
            if stop < 0 or (stop == 0 and params[1].derived):
                stop += length
            if stop == start:
                return out
            if start >= length or start < 0:
                raise JSONPathError(f"array index out of bounds: index {start}, length {length}")
            if stop > length or stop < 0:
                raise JSONPathError(f"array index out of bounds: index {stop - 1}, length {length}")
            if start > stop:
                raise JSONPathError(f"starting index {start} is greater than ending index {stop}")
            step = 1
            if params[2].known:
                if params[2].value <= 0:
                    raise JSONPathError("step must be > 0")
                step = params[2].value
            out.extend(value[start:stop:step])
        return out

    def _filter(self, values: list[Any], node: _Filter, marks: _Range) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if not isinstance(value, list):
                raise JSONPathError(f"{json.dumps(value)[:100]} is not array or slice and cannot be filtered")
            for item in value:
                if node.operator == "exists":
                    try:
                        if self.walk([item], node.left, marks):
                            out.append(item)
                    except JSONPathError:
                        pass
                    continue
                lefts = self.walk([item], node.left, marks)
                if not lefts:
                    continue
                if len(lefts) > 1:
                    raise JSONPathError("can only compare one element at a time")
                rights = self.walk([item], node.right, marks)
                if not rights:
                    continue
                if len(rights) > 1:
                    raise JSONPathError("can only compare one element at a time")
                compare = _COMPARE.get(node.operator)
                if compare is None:
                    raise JSONPathError(f"unrecognized filter operator {node.operator}")
                if compare(lefts[0], rights[0]):
                    out.append(item)
        return out

    @staticmethod
    def _recursive(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        pending = [v for v in reversed(values) if v is not None]
        while pending:  # depth first, in order, as client-go's recursion (without Python's recursion limit)
            value = pending.pop()
            children = _children(value)
            if children:
                out.append(value)
                pending.extend(reversed(children))
        return out


# ---------------------------------------------------------------------------------------------------- printing
def _go_float(value: float, json_style: bool) -> str:
    """A float64 as Go prints it: ``%v`` (strconv's shortest ``'g'``: an exponent from 1e+06 on and below 1e-04)
    or as ``encoding/json`` does (``json_style``: an exponent from 1e+21 on and below 1e-06)."""
    if value != value or value in (float("inf"), float("-inf")):  # not in decoded JSON; Go's %v for completeness
        return "NaN" if value != value else ("+Inf" if value > 0 else "-Inf")
    if value == 0:
        return "-0" if str(value).startswith("-") and not json_style else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # where the decimal point goes in ``digits``
    exp10 = point - 1
    use_exponent = (abs(value) < 1e-6 or abs(value) >= 1e21) if json_style else (exp10 < -4 or exp10 >= 6)
    text = "-" if sign else ""
    if use_exponent:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        width = 1 if json_style else 2  # Go's JSON turns e-07 into e-7
        return f"{text}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):0{width}d}"
    if point <= 0:
        return f"{text}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{text}{digits}{'0' * (point - len(digits))}"
    return f"{text}{digits[:point]}.{digits[point:]}"


def _go_json(value: Any) -> str:
    """``value`` as Go's ``encoding/json`` writes it: compact, object keys sorted, ``<``, ``>``, ``&``, U+2028
    and U+2029 escaped, floats without a needless ``.0``."""
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_go_json(str(k))}:{_go_json(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                             ("\u2029", "\\u2029")):
            text = text.replace(raw, escaped)
        return text
    if isinstance(value, float):
        return _go_float(value, json_style=True)
    return json.dumps(value)


def print_value(value: Any) -> str:
    """One value as client-go's ``PrintResults`` prints it: objects and arrays as compact JSON, ``null`` as
    ``<no value>``, strings as they are, numbers and booleans as Go's ``%v``."""
    if isinstance(value, Mapping | list):
        return _go_json(value)
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value, json_style=False)
    return str(value)
