"""Several processes on one Redis queue: no key at two workers at once, nothing lost; a plain Redis list (the
control) must show violations under the same detector. The full-size run (4 x 4 workers, 8 producers, 320,000
adds) is ``keyqueue-lab race --backend redis --processes 4``; this is a smaller one for the suite."""

from __future__ import annotations

from keyqueue.redis.race import run_redis_race


def test_processes_share_keys_without_a_same_key_violation_and_the_control_fails(redis_url: str) -> None:
    kwargs = {"processes": 2, "workers": 3, "producers": 4, "adds": 6_000, "keys": 32, "hold": 200e-6}
    result = run_redis_race(redis_url, **kwargs)  # type: ignore[arg-type]
    assert result.starts > 0
    assert result.violations == 0
    assert result.lost == 0  # every key was started after its last add
    control = run_redis_race(redis_url, control=True, **kwargs)  # type: ignore[arg-type]
    assert control.violations > 0, "the detector saw no overlap even on a plain list: it proves nothing"
    assert result.as_expected and control.as_expected
