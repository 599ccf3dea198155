"""``async for key in q`` and ``async with q.lease() as key`` call done() on every way out: normal end, break,
exception, cancellation — at once, not when the loop gets round to finalising something."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import keyqueue
from keyqueue import AddResult, aio
from keyqueue._shell import RateLimitedAdds, Shell
from tests.aio.helpers import run, state, until_waiting


def test_async_for_calls_done_when_the_loop_advances_and_ends_at_shutdown() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        for k in "abc":
            q.add(k)
        q.shut_down()
        seen = []
        async for key in q:
            assert state(q)[2] == {key}  # the previous key was done before this one was handed out
            seen.append(key)
        assert seen == ["a", "b", "c"]
        assert state(q) == ([], set(), set())

    run(main())


def test_async_for_calls_done_on_exception_immediately() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        with pytest.raises(RuntimeError, match="reconcile failed"):
            async for key in q:
                q.add(key)  # re-added while held
                raise RuntimeError("reconcile failed")
        # No await since the loop was left: done() already ran, so the re-add is queued again.
        assert state(q) == (["a"], {"a"}, set())

    run(main())


def test_async_for_calls_done_on_break_and_return() -> None:
    async def first(q: aio.Queue[str]) -> str:
        async for key in q:
            return key
        raise AssertionError("unreachable")

    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        q.add("b")
        async for _key in q:
            break
        assert state(q) == (["b"], {"b"}, set())
        assert await first(q) == "b"
        assert state(q) == ([], set(), set())

    run(main())


def test_async_for_calls_done_when_cancelled_mid_body() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        holding = asyncio.Event()

        async def worker() -> None:
            async for _key in q:
                holding.set()
                await asyncio.sleep(3600)

        t = asyncio.create_task(worker())
        await holding.wait()
        assert state(q)[2] == {"a"}
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert state(q) == ([], set(), set())

    run(main())


def test_async_for_cancelled_while_waiting_takes_nothing() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()

        async def worker() -> None:
            async for _key in q:
                raise AssertionError("nothing was added")

        t = asyncio.create_task(worker())
        await until_waiting(q)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert t.cancelled()
        q.add("a")
        assert state(q) == (["a"], {"a"}, set())

    run(main())


def test_iterator_aclose_finishes_the_current_key() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        it = aiter(q)
        assert await anext(it) == "a"
        assert state(q)[2] == {"a"}
        await it.aclose()
        assert state(q)[2] == set()
        await it.aclose()  # idempotent

    run(main())


def test_lease_calls_done_on_exception_and_normal_exit() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        with pytest.raises(RuntimeError):
            async with q.lease() as key:
                assert key == "a"
                assert q.add(key) is AddResult.MARKED
                raise RuntimeError("reconcile failed")
        assert state(q) == (["a"], {"a"}, set())  # done ran: redelivered
        async with q.lease(timeout=1) as key:
            assert key == "a"
        assert state(q) == ([], set(), set())

    run(main())


def test_lease_calls_done_when_cancelled_inside() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        inside = asyncio.Event()

        async def worker() -> None:
            async with q.lease():
                inside.set()
                await asyncio.sleep(3600)

        t = asyncio.create_task(worker())
        await inside.wait()
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert t.cancelled()
        assert state(q) == ([], set(), set())

    run(main())


def test_lease_cancelled_while_waiting_takes_nothing_and_lease_timeout() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()

        async def worker() -> None:
            async with q.lease():
                raise AssertionError("nothing was added")

        t = asyncio.create_task(worker())
        await until_waiting(q)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        with pytest.raises(TimeoutError):
            async with q.lease(timeout=0.01):
                raise AssertionError("nothing was added")
        q.add("a")
        assert state(q) == (["a"], {"a"}, set())

    run(main())


def test_both_shells_share_one_rate_limiting_implementation_and_the_lazy_submodule() -> None:
    assert issubclass(aio.RateLimitingQueue, RateLimitedAdds)
    assert issubclass(keyqueue.RateLimitingQueue, RateLimitedAdds)
    for name in ("add", "add_after", "add_rate_limited", "forget", "num_requeues", "__len__", "stats"):
        assert getattr(aio.RateLimitingQueue, name) is getattr(keyqueue.RateLimitingQueue, name)
    assert issubclass(aio.Queue, Shell) and issubclass(keyqueue.Queue, Shell)
    assert keyqueue.aio is aio
    with pytest.raises(AttributeError):
        _: Any = keyqueue.no_such_attribute


def test_import_keyqueue_does_not_import_asyncio() -> None:
    import subprocess
    import sys

    code = "import sys, keyqueue; assert 'asyncio' not in sys.modules; keyqueue.aio.Queue; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_bad_input_raises_and_changes_nothing() -> None:
    async def main() -> None:
        q: aio.DelayingQueue[Any] = aio.DelayingQueue()
        with pytest.raises(TypeError, match="list"):
            q.add(["a"])
        with pytest.raises(TypeError, match="dict"):
            q.add_after({"a": 1}, 1.0)
        with pytest.raises(ValueError, match="NaN"):
            q.add_after("a", float("nan"))
        with pytest.raises(TypeError, match="name must be a str"):
            aio.Queue(name=3)  # type: ignore[arg-type]
        assert state(q) == ([], set(), set())
        assert len(q._core.delays) == 0

    run(main())
