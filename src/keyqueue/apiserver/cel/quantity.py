"""Kubernetes resource quantities (``resource.Quantity``): parsing and exact arithmetic, for CEL's ``quantity``
library."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

__all__ = ["Quantity", "QuantityError", "parse_quantity"]

_FORM: Final = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)")
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT: Final = re.compile(r"[eE]([+-]?[0-9]+)")


class QuantityError(ValueError):
    """Not a quantity; the message is kube's (``quantities must match the regular expression ...``)."""


class Quantity:
    """An exact quantity (a :class:`~fractions.Fraction`), compared and added as kube's ``resource.Quantity``."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


def parse_quantity(text: str) -> Quantity:
    """The quantity ``text`` (``1.5Gi``, ``100m``, ``1e3``); raises :class:`QuantityError`."""
    m = _FORM.fullmatch(text) if isinstance(text, str) and len(text) <= 256 else None
    if not m:
        raise QuantityError("quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    number, suffix = Fraction(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return Quantity(number * _BINARY[suffix])
    if suffix in _DECIMAL:
        return Quantity(number * Fraction(10) ** _DECIMAL[suffix])
    exp = _EXPONENT.fullmatch(suffix)
    if exp and abs(int(exp.group(1))) <= 1000:
        return Quantity(number * Fraction(10) ** int(exp.group(1)))
    raise QuantityError("unable to parse quantity's suffix")
