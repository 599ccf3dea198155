"""The Kubernetes CEL libraries, as functions celpy calls: lists, strings, regex (RE2, as Go's ``regexp``), URLs,
quantities, IPs and CIDRs, ``format``, and optional values.

A method call ``x.f(a)`` reaches ``f(x, a)``.  A function answers a bad argument with a ``CELEvalError`` value
(celpy's error value, which CEL's ``||``/``&&`` absorb as the spec says) carrying cel-go's message.
"""

from __future__ import annotations

import ipaddress
import math
import urllib.parse
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Final

from celpy import celtypes as _celtypes
from celpy.evaluation import CELEvalError

from ..patterns import PatternError, compile_pattern
from .quantity import Quantity, QuantityError, parse_quantity

#: celpy's value classes, used dynamically: CEL values reach these functions untyped, and the union celpy
#: declares cannot be narrowed usefully by isinstance.
celtypes: Any = _celtypes

__all__ = ["FUNCTIONS", "Optional", "err"]

_INT64: Final = (-(2**63), 2**63 - 1)


def err(message: str) -> CELEvalError:
    """An error value with ``message``."""
    return CELEvalError(message)


class Optional:
    """A CEL ``optional_type`` value: ``optional.of(x)`` or ``optional.none()``."""

    __slots__ = ("present", "value")

    def __init__(self, value: Any = None, present: bool = False) -> None:
        self.value = value
        self.present = present

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Optional) and (self.present, self.value) == (other.present, other.value)

    def __hash__(self) -> int:
        return hash((self.present, id(self.value)))


_NONE: Final = Optional()


# ---------------------------------------------------------------------------------------------- optionals
def _opt_of(value: Any) -> Optional:
    return Optional(value, True)


def _opt_none() -> Optional:
    return _NONE


def _opt_of_non_zero(value: Any) -> Optional:
    return _NONE if value is None or not value else Optional(value, True)  # CEL's zero values are Python-falsy


def _opt_field(base: Any, name: Any) -> Any:
    if isinstance(base, Optional):
        if not base.present:
            return _NONE
        base = base.value
    if isinstance(base, celtypes.MapType):
        key = celtypes.StringType(name)
        return Optional(base[key], True) if key in base else _NONE
    return err(f"no such overload: optional field selection on {type(base).__name__}")


def _opt_index(base: Any, key: Any) -> Any:
    if isinstance(base, Optional):
        if not base.present:
            return _NONE
        base = base.value
    if isinstance(base, celtypes.MapType):
        return Optional(base[key], True) if key in base else _NONE
    if isinstance(base, celtypes.ListType) and isinstance(key, int):
        return Optional(base[key], True) if 0 <= key < len(base) else _NONE
    return err("no such overload: optional index")


def _value(opt: Any) -> Any:
    if isinstance(opt, Optional):
        return opt.value if opt.present else err("optional.none() dereference")
    return err("no such overload: value")


def _has_value(opt: Any) -> Any:
    return celtypes.BoolType(opt.present) if isinstance(opt, Optional) else err("no such overload: hasValue")


def _or_value(opt: Any, default: Any) -> Any:
    if isinstance(opt, Optional):
        return opt.value if opt.present else default
    return err("no such overload: orValue")


def _or(opt: Any, other: Any) -> Any:
    if isinstance(opt, Optional):
        return opt if opt.present else other
    return err("no such overload: or")


# ---------------------------------------------------------------------------------------------- lists
def _comparable(items: Any) -> bool:
    kinds = {type(i) for i in items}
    return len(kinds) <= 1 and not kinds & {celtypes.MapType, celtypes.ListType, celtypes.BoolType}


def _is_sorted(items: Any) -> Any:
    if not isinstance(items, celtypes.ListType) or not _comparable(items):
        return err("no such overload")
    return celtypes.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def _sum(items: Any) -> Any:
    if not isinstance(items, celtypes.ListType):
        return err("no such overload")
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _min(items: Any) -> Any:
    if not isinstance(items, celtypes.ListType) or not _comparable(items):
        return err("no such overload")
    return min(items) if items else err("min(list) of an empty list")


def _max(items: Any) -> Any:
    if not isinstance(items, celtypes.ListType) or not _comparable(items):
        return err("no such overload")
    return max(items) if items else err("max(list) of an empty list")


def _code_points(s: str, byte_index: int) -> int:
    return len(s.encode()[:byte_index].decode("utf-8", "ignore"))


def _index_of(base: Any, item: Any, start: Any = None) -> Any:
    if isinstance(base, celtypes.ListType):
        for i, v in enumerate(base):
            if v == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    if isinstance(base, str) and isinstance(item, str):
        offset = int(start) if start is not None else 0
        if not 0 <= offset <= len(base):
            return err(f"index out of range: {offset}")
        return celtypes.IntType(base.find(item, offset))
    return err("no such overload")


def _last_index_of(base: Any, item: Any, start: Any = None) -> Any:
    if isinstance(base, celtypes.ListType):
        for i in range(len(base) - 1, -1, -1):
            if base[i] == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    if isinstance(base, str) and isinstance(item, str):
        end = int(start) if start is not None else len(base)
        if not 0 <= end <= len(base):
            return err(f"index out of range: {end}")
        return celtypes.IntType(base.rfind(item, 0, end + len(item)))
    return err("no such overload")


# ---------------------------------------------------------------------------------------------- strings
def _char_at(s: Any, i: Any) -> Any:
    if not 0 <= int(i) <= len(s):
        return err(f"index out of range: {int(i)}")
    return celtypes.StringType(s[int(i)] if int(i) < len(s) else "")


def _lower(s: Any) -> Any:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in s))


def _upper(s: Any) -> Any:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in s))


def _replace(s: Any, old: Any, new: Any, n: Any = None) -> Any:
    count = -1 if n is None else int(n)
    return celtypes.StringType(str(s).replace(str(old), str(new), count) if count >= 0
                               else str(s).replace(str(old), str(new)))


def _split(s: Any, sep: Any, n: Any = None) -> Any:
    count = -1 if n is None else int(n)
    if count == 0:
        return celtypes.ListType([])
    parts = (list(s) if sep == "" else str(s).split(str(sep))) if count < 0 else \
        (list(s[: count - 1]) + ([s[count - 1:]] if len(s) >= count else []) if sep == ""
         else str(s).split(str(sep), count - 1))
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _substring(s: Any, start: Any, end: Any = None) -> Any:
    a = int(start)
    b = len(s) if end is None else int(end)
    if not 0 <= a <= len(s) or not a <= b <= len(s):
        return err(f"index out of range: {a if not 0 <= a <= len(s) else b}")
    return celtypes.StringType(s[a:b])


def _trim(s: Any) -> Any:
    return celtypes.StringType(str(s).strip())


def _join(items: Any, sep: Any = "") -> Any:
    if not isinstance(items, celtypes.ListType) or not all(isinstance(i, str) for i in items):
        return err("no such overload")
    return celtypes.StringType(str(sep).join(items))


def _reverse(s: Any) -> Any:
    return celtypes.StringType(str(s)[::-1])


def _show(value: Any) -> str:
    """How ``%s`` prints a value (cel-go's strings extension)."""
    if isinstance(value, celtypes.BoolType):
        return "true" if value else "false"
    if isinstance(value, celtypes.ListType):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, celtypes.MapType):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, celtypes.DoubleType):
        return _float_text(float(value))
    if isinstance(value, Quantity):
        return str(value.value)
    if value is None:
        return "null"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _float_text(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    return repr(f) if not f.is_integer() or abs(f) >= 1e21 else str(int(f))


def _format(fmt: Any, args: Any) -> Any:
    if not isinstance(args, celtypes.ListType):
        return err("no such overload")
    out: list[str] = []
    i, n = 0, 0
    text = str(fmt)
    while i < len(text):
        c = text[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        i += 1
        if i < len(text) and text[i] == "%":
            out.append("%")
            i += 1
            continue
        precision: int | None = None
        if i < len(text) and text[i] == ".":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            precision = int(text[i + 1:j] or 0)
            i = j
        if i >= len(text):
            return err("could not parse formatting clause: unexpected end of string")
        verb = text[i]
        i += 1
        if n >= len(args):
            return err(f"index {n} out of range")
        arg = args[n]
        n += 1
        if verb == "s":
            out.append(_show(arg))
        elif verb == "d":
            if isinstance(arg, celtypes.BoolType) or not isinstance(arg, int):
                return err("error during formatting: decimal clause can only be used on integers, was given "
                           f"{type(arg).__name__}")
            out.append(str(int(arg)))
        elif verb in ("f", "e"):
            if not isinstance(arg, float | int) or isinstance(arg, celtypes.BoolType):
                return err("error during formatting: fixed-point clause can only be used on doubles")
            out.append(f"{float(arg):.{6 if precision is None else precision}{verb}}")
        elif verb in ("x", "X", "o", "b"):
            if isinstance(arg, str | bytes) and verb in ("x", "X"):
                raw = arg.encode() if isinstance(arg, str) else bytes(arg)
                hexed = raw.hex()
                out.append(hexed.upper() if verb == "X" else hexed)
            elif isinstance(arg, int) and not isinstance(arg, celtypes.BoolType):
                out.append(format(int(arg), {"x": "x", "X": "X", "o": "o", "b": "b"}[verb]))
            else:
                return err(f"error during formatting: only integers, byte buffers, and strings can be "
                           f"formatted as hex, was given {type(arg).__name__}")
        else:
            return err(f"could not parse formatting clause: unrecognized formatting clause \"{verb}\"")
    return celtypes.StringType("".join(out))


# ---------------------------------------------------------------------------------------------- regex
def _regex(pattern: Any) -> Any:
    try:
        return compile_pattern(str(pattern))
    except PatternError as exc:
        return err(str(exc))


def _matches(s: Any, pattern: Any) -> Any:
    rx = _regex(pattern)
    return rx if isinstance(rx, CELEvalError) else celtypes.BoolType(rx.search(str(s)) is not None)


def _find(s: Any, pattern: Any) -> Any:
    rx = _regex(pattern)
    if isinstance(rx, CELEvalError):
        return rx
    m = rx.search(str(s))
    return celtypes.StringType(m.group(0) if m else "")


def _find_all(s: Any, pattern: Any, limit: Any = None) -> Any:
    rx = _regex(pattern)
    if isinstance(rx, CELEvalError):
        return rx
    found = [celtypes.StringType(m.group(0)) for m in rx.finditer(str(s))]
    if limit is not None and int(limit) >= 0:
        found = found[: int(limit)]
    return celtypes.ListType(found)


# ---------------------------------------------------------------------------------------------- URLs
class URL:
    """A parsed URL (kube's ``url`` type)."""

    __slots__ = ("parts",)

    def __init__(self, parts: urllib.parse.SplitResult) -> None:
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URL) and self.parts == other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


def _parse_url(s: Any) -> URL | None:
    text = str(s)
    if any(c in text for c in " \t\n") and not text.startswith("/"):
        return None
    try:
        parts = urllib.parse.urlsplit(text)
        _ = parts.port
    except ValueError:
        return None
    if not parts.scheme and not text.startswith("/"):
        return None
    return URL(parts)


def _url(s: Any) -> Any:
    parsed = _parse_url(s)
    return parsed if parsed is not None else err(f"URL parse error during conversion from string: parse "
                                                 f"\"{s}\": invalid URI for request")


def _is_url(s: Any) -> Any:
    return celtypes.BoolType(isinstance(s, str) and _parse_url(s) is not None)


def _get_scheme(u: Any) -> Any:
    return celtypes.StringType(u.parts.scheme) if isinstance(u, URL) else err("no such overload")


def _get_host(u: Any) -> Any:
    return celtypes.StringType(u.parts.netloc.rpartition("@")[2]) if isinstance(u, URL) else err("no such overload")


def _get_hostname(u: Any) -> Any:
    if not isinstance(u, URL):
        return err("no such overload")
    host = u.parts.netloc.rpartition("@")[2]
    if host.startswith("["):
        return celtypes.StringType(host[1:host.find("]")])
    return celtypes.StringType(host.rpartition(":")[0] if ":" in host else host)


def _get_port(u: Any) -> Any:
    if not isinstance(u, URL):
        return err("no such overload")
    host = u.parts.netloc.rpartition("@")[2]
    tail = host[host.find("]") + 1:] if host.startswith("[") else host
    return celtypes.StringType(tail.rpartition(":")[2] if ":" in tail else "")


def _get_escaped_path(u: Any) -> Any:
    return celtypes.StringType(u.parts.path) if isinstance(u, URL) else err("no such overload")


def _get_query(u: Any) -> Any:
    if not isinstance(u, URL):
        return err("no such overload")
    query = urllib.parse.parse_qs(u.parts.query, keep_blank_values=True)
    return celtypes.MapType({celtypes.StringType(k): celtypes.ListType([celtypes.StringType(x) for x in v])
                             for k, v in query.items()})


# ---------------------------------------------------------------------------------------------- quantities
def _quantity(s: Any) -> Any:
    try:
        return parse_quantity(str(s))
    except QuantityError as exc:
        return err(str(exc))


def _is_quantity(s: Any) -> Any:
    try:
        parse_quantity(str(s))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _q_operand(x: Any) -> Fraction | None:
    if isinstance(x, Quantity):
        return x.value
    if isinstance(x, int) and not isinstance(x, celtypes.BoolType):
        return Fraction(int(x))
    return None


def _quantity_op(fn: Callable[[Fraction, Fraction], Any]) -> Callable[[Any, Any], Any]:
    def call(a: Any, b: Any) -> Any:
        x, y = _q_operand(a), _q_operand(b)
        if not isinstance(a, Quantity) or y is None or x is None:
            return err("no such overload")
        return fn(x, y)
    return call


def _as_integer(q: Any) -> Any:
    if not isinstance(q, Quantity):
        return err("no such overload")
    if q.value.denominator != 1 or not _INT64[0] <= q.value <= _INT64[1]:
        return err("cannot convert value to integer")
    return celtypes.IntType(int(q.value))


def _quantity_method(fn: Callable[[Fraction], Any]) -> Callable[[Any], Any]:
    def call(q: Any) -> Any:
        return fn(q.value) if isinstance(q, Quantity) else err("no such overload")
    return call


# ---------------------------------------------------------------------------------------------- IPs
def _parse_ip(s: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = str(s)
    if "%" in text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return None
    return addr


def _is_ip(s: Any) -> Any:
    return celtypes.BoolType(isinstance(s, str) and _parse_ip(s) is not None)


def _is_cidr(s: Any) -> Any:
    text = str(s)
    addr, _, bits = text.partition("/")
    if not bits or _parse_ip(addr) is None:
        return celtypes.BoolType(False)
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "_kqOptOf": _opt_of, "_kqOptNone": _opt_none, "_kqOptOfNonZero": _opt_of_non_zero,
    "_kqOptField": _opt_field, "_kqOptIndex": _opt_index,
    "value": _value, "hasValue": _has_value, "orValue": _or_value, "or": _or,
    "isSorted": _is_sorted, "sum": _sum, "min": _min, "max": _max,
    "indexOf": _index_of, "lastIndexOf": _last_index_of,
    "charAt": _char_at, "lowerAscii": _lower, "upperAscii": _upper, "replace": _replace, "split": _split,
    "substring": _substring, "trim": _trim, "join": _join, "reverse": _reverse, "format": _format,
    "matches": _matches, "find": _find, "findAll": _find_all,
    "url": _url, "isURL": _is_url, "getScheme": _get_scheme, "getHost": _get_host, "getHostname": _get_hostname,
    "getPort": _get_port, "getEscapedPath": _get_escaped_path, "getQuery": _get_query,
    "quantity": _quantity, "isQuantity": _is_quantity,
    "compareTo": _quantity_op(lambda x, y: celtypes.IntType((x > y) - (x < y))),
    "isLessThan": _quantity_op(lambda x, y: celtypes.BoolType(x < y)),
    "isGreaterThan": _quantity_op(lambda x, y: celtypes.BoolType(x > y)),
    "add": _quantity_op(lambda x, y: Quantity(x + y)),
    "sub": _quantity_op(lambda x, y: Quantity(x - y)),
    "asInteger": _as_integer,
    "asApproximateFloat": _quantity_method(lambda v: celtypes.DoubleType(float(v))),
    "sign": _quantity_method(lambda v: celtypes.IntType((v > 0) - (v < 0))),
    "isInteger": _quantity_method(lambda v: celtypes.BoolType(v.denominator == 1 and _INT64[0] <= v <= _INT64[1])),
    "isIP": _is_ip, "isCIDR": _is_cidr,
}
