"""The CEL expressions of an admission webhook's ``matchConditions``, compiled and evaluated with the server's CEL
engine (:mod:`keyqueue.apiserver.cel`: cel-python with the Kubernetes CEL libraries).

An expression sees kube's variables: ``object`` and ``oldObject`` (``null`` where the operation has none) and
``request`` (the ``AdmissionReview`` request without them), all untyped (``dyn``).  It must give a bool.  The
``authorizer`` variable is not available.

Compiled programs are cached per expression text (the cache is bounded; thread-safe); a program may be evaluated by
many threads at once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from celpy import celtypes

from .cel import CelEvalError, CelSyntaxError, Program, to_cel
from .cel.types import DYN

__all__ = ["ConditionError", "compile_error", "conditions_match"]

_MAX_CACHED: Final = 1024
_DECLS: Final = {"object": DYN, "oldObject": DYN, "request": DYN}
_programs: dict[str, Program] = {}
_lock = threading.Lock()


class ConditionError(Exception):
    """A condition that does not compile, fails to evaluate or gives something other than a bool."""


def _program(expression: str) -> Program:
    """The compiled program of ``expression``; raises :class:`ConditionError` if it does not compile."""
    with _lock:
        cached = _programs.get(expression)
    if cached is not None:
        return cached
    try:
        program = Program(expression, _DECLS)
    except CelSyntaxError as exc:
        raise ConditionError(str(exc).strip().splitlines()[0] if str(exc).strip() else "does not compile") from None
    with _lock:
        if len(_programs) >= _MAX_CACHED:
            _programs.clear()
        return _programs.setdefault(expression, program)


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
        "object": to_cel(request.get("object"), None),
        "oldObject": to_cel(request.get("oldObject"), None),
        "request": to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")}, None),
    }
    problems: list[str] = []
    for condition in conditions:
        name = str(condition.get("name", ""))
        try:
            result = _program(str(condition.get("expression", ""))).evaluate(activation)
        except ConditionError as exc:
            problems.append(f"compilation failed for {name}: {exc}")
            continue
        except CelEvalError as exc:  # no such key, no such overload, ...
            problems.append(f"expression {name} resulted in error: {exc}")
            continue
        if not isinstance(result, bool | celtypes.BoolType):
            problems.append(f"expression {name} resulted in a {type(result).__name__}, not a bool")
        elif not result:
            return False
    if problems:
        raise ConditionError("; ".join(problems))
    return True
