"""The CEL expressions of an admission webhook's ``matchConditions``, compiled and evaluated with cel-python
(``celpy``, a pure-Python implementation of Google's CEL).

An expression sees kube's variables: ``object`` and ``oldObject`` (``null`` where the operation has none) and
``request`` (the ``AdmissionReview`` request without them).  It must give a bool.  Kube's CEL libraries beyond the
standard ones (``authorizer``, Kubernetes' list, regex and URL functions) are not available here.

Compiled programs are cached per expression text (the cache is bounded; thread-safe).  A program is evaluated by
one thread at a time: celpy's evaluator walks the shared syntax tree, and is not documented as safe to share.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

__all__ = ["ConditionError", "compile_error", "conditions_match"]

_MAX_CACHED: Final = 1024
_env = celpy.Environment()
_programs: dict[str, tuple[Any, threading.Lock]] = {}
_lock = threading.Lock()


class ConditionError(Exception):
    """A condition that does not compile, fails to evaluate or gives something other than a bool."""


def _program(expression: str) -> tuple[Any, threading.Lock]:
    """The compiled program of ``expression`` and the lock its evaluations take."""
    with _lock:
        cached = _programs.get(expression)
    if cached is not None:
        return cached
    try:
        program = _env.program(_env.compile(expression))
    except Exception as exc:  # celpy raises its parser's and its compiler's own error types
        raise ConditionError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from None
    with _lock:
        if len(_programs) >= _MAX_CACHED:
            _programs.clear()
        return _programs.setdefault(expression, (program, threading.Lock()))


def compile_error(expression: str) -> str | None:
    """``None`` if ``expression`` compiles, else the compiler's message."""
    try:
        _program(expression)
    except ConditionError as exc:
        return str(exc)
    return None


def conditions_match(conditions: Sequence[Mapping[str, Any]], request: Mapping[str, Any]) -> bool:
    """True if every condition of ``conditions`` (``{"name", "expression"}``) is true for the review ``request``
    (its ``object``, ``oldObject`` and the rest).  As kube: a false condition ends the check at once (False); an
    error is raised (:class:`ConditionError`, naming the condition) only when no condition is false."""
    activation = {
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
        "request": json_to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")}),
    }
    problems: list[str] = []
    for condition in conditions:
        name = str(condition.get("name", ""))
        try:
            program, lock = _program(str(condition.get("expression", "")))
            with lock:
                result = program.evaluate(activation)
        except ConditionError as exc:
            problems.append(f"compilation failed for {name}: {exc}")
            continue
        except Exception as exc:  # celpy's evaluation errors (no such key, type mismatch)
            problems.append(f"expression {name} resulted in error: {exc.args[0] if exc.args else exc}")
            continue
        if not isinstance(result, celtypes.BoolType):
            problems.append(f"expression {name} resulted in a {type(result).__name__}, not a bool")
        elif not result:
            return False
    if problems:
        raise ConditionError("; ".join(problems))
    return True
