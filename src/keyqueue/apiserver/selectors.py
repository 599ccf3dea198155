"""Label and field selectors, with the syntax and matching rules of ``k8s.io/apimachinery``.

Label selectors: comma-separated requirements, each one of ``key``, ``!key``,
``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``,
``key notin (a,b)``, ``key>N`` and ``key<N``.  ``!=`` and ``notin`` also match
objects without the label.

Field selectors: ``field=value``, ``field==value`` and ``field!=value`` on the
fields a resource supports (``metadata.name`` and ``metadata.namespace`` for
ConfigMaps; ``metadata.name`` and ``status.phase`` for Namespaces).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import APIError, bad_request

__all__ = ["FieldSelector", "LabelSelector", "parse_field_selector", "parse_label_selector"]

_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, gt, lt
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.op:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "gt" | "lt":
                if not present:
                    return False
                try:
                    have = int(value)
                except ValueError:
                    return False
                want = int(self.values[0])
                return have > want if self.op == "gt" else have < want
        return False  # pragma: no cover


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _label_error(selector: str, why: str) -> APIError:
    return bad_request(f"unable to parse requirement: {why} (selector {selector!r})")


def parse_label_selector(selector: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value.  Raises a 400 :class:`APIError` if malformed."""
    if not selector or not selector.strip():
        return LabelSelector(())
    tokens: list[str] = _TOKEN.findall(selector)
    if "".join(tokens) != re.sub(r"\s+", "", selector):
        raise _label_error(selector, "unexpected character")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise _label_error(selector, "unexpected end")
        tok = tokens[pos]
        pos += 1
        return tok

    def ident(tok: str) -> str:
        if tok in {"==", "!=", "=", "!", "(", ")", ",", ">", "<"}:
            raise _label_error(selector, f"found '{tok}', expected: identifier")
        return tok

    reqs: list[_Requirement] = []
    while True:
        tok = take()
        if tok == "!":
            reqs.append(_Requirement(ident(take()), "!exists", ()))
        else:
            key = ident(tok)
            nxt = peek()
            if nxt is None or nxt == ",":
                reqs.append(_Requirement(key, "exists", ()))
            elif nxt in ("=", "==", "!="):
                take()
                value = peek()
                if value is None or value == ",":
                    reqs.append(_Requirement(key, "=" if nxt != "!=" else "!=", ("",)))
                else:
                    reqs.append(_Requirement(key, "=" if nxt != "!=" else "!=", (ident(take()),)))
            elif nxt in ("in", "notin"):
                take()
                if take() != "(":
                    raise _label_error(selector, "found '(' expected")
                values: list[str] = []
                while True:
                    t = take()
                    if t == ")":
                        break
                    if t == ",":
                        continue
                    values.append(ident(t))
                reqs.append(_Requirement(key, nxt, tuple(values)))
            elif nxt in (">", "<"):
                take()
                number = ident(take())
                if not re.fullmatch(r"-?\d+", number):
                    raise _label_error(selector, f"for 'Gt', 'Lt' operators, the value must be an integer: {number}")
                reqs.append(_Requirement(key, "gt" if nxt == ">" else "lt", (number,)))
            else:
                raise _label_error(selector, f"found '{nxt}', expected: ',' or operator")
        nxt = peek()
        if nxt is None:
            break
        if take() != ",":
            raise _label_error(selector, "expected ','")
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: ``(field, op, value)`` terms, all of which must hold."""

    terms: tuple[tuple[str, str, str], ...]

    def matches(self, fields: Mapping[str, str]) -> bool:
        for field, op, value in self.terms:
            have = fields.get(field, "")
            if (have == value) != (op == "="):
                return False
        return True

    def value_of(self, field: str) -> str | None:
        """The value required by an ``=`` term on ``field``, if there is one."""
        for f, op, value in self.terms:
            if f == field and op == "=":
                return value
        return None


def parse_field_selector(selector: str | None, supported: frozenset[str]) -> FieldSelector:
    """Parse a ``fieldSelector`` query value; fields outside ``supported`` are a 400 error."""
    if not selector or not selector.strip():
        return FieldSelector(())
    terms: list[tuple[str, str, str]] = []
    for part in selector.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^=!\s]+)\s*(==|!=|=)\s*(.*)", part)
        if m is None:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        field, op, value = m.group(1), m.group(2), m.group(3).strip()
        if field not in supported:
            raise bad_request(f'field label not supported: {field}')
        terms.append((field, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(terms))
