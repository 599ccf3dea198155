"""The ``pattern`` of a CRD schema, matched as kube-apiserver matches it: with Go's ``regexp`` (RE2 syntax).

Python's :mod:`re` differs from RE2 where real CRDs notice: ``$`` also matches before a final newline (so
``^[A-Za-z]+$`` accepts ``"Abc\\n"``), inline flags such as ``(?i)`` must start the pattern, and POSIX classes
(``[[:alpha:]]``) are not known.  This module uses RE2 itself (the ``google-re2`` binding) and words a pattern
that does not compile as Go's ``regexp`` does.  Each pattern is compiled once and cached; a compiled RE2 is safe
to match from many threads at once.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

__all__ = ["PatternError", "compile_pattern", "pattern_matches"]

#: RE2's (C++) error codes as Go's ``regexp/syntax`` words them.
_GO_CODES: Final = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "invalid UTF-8": "invalid UTF-8",
}

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is answered with a 422, not logged to stderr by the C++ library


class PatternError(ValueError):
    """A pattern that does not compile under RE2; the message is Go's (``error parsing regexp: <code>: `<arg>```)."""


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 of ``pattern`` (cached: each distinct pattern is compiled once).

    Raises :class:`PatternError` with Go's message if it does not compile, :class:`TypeError` if ``pattern`` is
    not a ``str``.  Never blocks."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, got {type(pattern).__name__}")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        code, _, arg = text.partition(": ")
        raise PatternError(f"error parsing regexp: {_GO_CODES.get(code, code)}: `{arg}`") from None


def pattern_matches(pattern: str, value: str) -> bool:
    """True if ``pattern`` matches somewhere in ``value`` (Go's ``regexp.MatchString``: unanchored, ``$`` only at
    the very end).  Raises :class:`PatternError` if the pattern does not compile."""
    return compile_pattern(pattern).search(value) is not None
