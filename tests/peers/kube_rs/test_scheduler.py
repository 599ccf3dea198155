"""kube-rs ``kube-runtime/src/scheduler.rs`` (``mod tests``), translated case by case onto keyqueue's delaying
queue, on both in-process shells.

kube-rs's scheduler is a stream that delays and deduplicates ``ScheduleRequest { message, run_at }``; a request is
``add_after(message, run_at - now)`` here, "emitted" is a ``get`` (followed by ``done``: the runner finished it),
and tokio's paused clock (``advance``) is a ``FakeClock``. ``hold_unless`` — a message that is due but held back
while the runner is still busy with the same message — is keyqueue's processing set: a key added while it is
being processed waits, and is handed out once its holder is ``done``. kube-rs's two debounce cases
(``debounced_scheduler``) have no keyqueue counterpart and are left out (``tests/peers/README.md``).
"""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue import AddResult, FakeClock


def _queue(make_queue: Any) -> tuple[Any, FakeClock]:
    clock = FakeClock()
    return make_queue("delaying", clock=clock), clock


def _nothing_ready(q: Any) -> None:
    """The stream is "pending": no message can be taken now."""
    assert len(q) == 0
    with pytest.raises(TimeoutError):
        q.get(timeout=0)


class Singleton:
    """kube-rs's ``SingletonMessage``: every instance equal to every other (same hash), carrying a version."""

    def __init__(self, version: int) -> None:
        self.version = version

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Singleton)


def test_scheduler_should_hold_and_release_items(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_should_hold_and_release_items: a due message that is held (its key is still
    being run) is kept, not emitted; once released it is emitted, and then the stream has nothing more."""
    q, _ = _queue(make_queue)
    q.add(1)
    assert q.get(timeout=5) == 1  # the runner is busy with message 1
    assert q.add(1) == AddResult.MARKED  # due again: held, not lost
    _nothing_ready(q)
    q.done(1)  # released
    assert q.get(timeout=5) == 1
    q.done(1)
    _nothing_ready(q)


def test_scheduler_should_not_reschedule_pending_items(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_should_not_reschedule_pending_items: a second request for a message that is
    already held pending is merged into it: the message is emitted once, then the stream ends."""
    q, _ = _queue(make_queue)
    q.add(1)
    assert q.get(timeout=5) == 1
    q.add(1)  # held pending
    q.add(1)  # the same message again while pending
    q.done(1)
    assert q.get(timeout=5) == 1
    q.done(1)
    _nothing_ready(q)


def test_scheduler_pending_message_should_not_block_head_of_line(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_pending_message_should_not_block_head_of_line: a held message 1 ahead in line
    does not keep message 2 from being emitted."""
    q, _ = _queue(make_queue)
    q.add(1)
    assert q.get(timeout=5) == 1
    q.add(1)  # held: 1 is due first but its key is busy
    q.add(2)
    assert q.get(timeout=5) == 2


def test_scheduler_should_emit_items_as_requested(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_should_emit_items_as_requested: messages due at 1 s and 3 s come out one after
    each 2 s advance, each only once due; then nothing is left."""
    q, clock = _queue(make_queue)
    q.add_after(1, 1)
    q.add_after(2, 3)
    _nothing_ready(q)
    clock.step(2)
    assert q.get(timeout=0) == 1
    q.done(1)
    _nothing_ready(q)
    clock.step(2)
    assert q.get(timeout=0) == 2
    q.done(2)
    clock.step(10)
    _nothing_ready(q)


def test_scheduler_dedupe_should_keep_earlier_item(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_dedupe_should_keep_earlier_item: requests for one message at 1 s and then 3 s
    give one emission at 1 s and none at 3 s."""
    q, clock = _queue(make_queue)
    q.add_after((), 1)
    q.add_after((), 3)
    _nothing_ready(q)
    clock.step(2)
    q.done(q.get(timeout=0))
    clock.step(3)
    _nothing_ready(q)


def test_scheduler_dedupe_should_replace_later_item(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_dedupe_should_replace_later_item: requests at 3 s and then 1 s: the earlier
    replaces the later, one emission at 1 s and none at 3 s."""
    q, clock = _queue(make_queue)
    q.add_after((), 3)
    q.add_after((), 1)
    _nothing_ready(q)
    clock.step(2)
    q.done(q.get(timeout=0))
    clock.step(3)
    _nothing_ready(q)


def test_scheduler_dedupe_should_allow_rescheduling_emitted_item(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_dedupe_should_allow_rescheduling_emitted_item: once emitted, the same message
    can be scheduled again and is emitted again when due."""
    q, clock = _queue(make_queue)
    q.add_after((), 1)
    _nothing_ready(q)
    clock.step(2)
    q.done(q.get(timeout=0))
    _nothing_ready(q)
    q.add_after((), 1)
    _nothing_ready(q)
    clock.step(2)
    q.done(q.get(timeout=0))
    _nothing_ready(q)


def test_scheduler_should_overwrite_message_with_soonest_version(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_should_overwrite_message_with_soonest_version: of two equal messages, version
    1 due at 2 s and version 2 due at 1 s, only one is emitted and it is the soonest one's object (version 2)."""
    q, clock = _queue(make_queue)
    q.add_after(Singleton(1), 2)
    q.add_after(Singleton(2), 1)
    clock.step(5)
    got = q.get(timeout=0)
    assert got.version == 2
    q.done(got)
    _nothing_ready(q)


def test_scheduler_should_not_overwrite_message_with_later_version(make_queue: Any) -> None:
    """kube-rs scheduler.rs scheduler_should_not_overwrite_message_with_later_version: version 1 due at 1 s and
    version 2 due at 2 s: one emission, of version 1."""
    q, clock = _queue(make_queue)
    q.add_after(Singleton(1), 1)
    q.add_after(Singleton(2), 2)
    clock.step(5)
    got = q.get(timeout=0)
    assert got.version == 1
    q.done(got)
    _nothing_ready(q)
