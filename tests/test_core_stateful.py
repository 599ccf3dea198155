"""Hypothesis drives the core state machine with random operations and compares it with a tiny model.

The model knows only the four states of a key (absent, waiting, processing, processing + dirty), the FIFO order,
the delayed entries (earliest wins) and the shutdown flag. Anything the core does that the model does not predict
fails the test.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from keyqueue._core import EMPTY, AddResult, QueueCore
from keyqueue._core.delays import _GONE
from keyqueue.clock import FakeClock, seconds_to_ns

KEYS = st.sampled_from(["a", "b", "c", "d"])
DELAYS = st.sampled_from([-1.0, 0.0, 0.001, 0.5, 1.0, 2.5])

ABSENT, WAITING, PROCESSING, PROCESSING_DIRTY = "absent", "waiting", "processing", "processing+dirty"


class CoreVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.core: QueueCore[str] = QueueCore(self.clock)
        self.state: dict[str, str] = {}
        self.fifo: list[str] = []
        self.delayed: dict[str, tuple[int, int]] = {}  # key -> (ready_ns, seq)
        self.seq = 0
        self.shut = False

    # -- the model ------------------------------------------------------------------------------------------

    def model_add(self, key: str) -> AddResult:
        if self.shut:
            return AddResult.DROPPED
        s = self.state.get(key, ABSENT)
        if s in (WAITING, PROCESSING_DIRTY):
            return AddResult.DEDUP
        if s == PROCESSING:
            self.state[key] = PROCESSING_DIRTY
            return AddResult.MARKED
        self.state[key] = WAITING
        self.fifo.append(key)
        return AddResult.QUEUED

    def model_fire_due(self) -> None:
        now = self.clock.now_ns()
        due = sorted((v, k) for k, v in self.delayed.items() if v[0] <= now)
        for _, key in due:
            del self.delayed[key]
            self.model_add(key)

    # -- rules ----------------------------------------------------------------------------------------------

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        assert self.core.add(key) == self.model_add(key)

    @rule(key=KEYS, delay=DELAYS)
    def add_after(self, key: str, delay: float) -> None:
        got = self.core.add_after(key, delay)
        if self.shut:
            expected = AddResult.DROPPED
        elif delay <= 0:
            expected = self.model_add(key)
        else:
            ready = self.clock.now_ns() + seconds_to_ns(delay)
            live = self.delayed.get(key)
            if live is not None and live[0] <= ready:
                expected = AddResult.DELAY_KEPT
            else:
                self.seq += 1
                self.delayed[key] = (ready, self.seq)
                expected = AddResult.DELAYED
        assert got == expected

    @rule()
    def pop(self) -> None:
        self.model_fire_due()
        got = self.core.pop()
        if not self.fifo:
            assert got is EMPTY
            return
        key = self.fifo.pop(0)
        assert got == key
        self.state[key] = PROCESSING

    @rule(key=KEYS)
    def done(self, key: str) -> None:
        s = self.state.get(key, ABSENT)
        requeued = self.core.done(key)
        if s == PROCESSING:
            del self.state[key]
            assert requeued is False
        elif s == PROCESSING_DIRTY:
            self.state[key] = WAITING
            self.fifo.append(key)
            assert requeued is True
        else:
            assert requeued is False  # spurious done: nothing changes

    @rule(seconds=st.sampled_from([0.0, 0.001, 0.499, 0.5, 1.0, 3.0]))
    def step(self, seconds: float) -> None:
        self.clock.step(seconds)

    @precondition(lambda self: not self.shut)
    @rule(drain=st.booleans())
    def shut_down(self, drain: bool) -> None:
        self.core.shut_down(drain)
        self.shut = True
        self.delayed.clear()

    # -- invariants -----------------------------------------------------------------------------------------

    @invariant()
    def same_observable_state(self) -> None:
        self.model_fire_due()
        assert self.core.ready_len() == len(self.fifo)
        assert list(self.core.ordering) == self.fifo
        waiting = {k for k, s in self.state.items() if s == WAITING}
        dirty = waiting | {k for k, s in self.state.items() if s == PROCESSING_DIRTY}
        processing = {k for k, s in self.state.items() if s in (PROCESSING, PROCESSING_DIRTY)}
        assert self.core.dirty == dirty
        assert self.core.processing.keys() == processing
        assert len(self.core.delays) == len(self.delayed)
        nxt = self.core.next_ready_ns()
        assert nxt == (min(v[0] for v in self.delayed.values()) if self.delayed else None)
        # client-go's invariant: every fifo entry is dirty and not processing, and appears once
        assert len(set(self.fifo)) == len(self.fifo)
        assert self.core.idle() == (not self.fifo and not processing)
        # No reference to a key the model no longer knows: the delayed heap holds only live entries' keys
        # (superseded slots let go of theirs), so a finished key that is not delayed is referenced nowhere.
        delays = self.core.delays
        heap_keys = {e[3] for e in [*delays._run, *delays._heap] if e[3] is not _GONE}
        assert heap_keys == set(self.delayed)
        assert set(delays.live) == set(self.delayed)


class CountingCoreVsModel(CoreVsModel):
    """The counting core must make exactly the same decisions, and its counters must add up."""

    def __init__(self) -> None:
        super().__init__()
        self.core = QueueCore(self.clock, stats=True)

    @invariant()
    def counters_add_up(self) -> None:
        s = self.core.stats()
        assert s is not None
        assert s.adds == s.queued + s.deduplicated + s.marked + s.dropped
        assert s.gets - s.dones == len(self.core.processing)


TestCoreVsModel = CoreVsModel.TestCase
TestCoreVsModel.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestCountingCoreVsModel = CountingCoreVsModel.TestCase
TestCountingCoreVsModel.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)


def test_model_catches_a_broken_core() -> None:
    """Control: the same machine must fail against a core with client-go's spurious-done bug."""

    class SpuriousDoneCore(QueueCore[str]):
        def done(self, item: str) -> bool:
            self.processing.pop(item, None)
            if item in self.dirty:
                self.ordering.append(item)
                return True
            return False

    class Broken(CoreVsModel):
        def __init__(self) -> None:
            super().__init__()
            self.core = SpuriousDoneCore(self.clock)

    failed: list[Any] = []
    try:
        Broken.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None, database=None)
        Broken.TestCase().runTest()
    except AssertionError as e:
        failed.append(e)
    assert failed, "the model did not notice a core that re-queues on spurious done()"


def test_heap_of_superseded_entries_stays_bounded_and_correct() -> None:
    """Many ``add_after`` calls that move one key earlier: the heap is rebuilt instead of growing without bound,
    the earliest entry still wins, and other keys' entries keep their order (the model test never gets past the
    rebuild threshold with its four keys)."""
    clock = FakeClock()
    core: QueueCore[str] = QueueCore(clock)
    assert core.add_after("far", 10_000.0) == AddResult.DELAYED
    assert core.add_after("mid", 600.0) == AddResult.DELAYED
    for i in range(1000):
        assert core.add_after("a", 1000.0 - i) == AddResult.DELAYED  # each call moves "a" 1 s earlier
        assert len(core.delays._run) + len(core.delays._heap) <= 2 * len(core.delays) + 65
    assert core.add_after("a", 5.0) == AddResult.DELAY_KEPT  # 1.0 s is earlier
    assert len(core.delays) == 3
    assert core.next_ready_ns() == seconds_to_ns(1.0)
    clock.step(1.0)
    assert core.pop() == "a"
    assert core.next_ready_ns() == seconds_to_ns(600.0)
    clock.step(10_000.0)
    assert [core.pop(), core.pop(), core.pop()] == ["mid", "far", EMPTY]
    assert len(core.delays) == 0 and core.next_ready_ns() is None


def test_superseded_entry_behind_a_live_one_lets_go_of_its_key() -> None:
    """The case the model's reference invariant is about, spelled out: ``a`` moved from 2.5 s to 1 s leaves a
    slot at 2.5 s behind ``b``'s live entry at 2 s; after ``a`` fired and was done, nothing may refer to ``a``."""

    class Key:
        def __hash__(self) -> int:
            return 1

    clock = FakeClock()
    core: QueueCore[object] = QueueCore(clock)
    a = Key()
    ref = weakref.ref(a)
    core.add_after(a, 2.5)
    core.add_after("b", 2.0)
    assert core.add_after(a, 1.0) == AddResult.DELAYED
    clock.step(1.0)
    assert core.pop() is a
    assert core.done(a) is False
    assert core.next_ready_ns() == seconds_to_ns(2.0)  # b's live entry is at the head; a's old slot is behind it
    del a
    gc.collect()
    assert ref() is None
