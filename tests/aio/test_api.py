"""The asyncio classes have the threading classes' constructor arguments and method names; ``get`` and
``shut_down_with_drain`` are coroutines there, every other method is a plain method (callable from any thread)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import keyqueue
from keyqueue import aio

PAIRS = [
    (keyqueue.Queue, aio.Queue),
    (keyqueue.DelayingQueue, aio.DelayingQueue),
    (keyqueue.RateLimitingQueue, aio.RateLimitingQueue),
]
IDS = [threaded.__name__ for threaded, _ in PAIRS]

COROUTINES = {"get", "shut_down_with_drain"}
# The list of plain methods (shutting_down is a property in both shells), plus the other public ones.
PLAIN = {"add", "done", "add_after", "add_rate_limited", "forget", "num_requeues", "shut_down", "lease", "stats",
         "snapshot"}
# The one deliberate difference: iteration is `for key in q` in one shell and `async for key in q` in the other.
ITERATION = {"threaded": "__iter__", "asyncio": "__aiter__"}


def public_methods(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def parameters(method: Any) -> list[tuple[str, Any, Any]]:
    # After self, which a compiled method reports as positional-only.
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(method).parameters.values())[1:]]


@pytest.mark.parametrize(("threaded", "asyncio_cls"), PAIRS, ids=IDS)
def test_same_constructor_arguments(threaded: type, asyncio_cls: type) -> None:
    assert inspect.signature(asyncio_cls) == inspect.signature(threaded)
    # Control: the comparison can fail (RateLimitingQueue takes rate_limiter first, the others do not).
    assert inspect.signature(aio.Queue) != inspect.signature(keyqueue.RateLimitingQueue)


@pytest.mark.parametrize(("threaded", "asyncio_cls"), PAIRS, ids=IDS)
def test_same_method_names_and_parameters(threaded: type, asyncio_cls: type) -> None:
    names = public_methods(threaded)
    assert public_methods(asyncio_cls) == names
    for name in names:
        # Parameters, not return annotations: lease() returns a sync or an async context manager. Names, kinds and
        # defaults, not annotations: a compiled method (the optional mypyc build) carries none.
        method = getattr(asyncio_cls, name)
        if not inspect.signature(method).parameters:  # not even self: a compiled coroutine function (mypyc)
            continue  # reports no signature at all
        assert parameters(method) == parameters(getattr(threaded, name)), name
    assert parameters(threaded.get) != parameters(threaded.add)  # control: the comparison can fail
    # A property (compiled: a getset descriptor, also a data descriptor); not a method.
    assert inspect.isdatadescriptor(inspect.getattr_static(asyncio_cls, "shutting_down"))
    assert inspect.isdatadescriptor(inspect.getattr_static(threaded, "shutting_down"))
    assert not inspect.isdatadescriptor(inspect.getattr_static(threaded, "add"))  # control
    assert hasattr(threaded, "__len__") and hasattr(asyncio_cls, "__len__")
    assert hasattr(threaded, ITERATION["threaded"]) and not hasattr(threaded, ITERATION["asyncio"])
    assert hasattr(asyncio_cls, ITERATION["asyncio"]) and not hasattr(asyncio_cls, ITERATION["threaded"])


@pytest.mark.parametrize(("threaded", "asyncio_cls"), PAIRS, ids=IDS)
def test_coroutines_and_plain_methods_as_specified(threaded: type, asyncio_cls: type) -> None:
    names = public_methods(asyncio_cls)
    assert names >= COROUTINES
    for name in names:
        is_coroutine = inspect.iscoroutinefunction(getattr(asyncio_cls, name))
        assert is_coroutine == (name in COROUTINES), name
        assert name in COROUTINES or name in PLAIN, f"{name}: not classified by this test"
        assert not inspect.iscoroutinefunction(getattr(threaded, name)), name
    for dunder in ("__len__", "__aiter__"):
        assert not inspect.iscoroutinefunction(getattr(asyncio_cls, dunder))
    assert inspect.iscoroutinefunction(aio.KeyIterator.__anext__)
    assert inspect.iscoroutinefunction(aio.Lease.__aenter__) and inspect.iscoroutinefunction(aio.Lease.__aexit__)
