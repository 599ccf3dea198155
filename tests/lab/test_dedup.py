from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keyqueue.lab.dedup import run_dedup

Lab = Callable[..., tuple[int, dict[str, Any]]]


def test_dedup_facts_from_json(lab: Lab) -> None:
    status, s = lab("dedup")
    assert status == 0
    assert s["part_a_adds"] == 100_000
    assert s["part_a_len"] == 1
    assert s["part_a_outcomes"] == {"DEDUP": 99_999, "QUEUED": 1}
    assert s["part_b_len_while_held"] == 0
    assert s["part_b_len_seen_by_worker"] == 0
    assert s["part_b_done_redelivered"] is True
    assert s["part_b_len_after_done"] == 1
    assert s["part_b_extra_reconciles"] == 1
    assert s["part_b_outcomes"] == {"DEDUP": 199, "MARKED": 1}
    # The queue's own counters agree: one hand-out to the holder, one redelivery, one more hand-out.
    assert s["part_b_stats"]["gets"] == 2
    assert s["part_b_stats"]["redelivered"] == 1
    assert all(fact["held"] for fact in s["facts"])


def test_dedup_fails_loudly_when_a_fact_does_not_hold() -> None:
    # With no adds while held there is no redelivery: the fact check must notice (exit status 1 in the CLI).
    result = run_dedup(adds_a=10, adds_b=0)
    assert result.part_b_extra_reconciles == 0
    assert not result.ok


def test_dedup_cli_exits_1_when_a_fact_does_not_hold(lab: Lab) -> None:
    status, s = lab("dedup", "--adds-a", "10", "--adds-b", "0")
    assert status == 1
    assert s["ok"] is False
    assert [fact["held"] for fact in s["facts"]] == [True, True, True, False, False, False]


def test_dedup_cli_rejects_negative_sizes(lab: Lab) -> None:
    status, s = lab("dedup", "--adds-a", "-1")
    assert status == 2 and s == {}
