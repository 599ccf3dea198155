"""The lab's Redis commands, end to end through the CLI entry point (small sizes)."""

from __future__ import annotations

import json
from pathlib import Path

from keyqueue.lab.__main__ import main


def test_crash_timeline_shows_the_lease_running_out_and_the_redelivery(redis_url: str, tmp_path: Path,
                                                                       capsys: object) -> None:
    out = tmp_path / "crash.json"
    rc = main(["crash", "--redis-url", redis_url, "--workers", "2", "--keys", "6", "--rounds", "2",
               "--lease", "0.5s", "--work", "20ms", "--json", str(out)])
    text = capsys.readouterr().out  # type: ignore[attr-defined]
    summary = json.loads(out.read_text())
    assert rc == 0, text
    assert summary["ok"] and summary["killed_keys"], summary
    assert summary["redelivered"] == summary["killed_keys"]
    assert summary["expired"] >= len(summary["killed_keys"])
    assert "SIGKILLed while holding" in text and "ran out" in text
    assert "final check: every key was processed after its last add" in text


def test_race_backend_redis_and_its_control(redis_url: str, capsys: object) -> None:
    small = ["race", "--backend", "redis", "--redis-url", redis_url, "--processes", "2", "--workers", "4",
             "--producers", "2", "--adds", "1500", "--keys", "16", "--hold", "200us"]
    assert main(small) == 0
    assert main([*small, "--control"]) == 0  # exit 0 = the control showed violations, as it must
    text = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "same-key violations: 0;" in text
    assert "the detector catches a plain list" in text


def test_run_backend_redis_prints_the_same_stats_line(redis_url: str, capsys: object) -> None:
    rc = main(["run", "--backend", "redis", "--redis-url", redis_url, "--duration", "0.5s", "--rate", "1000",
               "--plain", "--quiet"])
    text = capsys.readouterr().out  # type: ignore[attr-defined]
    assert rc == 0, text
    assert "backend: keyqueue.redis" in text and "[STATS] final" in text
