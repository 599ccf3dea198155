"""Where controller-runtime's priority rules differ from client-go's, on the same four states.

An ordering decides only which *waiting* key goes next; controller-runtime's priority queue also differs from
client-go's queue outside that: its delayed adds merge into the key's one entry, ``len`` counts keys re-added while
processed, a key that fell due is ready before keys added after its time, and a key re-added while being processed
carries a priority. ``PriorityCore`` states these rules on top of ``QueueCore`` (keyqueue._core.machine). Each test
below runs the same calls, at priority 0 throughout, on the FIFO queue and on the priority queue and shows the
difference: the FIFO answer is client-go's (tests/conformance), the priority answer controller-runtime's
(tests/priority).
"""

from __future__ import annotations

from typing import Any

import keyqueue
from keyqueue import AddResult, FakeClock


def _queues() -> tuple[FakeClock, keyqueue.RateLimitingQueue[str], keyqueue.PriorityQueue[str]]:
    clock = FakeClock()
    return clock, keyqueue.RateLimitingQueue(clock=clock), keyqueue.PriorityQueue(clock=clock)


def _drain(q: Any) -> list[str]:
    out: list[str] = []
    while len(q):
        key = q.get(timeout=0)
        out.append(key)
        q.done(key)
    return out


def test_a_delayed_entry_is_separate_state_in_the_fifo_core_and_merged_in_the_priority_core() -> None:
    """client-go: a plain add does not cancel an ``add_after``, so the key is handed out twice. controller-runtime:
    the delayed add merged into the key's entry, and the immediate add made it ready at once. The delayed entries
    are the core's (a heap beside the four-state machine); no ordering sees them."""
    clock, fifo, prio = _queues()
    for q in (fifo, prio):
        q.add_after("a", 1)
        q.add("a")
    assert _drain(fifo) == _drain(prio) == ["a"]
    clock.step(5)
    assert _drain(fifo) == ["a"]  # the delayed entry fired: a second hand-out
    assert _drain(prio) == []


def test_a_delayed_add_of_a_waiting_key_is_stored_by_one_and_deduplicated_by_the_other() -> None:
    _, fifo, prio = _queues()
    fifo.add("a")
    prio.add("a")
    assert fifo.add_after("a", 10) is AddResult.DELAYED
    assert prio.add_after("a", 10) is AddResult.DEDUP  # a ready key stays ready; nothing is stored


def test_len_counts_a_key_re_added_while_processing_only_in_the_priority_queue() -> None:
    """The FIFO core's ``len`` is its ordering's length; controller-runtime's ``Len`` also counts a re-added key
    that is still being processed, which is not in any ordering until its ``done``."""
    _, fifo, prio = _queues()
    for q in (fifo, prio):
        q.add("a")
        assert q.get(timeout=0) == "a"
        assert q.add("a") is AddResult.MARKED
    assert len(fifo) == 0
    assert len(prio) == 1


def test_a_key_that_fell_due_goes_before_later_adds_only_in_the_priority_queue() -> None:
    """The FIFO core fires due entries when a key is handed out (an add never reads the clock); the priority core
    makes them ready before every add, so a key that fell due is ahead of keys added after its time."""
    clock, fifo, prio = _queues()
    for q in (fifo, prio):
        q.add_after("early", 1)
        q.add("a")
    clock.step(1)
    for q in (fifo, prio):
        q.add("b")
    assert _drain(fifo) == ["a", "b", "early"]
    assert _drain(prio) == ["a", "early", "b"]


def test_a_priority_given_while_the_key_is_processed_is_kept_by_the_priority_core() -> None:
    """A key re-added while being processed is only a set membership in the FIFO core (``dirty``), and client-go's
    ``Touch`` is not called for it: the priority of that add would have to be core state until ``done`` appends
    the key. The priority core keeps it in the key's entry."""
    _, _, prio = _queues()
    prio.add("a")
    assert prio.get(timeout=0) == "a"
    assert prio.add("a", priority=7) is AddResult.MARKED
    prio.add("b", priority=5)
    assert prio.done("a") is True
    assert prio.get_with_priority(timeout=0) == ("a", 7)
