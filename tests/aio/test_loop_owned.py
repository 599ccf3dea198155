"""The loop-owned asyncio queues (``aio.LoopQueue``, ``LoopDelayingQueue``, ``LoopRateLimitingQueue``): bound to the
loop they are built in, no lock, other threads' adds handed to the loop, other threads' reads refused.

The conformance suite runs against them through ``tests.shells.LoopFacade`` (every call on the loop's thread);
these tests cover what only they do: the owner rule, the cross-thread path, a closed loop, nested calls.
Synchronisation is by events, thread joins and loop turns (``await asyncio.sleep(0)``), never by sleeping."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import keyqueue
from keyqueue import AddResult, FakeClock, ShutDown, aio
from keyqueue.metrics import NoopMetricsProvider, SnapshotMetricsProvider
from tests.aio.helpers import run, state, until_waiting
from tests.aio.test_race import ADDS_PER_PRODUCER, PRODUCERS, Run, _harness, _process

R = TypeVar("R")

LOOP_CLASSES = [aio.LoopQueue, aio.LoopDelayingQueue, aio.LoopRateLimitingQueue]
SHARED = {aio.LoopQueue: aio.Queue, aio.LoopDelayingQueue: aio.DelayingQueue,
          aio.LoopRateLimitingQueue: aio.RateLimitingQueue}
IDS = [c.__name__ for c in LOOP_CLASSES]


def in_thread(fn: Callable[[], R]) -> R:
    """Run ``fn`` in a new thread (a foreign one for any queue built elsewhere) and return or raise its outcome."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append((True, fn()))
        except BaseException as e:  # handed back to the caller
            out.append((False, e))

    t = threading.Thread(target=target)
    t.start()
    t.join(10)
    assert out, "the thread did not finish"
    ok, value = out[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


async def turns(n: int = 3) -> None:
    """Let the loop run its ready callbacks (the handed-over calls among them) ``n`` times."""
    for _ in range(n):
        await asyncio.sleep(0)


# -- construction -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", LOOP_CLASSES, ids=IDS)
def test_same_constructor_and_methods_as_the_shared_queue(cls: type) -> None:
    shared = SHARED[cls]
    assert inspect.signature(cls) == inspect.signature(shared)
    public = {n for n in dir(shared) if not n.startswith("_")}
    assert public <= {n for n in dir(cls) if not n.startswith("_")}
    assert issubclass(cls, shared)  # a loop-owned queue is usable wherever the shared one is expected


@pytest.mark.parametrize("cls", LOOP_CLASSES, ids=IDS)
def test_built_outside_a_running_loop_it_refuses(cls: type) -> None:
    with pytest.raises(RuntimeError, match="binds to the event loop it is built in"):
        cls()


def test_a_named_queue_with_a_metrics_provider_is_refused() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match=r"cannot emit metrics.*name='jobs'.*SnapshotMetricsProvider"):
            aio.LoopQueue(name="jobs", metrics_provider=SnapshotMetricsProvider())
        # Control: a name without metrics, or a provider without a name, is accepted.
        assert aio.LoopQueue(name="jobs", metrics_provider=NoopMetricsProvider()).name == "jobs"
        aio.LoopQueue(metrics_provider=SnapshotMetricsProvider())
        previous = keyqueue.metrics.set_provider(SnapshotMetricsProvider())  # the process-wide provider counts too
        try:
            with pytest.raises(ValueError, match="cannot emit metrics"):
                aio.LoopQueue(name="jobs")
        finally:
            keyqueue.metrics.set_provider(previous)

    run(main())


# -- the owner rule ------------------------------------------------------------------------------------------------


def test_reads_and_hand_outs_from_another_thread_raise_and_change_nothing() -> None:
    async def main() -> None:
        q: aio.LoopRateLimitingQueue[str] = aio.LoopRateLimitingQueue()
        q.add("a")
        q.add("b")
        q.add("c")
        it = q.__aiter__()
        assert await it.__anext__() == "a"  # the iterator holds "a"
        before = state(q)
        calls: dict[str, Callable[[], Any]] = {
            "done()": lambda: q.done("a"),
            "len()": lambda: len(q),
            "stats()": q.stats,
            "snapshot()": q.snapshot,
            "get()": lambda: asyncio.run(q.get()),
            "shut_down_with_drain()": lambda: asyncio.run(q.shut_down_with_drain()),
        }
        for name, call in calls.items():
            pattern = rf"^{re.escape(name)} of a LoopRateLimitingQueue must be called on the thread of its event loop"
            with pytest.raises(RuntimeError, match=pattern):
                in_thread(call)
        assert state(q) == before  # nothing taken, nothing finished
        assert not q.shutting_down
        # The next key of `async for`, asked in another thread: refused too; the key the iterator held is let go
        # of and finished on the loop (as when the iterator is dropped), so it cannot be left "processing".
        with pytest.raises(RuntimeError, match=r"^async for of a LoopRateLimitingQueue must be called on the thread"):
            in_thread(lambda: asyncio.run(it.__anext__()))
        assert state(q) == before
        await turns()
        assert state(q) == (["b", "c"], {"b", "c"}, set())
        # Control: the same calls work on the loop's thread.
        assert len(q) == 2
        assert q.snapshot().fifo == 2
        assert await it.__anext__() == "b"
        assert q.done("b") is False

    run(main())


def test_the_plain_methods_that_need_no_queue_state_work_from_any_thread() -> None:
    async def main() -> None:
        q: aio.LoopRateLimitingQueue[str] = aio.LoopRateLimitingQueue()
        q.add_rate_limited("a")
        assert in_thread(lambda: q.num_requeues("a")) == 1
        in_thread(lambda: q.forget("a"))
        assert q.num_requeues("a") == 0
        assert in_thread(lambda: q.shutting_down) is False
        assert "LoopRateLimitingQueue" in in_thread(lambda: repr(q))

    run(main())


# -- adds from other threads ---------------------------------------------------------------------------------------


def test_an_add_from_another_thread_is_deferred_then_applied_on_the_loop() -> None:
    async def main() -> None:
        q: aio.LoopQueue[str] = aio.LoopQueue()
        assert in_thread(lambda: q.add("a")) is AddResult.DEFERRED
        assert len(q) == 0  # not yet: it is applied by the loop
        await turns()
        assert len(q) == 1
        assert in_thread(lambda: q.add("a")) is AddResult.DEDUP  # waiting already: the lock-free probe answers
        assert await q.get() == "a"
        assert in_thread(lambda: q.add("a")) is AddResult.DEFERRED  # being processed: MARKED, on the loop
        await turns()
        assert q.done("a") is True  # the deferred add had marked it
        assert await q.get() == "a"

    run(main())


def test_bad_input_from_another_thread_raises_at_once() -> None:
    async def main() -> None:
        q: aio.LoopRateLimitingQueue[Any] = aio.LoopRateLimitingQueue()
        with pytest.raises(TypeError, match="list"):
            in_thread(lambda: q.add([1]))
        with pytest.raises(TypeError, match="list"):
            in_thread(lambda: q.add_rate_limited([1]))
        with pytest.raises(ValueError, match="NaN"):
            in_thread(lambda: q.add_after("a", float("nan")))
        with pytest.raises(TypeError):
            in_thread(lambda: q.add_after("a", "soon"))
        await turns()
        assert state(q) == ([], set(), set())
        assert q._deferred == deque()
        # Control: valid calls from the same thread are deferred, not refused.
        assert in_thread(lambda: q.add_after("a", 0)) is AddResult.DEFERRED

    run(main())


def test_one_producer_thread_keeps_its_order_and_one_loop_callback_carries_a_batch() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        q: aio.LoopQueue[str] = aio.LoopQueue()
        scheduled = []
        original = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(callback, "__self__", None) is q:
                scheduled.append(callback)
            return original(callback, *args, **kwargs)

        keys = [f"default/obj-{i}" for i in range(1000)]
        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        try:
            results = in_thread(lambda: [q.add(k) for k in keys])  # the loop does not run meanwhile
        finally:
            del loop.call_soon_threadsafe
        assert set(results) == {AddResult.DEFERRED}
        assert len(scheduled) == 1  # one hand-over for the whole batch, not one per add
        await turns()
        assert [await q.get() for _ in keys] == keys

    run(main())


class _Chain(deque[int]):
    """An ordering whose ``append(i)`` adds ``i + 1`` (below ``last``) from inside the call: each applied add hands
    one more add to the loop, as a thread that never stops adding would, but one at a time and deterministically."""

    queue: aio.LoopQueue[int]
    last = 1000

    def append(self, item: int, /) -> None:
        super().append(item)
        if item + 1 < self.last:
            assert self.queue.add(item + 1) is AddResult.DEFERRED


def test_each_loop_turn_applies_only_the_calls_handed_over_before_it_began() -> None:
    async def main() -> None:
        order = _Chain()
        q: aio.LoopQueue[int] = aio.LoopQueue(ordering=order)
        order.queue = q
        assert in_thread(lambda: q.add(0)) is AddResult.DEFERRED
        await asyncio.sleep(0)
        # One turn applied add(0) and left the add(1) it caused for the next turn: other callbacks run in between,
        # however fast new calls arrive. (Applying until nothing is left would have added all 1,000 here.)
        assert len(q) == 1
        await asyncio.sleep(0)
        assert len(q) == 2
        turns_taken = 2
        while len(q) < _Chain.last:  # and none is stranded: every call handed over is applied, in order
            await asyncio.sleep(0)
            turns_taken += 1
            assert turns_taken < 10 * _Chain.last, f"stuck at {len(q)} keys"
        assert [await q.get() for _ in range(_Chain.last)] == list(range(_Chain.last))

    run(main())


def test_a_closed_loop_drops_adds_from_other_threads() -> None:
    q_box: list[aio.LoopQueue[str]] = []

    async def build() -> None:
        q_box.append(aio.LoopQueue())

    def owner() -> None:
        asyncio.run(build())  # the loop is closed when this returns

    in_thread(owner)
    (q,) = q_box
    assert q.add("a") is AddResult.DROPPED  # this thread is not the owner, and the loop is gone
    assert state(q) == ([], set(), set())
    q.shut_down()  # handed nowhere: a no-op, and no error
    assert not q._deferred


def test_a_loop_closed_with_a_hand_over_pending_drops_the_later_adds() -> None:
    made: list[aio.LoopQueue[str]] = []
    loop = asyncio.new_event_loop()

    def owner() -> None:
        async def build() -> None:
            made.append(aio.LoopQueue())

        loop.run_until_complete(build())  # then the loop stops: a hand-over stays pending

    in_thread(owner)
    (q,) = made
    assert q.add("a") is AddResult.DEFERRED  # scheduled on the stopped (not closed) loop
    loop.close()
    assert q.add("b") is AddResult.DROPPED
    assert q.add("a") is AddResult.DROPPED


# -- the loop's workers and many producer threads ------------------------------------------------------------------


class _Dropping(aio.LoopQueue[str]):
    """Control: a broken hand-over that loses every add from another thread (but still says DEFERRED)."""

    def _defer(self, call: Callable[..., Any], *args: Any) -> AddResult:
        return AddResult.DEFERRED


def _serial_run(cls: type[aio.LoopQueue[str]]) -> Run:
    holder: list[aio.LoopQueue[str]] = []

    async def main() -> Run:
        q = cls()
        holder.append(q)

        async def worker(r: Run, seq: itertools.count[int]) -> None:
            async for key in q:
                await _process(key, r, seq)

        async def finish() -> None:
            while q._deferred:  # the producers' last adds are applied before the drain shuts the queue down
                await asyncio.sleep(0)
            assert await q.shut_down_with_drain(timeout=10) is True

        return await _harness(q.add, worker, finish)

    return run(main(), timeout=30)


def _lost(r: Run) -> list[str]:
    """Keys whose last add was not followed by a processing that started after it."""
    return [k for k, added in r.last_add_seq.items() if r.last_start_seq.get(k, -1) < added]


def test_producer_threads_and_loop_workers_one_holder_per_key_nothing_lost() -> None:
    r = _serial_run(aio.LoopQueue)
    assert r.adds == PRODUCERS * ADDS_PER_PRODUCER
    assert r.violations == 0
    assert _lost(r) == []
    assert 0 < r.processed <= r.adds
    assert r.max_in_flight > 1  # the workers really overlapped

    # Control: the same harness and checks around a hand-over that loses the adds must report lost keys.
    control = _serial_run(_Dropping)
    assert control.processed == 0
    assert len(_lost(control)) > 0


# -- nested calls (a callback of the queue, a signal handler, a __del__) ------------------------------------------


class _CallingBack(deque[Any]):
    """An ordering that calls ``hook`` after each append: a call into the queue from inside one of its calls."""

    hook: Callable[[], Any] | None = None

    def append(self, item: Any, /) -> None:
        super().append(item)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


def test_calls_nested_in_a_call_of_the_queue_are_deferred_or_refused() -> None:
    async def main() -> None:
        order = _CallingBack()
        q: aio.LoopDelayingQueue[str] = aio.LoopDelayingQueue(ordering=order)
        seen: list[Any] = []
        order.hook = lambda: seen.append(q.add("b"))
        assert q.add("a") is AddResult.QUEUED
        assert seen == [AddResult.DEFERRED]  # not applied inside core.add: after it, on the loop
        assert len(q) == 1
        await turns()
        assert len(q) == 2

        assert await q.get() == "a"
        q.add("a")  # marked: done() re-queues it, and the ordering's append calls back from inside done()
        order.hook = lambda: seen.append(q.done("b"))
        assert q.done("a") is True
        assert seen[-1] is False  # deferred, not applied inside the outer done

        def nested_len() -> None:
            try:
                len(q)
            except RuntimeError as e:
                seen.append(e)

        order.hook = nested_len
        assert q.add_after("c", 0) is AddResult.QUEUED  # its append runs the hook: the nested len() raised
        assert isinstance(seen[-1], RuntimeError)
        assert str(seen[-1]).startswith("len() was called on LoopDelayingQueue's own thread while another of its calls")
        await turns()
        assert sorted([await q.get() for _ in range(len(q))]) == ["a", "b", "c"]

    run(main())


def test_an_async_for_iterator_let_go_of_in_another_thread_finishes_its_key_on_the_loop() -> None:
    async def main() -> None:
        q: aio.LoopQueue[str] = aio.LoopQueue()
        q.add("a")
        it = q.__aiter__()
        assert await it.__anext__() == "a"
        box = [it]
        del it

        def drop() -> None:
            box.clear()  # the last reference: KeyIterator.__del__ runs in this thread

        in_thread(drop)
        assert state(q) == ([], set(), {"a"})  # not touched from the foreign thread
        await turns()
        assert state(q) == ([], set(), set())  # done("a") ran on the loop

    run(main())


# -- waking ---------------------------------------------------------------------------------------------------------


def test_an_add_from_another_thread_wakes_a_waiting_get() -> None:
    async def main() -> None:
        q: aio.LoopQueue[str] = aio.LoopQueue()
        getter = asyncio.create_task(q.get())
        await until_waiting(q)
        assert in_thread(lambda: q.add("a")) is AddResult.DEFERRED
        assert await asyncio.wait_for(getter, 5) == "a"

    run(main(), debug=True)  # debug mode: a loop call from the wrong thread would raise


def test_a_fake_clock_stepped_in_another_thread_wakes_a_getter_for_a_due_key() -> None:
    async def main() -> None:
        clock = FakeClock()
        q: aio.LoopDelayingQueue[str] = aio.LoopDelayingQueue(clock=clock)
        assert q.add_after("a", 5) is AddResult.DELAYED
        getter = asyncio.create_task(q.get())
        await until_waiting(q)
        in_thread(lambda: clock.step(5))
        assert await asyncio.wait_for(getter, 5) == "a"

    run(main(), debug=True)


def test_shut_down_from_another_thread_ends_the_waiting_gets_on_the_loop() -> None:
    async def main() -> None:
        q: aio.LoopQueue[str] = aio.LoopQueue()
        getters = [asyncio.create_task(q.get()) for _ in range(3)]
        await until_waiting(q, 3)
        in_thread(q.shut_down)
        for g in getters:
            with pytest.raises(ShutDown):
                await asyncio.wait_for(g, 5)
        assert q.shutting_down
        assert q.add("a") is AddResult.DROPPED

    run(main(), debug=True)


def test_the_owner_thread_may_use_the_queue_outside_the_loop_run() -> None:
    # Ownership is the thread's: between two runs of the loop, that thread still reaches the core directly.
    loop = asyncio.new_event_loop()
    try:
        async def build() -> aio.LoopQueue[str]:
            return aio.LoopQueue()

        q = loop.run_until_complete(build())
        assert q.add("a") is AddResult.QUEUED
        assert len(q) == 1
        assert loop.run_until_complete(q.get()) == "a"
        assert q.done("a") is False
    finally:
        loop.close()


def test_the_asyncio_controller_runs_on_a_loop_owned_queue_fed_by_another_thread() -> None:
    async def main() -> None:
        q: aio.LoopRateLimitingQueue[str] = aio.LoopRateLimitingQueue()
        keys = [f"default/obj-{i}" for i in range(100)]
        seen: list[str] = []
        all_seen = asyncio.Event()

        async def reconcile(key: str) -> None:
            seen.append(key)
            if len(set(seen)) == len(keys):
                all_seen.set()

        async with aio.Controller(reconcile, q, workers=4):
            results = in_thread(lambda: {q.add(k) for k in keys})  # an informer's thread
            assert results == {AddResult.DEFERRED}
            await asyncio.wait_for(all_seen.wait(), 10)
        assert sorted(set(seen)) == sorted(keys)
        assert q.shutting_down  # the controller's stop shut the queue down, on the loop

    run(main())


def test_a_loop_run_later_in_another_thread_refuses_the_calls_handed_to_it() -> None:
    loop = asyncio.new_event_loop()
    made: list[aio.LoopQueue[str]] = []
    built, release = threading.Event(), threading.Event()

    def owner() -> None:  # builds the queue in the loop, then stays alive (so no other thread gets its id)
        async def build() -> None:
            made.append(aio.LoopQueue())

        loop.run_until_complete(build())
        built.set()
        release.wait(10)

    first = threading.Thread(target=owner)
    first.start()
    try:
        assert built.wait(10)
        (q,) = made
        assert q.add("a") is AddResult.DEFERRED
        errors: list[BaseException | None] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
        in_thread(lambda: loop.run_until_complete(turns()))  # the same loop, now run by another thread
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
        assert "now runs in another thread than the one it was bound in" in str(errors[0])
        assert state(q) == ([], set(), set())  # the core was not touched from the wrong thread
    finally:
        release.set()
        first.join(10)
        loop.close()
