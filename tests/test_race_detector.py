"""The seeds' same-key concurrency detector, at the seeds' size, next to the control that must fail.

16 worker threads, 64 keys, 8 producers, 320,000 adds, each worker holding its key for a GIL-releasing 20 µs
sleep so that holds really overlap. keyqueue must show 0 same-key violations; the identical harness around stdlib
``queue.Queue`` must show violations — if it shows none, the detector proved nothing and this test fails.
"""

from __future__ import annotations

from keyqueue.lab.race import run_race

SEED_SIZE = {"workers": 16, "keys": 64, "producers": 8, "adds": 320_000, "hold": 20e-6}


def test_keyqueue_never_hands_one_key_to_two_workers_and_the_control_does() -> None:
    control = run_race("control", **SEED_SIZE, timeout=60)
    assert control.reconciles == SEED_SIZE["adds"]  # a plain queue runs every event
    assert control.violations > 0, "the control showed no violation: the detector is vacuous at this size"
    assert control.max_in_flight > 1

    result = run_race("keyqueue", **SEED_SIZE, timeout=60)
    assert result.violations == 0
    assert result.adds == SEED_SIZE["adds"]
    assert SEED_SIZE["keys"] <= result.reconciles < result.adds  # adds collapsed, yet no fewer reconciles than keys
    assert result.max_in_flight > 1  # workers really ran in parallel across keys
