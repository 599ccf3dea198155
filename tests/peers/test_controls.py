"""Controls for the detectors the translated peer cases rely on: each one, fed the fault it looks for, reports it
(so its "nothing found" in the peer cases means something)."""

from __future__ import annotations

from tests.peers.client_go.test_queue import Holders
from tests.peers.kube_rs.test_runner import Runs


def test_holders_reports_a_key_held_twice_at_once() -> None:
    """The overlap detector of the client-go TestBasic / TestAddWhileProcessing translations."""
    holders = Holders()
    holders.take("k")
    holders.take("k")  # a second holder before the first released it
    holders.release("k")
    holders.take("j")
    holders.release("j")
    holders.take("j")  # sequential holds are fine
    assert holders.overlaps == ["k"]


def test_runs_reports_a_key_run_twice_at_once_and_the_concurrency_reached() -> None:
    """The overlap and concurrency counters of the kube-rs runner translations."""
    runs = Runs()
    runs.enter("a")
    runs.enter("b")
    runs.enter("a")
    assert runs.overlap
    assert runs.most == 3
    for key in ("a", "b", "a"):
        runs.leave(key)
    assert runs.now == 0
    assert runs.total() == 3
