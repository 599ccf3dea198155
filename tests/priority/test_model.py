"""PriorityCore against a plain reference model (hypothesis stateful testing).

The model states controller-runtime's rules directly — a dict of queued keys with (priority, sequence, ready time),
linear scans instead of heaps — so any disagreement is a bug in the heaps, their lazy invalidation or their
compaction (forced here by shrinking the compaction threshold), or in the outcome reported for an add.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import keyqueue._core.delays
import keyqueue._core.ordering
from keyqueue import AddResult, FakeClock
from keyqueue._core import EMPTY, PriorityCore

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
PRIORITIES = st.integers(min_value=-2, max_value=2)
DELAYS = st.sampled_from([0, 0, 1, 2, 3])


@dataclass
class Entry:
    priority: int
    seq: int
    ready_at: int | None  # None: ready


class Model:
    def __init__(self) -> None:
        self.now = 0
        self.seq = 0
        self.queued: dict[str, Entry] = {}
        self.processing: dict[str, int] = {}
        self.shutting_down = False

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def promote(self) -> None:
        due = [(e.ready_at, -e.priority, e.seq, k) for k, e in self.queued.items()
               if e.ready_at is not None and e.ready_at <= self.now]
        for _, _, _, k in sorted(due):
            e = self.queued[k]
            e.ready_at = None
            e.seq = self._next()

    def add(self, key: str, priority: int, delay: int) -> AddResult:
        if self.shutting_down:
            return AddResult.DROPPED
        self.promote()
        busy = key in self.processing
        e = self.queued.get(key)
        if delay <= 0:
            if e is None:
                self.queued[key] = Entry(priority, self._next(), None)
            elif e.ready_at is None:
                if priority <= e.priority:
                    return AddResult.DEDUP
                e.priority, e.seq = priority, self._next()
            else:
                e.priority, e.seq, e.ready_at = max(priority, e.priority), self._next(), None
            return AddResult.MARKED if busy else AddResult.QUEUED
        at = self.now + delay
        if e is None:
            self.queued[key] = Entry(priority, self._next(), at)
            return AddResult.DELAYED
        if e.ready_at is None:
            if priority <= e.priority:
                return AddResult.DEDUP
            e.priority, e.seq = priority, self._next()
            return AddResult.MARKED if busy else AddResult.QUEUED
        raised = priority > e.priority
        if not raised and at >= e.ready_at:
            return AddResult.DELAY_KEPT
        if raised:
            e.priority, e.seq = priority, self._next()
        e.ready_at = min(at, e.ready_at)
        return AddResult.DELAYED

    def pop(self) -> tuple[str, int] | None:
        self.promote()
        ready = [(-e.priority, e.seq, k) for k, e in self.queued.items()
                 if e.ready_at is None and k not in self.processing]
        if not ready:
            return None
        _, _, k = min(ready)
        e = self.queued.pop(k)
        self.processing[k] = e.priority
        return k, e.priority

    def done(self, key: str) -> bool:
        if self.processing.pop(key, None) is None:
            return False
        e = self.queued.get(key)
        return e is not None and e.ready_at is None

    def ready_len(self) -> int:
        self.promote()
        return sum(1 for e in self.queued.values() if e.ready_at is None)

    def shut_down(self) -> None:
        self.shutting_down = True
        self.queued = {k: e for k, e in self.queued.items() if e.ready_at is None}


class PriorityCoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.core: PriorityCore[str] = PriorityCore(self.clock)
        self.model = Model()

    @rule(key=KEYS, priority=PRIORITIES, delay=DELAYS)
    def add(self, key: str, priority: int, delay: int) -> None:
        got = self.core.add_after(key, float(delay), priority)
        assert got == self.model.add(key, priority, delay)

    @rule()
    def pop(self) -> None:
        got = self.core.pop_with_priority()
        want = self.model.pop()
        assert (None if got is EMPTY else got) == want

    @rule(key=KEYS)
    def done(self, key: str) -> None:
        assert self.core.done(key) == self.model.done(key)

    @rule(dt=st.sampled_from([0, 1, 1, 2]))
    def step(self, dt: int) -> None:
        self.clock.step(dt)
        self.model.now += dt

    @rule(key=KEYS, priority=PRIORITIES)
    def add_now(self, key: str, priority: int) -> None:
        got = self.core.add(key, priority=priority)
        assert got == self.model.add(key, priority, 0)

    @rule(roll=st.integers(min_value=0, max_value=29))
    def shut_down(self, roll: int) -> None:
        if roll:  # rare: after shutdown every add is dropped
            return
        self.core.shut_down(drain=False)
        self.model.shut_down()

    @invariant()
    def same_len_and_state(self) -> None:
        assert self.core.ready_len() == self.model.ready_len()
        assert self.core.handed == self.model.processing
        assert len(self.core.delays) == sum(1 for e in self.model.queued.values() if e.ready_at is not None)
        assert self.core.idle() == (self.model.ready_len() == 0 and not self.model.processing)
        for k in "abcde":
            e = self.model.queued.get(k)
            assert self.core.priority_of(k) == (None if e is None else e.priority)


@pytest.fixture
def tiny_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (keyqueue._core.delays, keyqueue._core.ordering):
        monkeypatch.setattr(module, "_SLACK", 2)  # rebuild as soon as half the entries are stale


@pytest.mark.parametrize("compaction", ["default", "tiny"])
def test_core_matches_model(request: pytest.FixtureRequest, compaction: str) -> None:
    if compaction == "tiny":
        request.getfixturevalue("tiny_compaction")
    run_state_machine_as_test(
        PriorityCoreMachine, settings=settings(max_examples=120, stateful_step_count=60, deadline=None)
    )
