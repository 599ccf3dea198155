"""keyqueue.lab.replay: the pipeline's adds replayed on instant workers (the part of enqueue → Get set by bursts)."""

from __future__ import annotations

import pytest

from keyqueue.lab.replay import replay

MS = 1_000_000


def test_a_burst_wider_than_the_workers_waits_for_a_reconcile() -> None:
    burst = [(0, f"k{i}") for i in range(6)]
    assert replay(burst, 4, 2 * MS) == [0, 0, 0, 0, 2 * MS, 2 * MS]
    # Control: the same six keys spread out by more than a reconcile never wait.
    spread = [(i * 3 * MS, f"k{i}") for i in range(6)]
    assert replay(spread, 4, 2 * MS) == [0] * 6
    assert replay(burst, 6, 2 * MS) == [0] * 6  # and six workers take the burst at once


def test_the_queues_rules_apply_dedup_and_requeue_while_processing() -> None:
    # k0 and k1 are taken at once by the two workers; k2 waits for the first done (at 1 ms). The second add of k2,
    # made while it waits, is a dedup (one wait counted); the add of k0 at 0.5 ms, made while a worker holds it, is
    # marked: k0 is handed out once more at its done, behind k2, and that hand-out is not counted as an add's wait.
    adds = [(0, "k0"), (0, "k1"), (0, "k2"), (100, "k2"), (MS // 2, "k0"), (MS + 10, "k3")]
    waits = replay(adds, 2, MS)
    assert waits == [0, 0, MS, 2 * MS - (MS + 10)]  # k0, k1, k2, then k3 behind the requeued k0


def test_busy_times_are_used_in_turn() -> None:
    adds = [(0, "a"), (0, "b"), (0, "c")]
    # a gets 5 ms and b 1 ms: c goes to b's worker at 1 ms.
    assert replay(adds, 2, [5 * MS, 1 * MS]) == [0, 0, MS]
    assert replay(list(reversed(adds)), 2, [5 * MS, 1 * MS]) == [0, 0, MS]  # sorted by time, ties kept in order
    assert replay([], 4, MS) == []


@pytest.mark.parametrize(("workers", "busy"), [(0, MS), (1.5, MS), (4, []), (4, -1), (4, [MS, -1])])
def test_bad_arguments_are_refused(workers: object, busy: object) -> None:
    with pytest.raises(ValueError, match=r"workers|busy_ns"):
        replay([(0, "a")], workers, busy)  # type: ignore[arg-type]
