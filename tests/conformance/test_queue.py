"""Conformance: the plain queue, written from client-go's documented behaviour (doc.go, queue.go) and the seeds."""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from typing import Any

import pytest

from keyqueue import AddResult, FakeClock, ItemFastSlowRateLimiter, ShutDown
from tests.shells import Key, wait_for_getters


def test_fifo_order(make_queue: Any) -> None:
    q = make_queue()
    for k in ["a", "b", "c"]:
        assert q.add(k) == AddResult.QUEUED
    assert [q.get(timeout=1) for _ in range(3)] == ["a", "b", "c"]


def test_waiting_key_is_deduplicated(make_queue: Any) -> None:
    q = make_queue()
    assert q.add("a") == AddResult.QUEUED
    assert q.add("b") == AddResult.QUEUED
    assert q.add("a") == AddResult.DEDUP
    assert len(q) == 2
    assert q.get(timeout=1) == "a"
    assert q.get(timeout=1) == "b"
    assert len(q) == 0


def test_seed_part_a_100000_adds_one_entry(make_queue: Any) -> None:
    q = make_queue()
    for _ in range(100_000):
        q.add("default/target")
    assert len(q) == 1


def test_seed_part_b_200_adds_while_held_one_redelivery(make_queue: Any) -> None:
    q = make_queue()
    q.add("default/target")
    key = q.get(timeout=1)
    outcomes = [q.add(key) for _ in range(200)]
    assert outcomes[0] == AddResult.MARKED
    assert set(outcomes[1:]) == {AddResult.DEDUP}
    assert len(q) == 0  # the adds went to dirty, not to the fifo
    assert q.done(key) is True  # re-queued, once
    assert len(q) == 1
    assert q.get(timeout=1) == key
    assert q.done(key) is False
    assert len(q) == 0
    with pytest.raises(TimeoutError):
        q.get(timeout=0.01)  # exactly one redelivery


def test_len_excludes_processing_and_marked(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.add("b")
    a = q.get(timeout=1)
    assert len(q) == 1
    q.add(a)
    assert len(q) == 1  # a is processing + dirty: not counted until done
    q.done(a)
    assert len(q) == 2


def test_redelivery_goes_to_the_fifo_tail(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    q.add(a)
    q.add("b")
    q.done(a)
    assert [q.get(timeout=1), q.get(timeout=1)] == ["b", "a"]


def test_spurious_done_changes_nothing(make_queue: Any) -> None:
    # client-go pushes a duplicate here and two workers can then get the same key; we do not.
    q = make_queue()
    q.add("a")
    assert q.done("a") is False  # queued, not processing
    assert len(q) == 1
    assert q.get(timeout=1) == "a"
    with pytest.raises(TimeoutError):
        q.get(timeout=0.01)
    assert q.done("never-seen") is False
    assert q.done("a") is False
    assert q.done("a") is False  # a second done of the same key is a no-op too
    assert len(q) == 0


def test_get_blocks_until_an_add(make_queue: Any) -> None:
    q = make_queue()
    got: list[str] = []
    started = threading.Event()

    def worker() -> None:
        started.set()
        got.append(q.get(timeout=5))

    t = threading.Thread(target=worker)
    t.start()
    started.wait(1)
    wait_for_getters(q)  # it blocks: nothing is queued
    assert got == []
    q.add("x")
    t.join(5)
    assert got == ["x"]


def test_many_getters_each_get_one_key(make_queue: Any) -> None:
    q = make_queue()
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        k = q.get(timeout=5)
        with lock:
            results.append(k)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    wait_for_getters(q, 8)  # every add must wake a blocked getter (a lost wake-up leaves one asleep)
    for i in range(8):
        q.add(f"k{i}")
    for t in threads:
        t.join(5)
    assert sorted(results) == sorted(f"k{i}" for i in range(8))


def test_get_timeout(make_queue: Any) -> None:
    q = make_queue()
    with pytest.raises(TimeoutError):
        q.get(timeout=0.01)
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    with pytest.raises(ValueError):
        q.get(timeout=float("nan"))
    with pytest.raises(TypeError, match="str"):
        q.get(timeout="1")
    q.add("a")
    assert q.get(timeout=0) == "a"


def test_shut_down_drops_adds_and_hands_out_the_rest(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.add("b")
    assert not q.shutting_down
    q.shut_down()
    assert q.shutting_down
    assert q.add("c") == AddResult.DROPPED
    assert len(q) == 2
    assert q.get(timeout=1) == "a"
    assert q.get(timeout=1) == "b"
    with pytest.raises(ShutDown):
        q.get(timeout=1)
    q.shut_down()  # idempotent
    with pytest.raises(ShutDown):
        q.get()


def test_shut_down_wakes_blocked_getters(make_queue: Any) -> None:
    q = make_queue()
    outcomes: list[str] = []
    lock = threading.Lock()
    ready = threading.Barrier(5)

    def worker() -> None:
        ready.wait(2)
        try:
            q.get(timeout=10)
            result = "item"
        except ShutDown:
            result = "shutdown"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    ready.wait(2)
    wait_for_getters(q, 4)  # all four really block before the shutdown
    q.shut_down()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert outcomes == ["shutdown"] * 4


def test_done_after_shut_down_requeues_a_dirty_key(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    q.add(a)
    q.shut_down()
    assert q.done(a) is True
    assert q.get(timeout=1) == "a"
    q.done(a)
    with pytest.raises(ShutDown):
        q.get(timeout=1)


def test_unhashable_item_is_rejected_and_queue_unchanged(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    with pytest.raises(TypeError, match="list"):
        q.add(["not", "hashable"])
    with pytest.raises(TypeError, match="dict"):
        q.add({"a": 1})
    assert len(q) == 1
    assert q.get(timeout=1) == "a"


def test_any_hashable_key_works(make_queue: Any) -> None:
    q = make_queue()
    keys: list[Any] = [None, 0, ("ns", "name"), frozenset({1}), b"x"]
    for k in keys:
        q.add(k)
    assert [q.get(timeout=1) for _ in keys] == keys


def test_no_reference_kept_after_done(make_queue: Any) -> None:
    q = make_queue()
    key = Key("a")
    ref = weakref.ref(key)
    q.add(key)
    got = q.get(timeout=1)
    q.add(got)  # re-added while processing
    q.done(got)
    got = q.get(timeout=1)
    q.done(got)
    del key, got
    gc.collect()
    assert ref() is None


def test_lease_calls_done_even_on_error(make_queue: Any) -> None:
    q = make_queue()
    if not hasattr(q, "lease"):
        pytest.skip("facade has no lease()")
    q.add("a")
    with pytest.raises(RuntimeError), q.lease(timeout=1) as key:
        assert key == "a"
        q.add(key)  # re-added while held
        raise RuntimeError("reconcile failed")
    assert len(q) == 1  # done ran: the re-add is queued again
    with q.lease(timeout=1) as key:
        assert key == "a"
    assert len(q) == 0


def test_iteration_calls_done_and_ends_at_shutdown(make_queue: Any) -> None:
    q = make_queue()
    if not hasattr(q, "__iter__"):
        pytest.skip("facade is not iterable")
    for k in ["a", "b", "c"]:
        q.add(k)
    q.shut_down()
    seen = []
    for key in q:
        seen.append(key)
    assert seen == ["a", "b", "c"]
    assert q.done("a") is False  # already done by the iterator


def test_leaving_the_loop_finishes_the_key_at_once(make_queue: Any) -> None:
    """break, return or an exception in the loop body: the key is done as the loop lets go of its iterator, with no
    garbage collection (a re-add made in the body is queued again at once). Fails for an iterator that is only
    finished when collected, such as a compiled generator."""
    q = make_queue()
    if not hasattr(q, "__iter__"):
        pytest.skip("facade is not iterable")

    def leave(how: str) -> None:
        for key in q:
            q.add(key)  # re-added while held: done() must queue it again
            if how == "break":
                break
            if how == "return":
                return
            raise RuntimeError("reconcile failed")

    q.add("a")
    gc.disable()
    try:
        for how in ("break", "return", "raise"):
            with contextlib.suppress(RuntimeError):
                leave(how)
            assert len(q) == 1, how
    finally:
        gc.enable()


def test_unhashable_item_is_rejected_after_shutdown_too(make_queue: Any) -> None:
    q = make_queue()
    q.shut_down()
    with pytest.raises(TypeError, match="list"):
        q.add(["a"])  # bad input is reported, not silently dropped with the other adds


def test_constructor_options_are_keyword_only_and_checked(shell: str, make_queue: Any) -> None:
    for kind in ("queue", "delaying"):
        with pytest.raises(TypeError):
            make_queue(kind, "positional-name")
        with pytest.raises(TypeError, match="name"):
            make_queue(kind, name=42)
    clock = FakeClock()
    q = make_queue("ratelimiting", ItemFastSlowRateLimiter(1.0, 2.0, 1), name="configmaps", clock=clock)
    assert q.name == "configmaps"
    assert q.clock is clock
    with pytest.raises(TypeError):
        make_queue("ratelimiting", None, "positional-name")



def test_add_after_shutdown_changes_nothing_whatever_the_key_state(make_queue: Any) -> None:
    # Documented: after shutdown an add never changes anything; for a key that is still dirty the lock-free probe
    # may answer DEDUP instead of DROPPED (both no-ops). A stats=True queue has no lock-free path: always DROPPED.
    for stats in (False, True):
        q = make_queue(stats=stats)
        q.add("a")
        a = q.get(timeout=1)
        q.add("b")  # waiting
        q.add(a)  # processing + dirty
        q.shut_down()
        outcomes = [q.add("b"), q.add(a), q.add("new")]
        assert outcomes[2] == AddResult.DROPPED
        if stats:
            assert outcomes == [AddResult.DROPPED] * 3
        else:
            assert set(outcomes[:2]) <= {AddResult.DEDUP, AddResult.DROPPED}
        assert len(q) == 1  # only "b"
        assert q.done(a) is True  # the re-add from before the shutdown is still honoured, once
        assert [q.get(timeout=1), q.get(timeout=1)] == ["b", "a"]
        with pytest.raises(ShutDown):
            q.get(timeout=1)
