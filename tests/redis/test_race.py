"""Several processes on one Redis queue, at full size: 4 worker processes x 4 worker threads, 8 producers,
320,000 adds, a GIL-releasing hold (sleep). No key is ever at two workers at once and nothing is lost, by a detector
that does not trust the queue (O_EXCL marker files, see keyqueue.lab.race_redis); a plain Redis list (the control) must
show violations under the same detector. The control runs 16,000 adds: its one BLPOP per add makes it ~20x slower
per add than the real queue (which collapses duplicate adds), and a few thousand adds already show hundreds of
violations. The lab runs either at any size: ``keyqueue-lab race --backend redis --processes 4 [--control]``."""

from __future__ import annotations

import pytest

from keyqueue.lab.race_redis import run_redis_race

SIZE = {"processes": 4, "workers": 4, "producers": 8, "keys": 64, "hold": 100e-6}


@pytest.mark.timeout(300)  # ~10 s on an idle machine; generous for a loaded CI runner
def test_four_processes_share_320k_adds_without_a_same_key_violation_and_the_control_fails(redis_url: str) -> None:
    result = run_redis_race(redis_url, adds=320_000, **SIZE)  # type: ignore[arg-type]
    assert (result.processes, result.workers, result.producers, result.adds) == (4, 4, 8, 320_000)
    assert result.starts > 64  # every key at least once, most several times
    assert result.violations == 0
    assert result.lost == 0  # every key was started after its last add
    control = run_redis_race(redis_url, control=True, adds=16_000, **SIZE)  # type: ignore[arg-type]
    assert control.starts == 16_000  # a plain list hands out every add
    assert control.violations > 0, "the detector saw no overlap even on a plain list: it proves nothing"
    assert result.as_expected and control.as_expected
