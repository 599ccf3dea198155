"""Helpers for testing controllers, and the pytest plugin (:mod:`keyqueue.testing.plugin`).

``pip install 'keyqueue[testing]'`` brings pytest, etcd, kubectl, a redis-server with redis-py and the official
Kubernetes client; the plugin then registers itself with pytest (the ``pytest11`` entry point ``keyqueue``) and
offers the fixtures ``kube_apiserver``, ``kube_namespace``, ``kube_api_client``, ``kubeconfig``, ``redis_server``
and ``redis_url``. This module holds what a test calls itself: :func:`eventually` and :func:`aeventually`, which
wait for a condition instead of sleeping.

Importing this module imports nothing beyond the standard library.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["aeventually", "eventually"]

T = TypeVar("T")


def _check_arguments(check: object, timeout: object, interval: object) -> None:
    if not callable(check):
        raise TypeError(f"check must be a callable taking no arguments, got {type(check).__name__}: {check!r}")
    for name, value in (("timeout", timeout), ("interval", interval)):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}: {value!r}")
    assert isinstance(timeout, int | float) and isinstance(interval, int | float)  # for the type checker
    if not 0 <= timeout < math.inf:
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    if not 0 < interval < math.inf:
        raise ValueError(f"interval must be a finite number of seconds > 0, got {interval!r}")


def _describe(check: Callable[..., object]) -> str:
    return getattr(check, "__qualname__", None) or repr(check)


def _timed_out(check: Callable[..., object], timeout: float, attempts: int, last_value: object,
               last_error: AssertionError | None) -> AssertionError:
    if last_error is not None:
        last = f"{type(last_error).__name__}: {last_error}"
    elif last_value is None:
        last = "returned None (a check that only asserts must end with `return True`)"
    else:
        last = f"returned {last_value!r}"
    error = AssertionError(f"{_describe(check)} did not hold within {timeout} s ({attempts} attempts); "
                           f"last attempt: {last}")
    error.__cause__ = last_error  # the last failure's own traceback is shown under this one
    return error


def eventually(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
    """Call ``check()`` until it returns a truthy value or stops raising ``AssertionError``; return that value.

    ``check`` is called at once, then every ``interval`` seconds, the last time when ``timeout`` seconds have
    passed; after that last attempt, if it still failed, :func:`eventually` raises ``AssertionError`` at once (no
    further sleep) with a message naming the check, the number of attempts and the last failure (the
    ``AssertionError`` it raised, chained as ``__cause__``, or the falsy value it returned). ``timeout=0`` makes
    one attempt. Any other exception from ``check`` propagates at once: it is a bug, not a condition not yet met.

    ``TypeError`` if ``check`` is not callable or ``timeout``/``interval`` is not a number; ``ValueError`` if
    ``timeout`` is negative or not finite, or ``interval`` is not positive and finite.

    Success is a truthy value, also for a check that asserts: it ends with ``return True`` (or returns what it
    checked), because a check returning ``None`` without raising counts as not yet, never as done (a
    ``dict.get`` that found nothing must not end the wait). So
    ``eventually(lambda: api.read_namespaced_config_map("a", ns).metadata.annotations)`` waits for annotations
    and returns them, and so does::

        def check():
            cm = api.read_namespaced_config_map("a", ns)
            assert cm.metadata.annotations, cm
            return cm.metadata.annotations
    """
    _check_arguments(check, timeout, interval)
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        last_error: AssertionError | None = None
        try:
            value = check()
        except AssertionError as exc:
            last_error = exc
        else:
            if value:
                return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(check, timeout, attempts, None if last_error else value, last_error)
        time.sleep(min(interval, remaining))


async def aeventually(check: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.05) -> T:
    """The asyncio twin of :func:`eventually`: ``await check()`` until it returns a truthy value or stops raising
    ``AssertionError``, sleeping with ``asyncio.sleep`` (the event loop runs meanwhile); same arguments, same
    timeout message, same errors. ``check`` is an ``async def`` function (or any callable returning an
    awaitable); a ``check`` whose call returns something else is a ``TypeError``.
    """
    _check_arguments(check, timeout, interval)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempts = 0
    while True:
        attempts += 1
        last_error: AssertionError | None = None
        awaitable = check()
        if not inspect.isawaitable(awaitable):
            raise TypeError(f"check must return an awaitable (an async def function; use eventually() for a plain "
                            f"one), {_describe(check)} returned {type(awaitable).__name__}")
        try:
            value = await awaitable
        except AssertionError as exc:
            last_error = exc
        else:
            if value:
                return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _timed_out(check, timeout, attempts, None if last_error else value, last_error)
        await asyncio.sleep(min(interval, remaining))
