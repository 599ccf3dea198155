"""``keyqueue-lab failover``: three replica processes, SIGKILL of the leader, and the no-leader-election control."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("kubernetes")

LD, RP = 2.0, 0.5


@pytest.mark.etcd
def test_failover_loses_nothing_and_never_two_reconcile(lab: Callable[..., tuple[int, dict[str, Any]]]) -> None:
    status, s = lab("failover", "--duration", "4", "--kill-at", "1.5", "--rate", "80")
    assert status == 0, s
    assert s["ok"] and s["lost"] == 0 and s["overlaps"] == 0
    assert s["killed"] is not None and s["new_leader"] not in (None, s["killed"])
    assert s["reconciles_after_kill"].get(s["killed"], 0) == 0
    assert s["reconciles_after_kill"][s["new_leader"]] > 0
    # the standby waits a lease duration from when it last saw the record change, plus up to a retry period
    assert LD - RP - 0.1 <= s["no_leader_gap_s"] <= LD + 2 * RP + 0.5
    ends = [t["ended_by"] for t in s["terms"]]
    assert ends[0] == "killed" and s["terms"][0]["who"] == s["killed"]


def test_control_without_leader_election_fails_the_overlap_check(
    lab: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    status, s = lab("failover", "--control", "--replicas", "2", "--backend", "memory", "--duration", "1.5",
                    "--kill-at", "0.5", "--rate", "80")
    assert status == 1
    assert s["overlaps"] > 0 and not s["checks"]["never two replicas reconciling at once"]
    assert s["lost"] == 0


def test_failover_of_manager_replicas(lab: Callable[..., tuple[int, dict[str, Any]]]) -> None:
    status, s = lab("failover", "--manager", "--backend", "memory", "--duration", "2.5", "--kill-at", "0.8",
                    "--rate", "80")
    assert status == 0, s
    assert s["manager"] and s["ok"] and s["lost"] == 0 and s["overlaps"] == 0
    assert s["killed"] is not None and s["new_leader"] not in (None, s["killed"])
    assert s["reconciles_after_kill"].get(s["killed"], 0) == 0
    assert s["reconciles_after_kill"][s["new_leader"]] > 0

