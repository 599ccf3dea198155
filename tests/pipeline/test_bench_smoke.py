"""The pipeline benchmark runs end to end (smoke mode: a few triggers, in-memory storage, no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

ROOT = Path(__file__).resolve().parents[2]


def test_bench_pipeline_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_pipeline.py"), "--smoke",
                           "--backend", "memory", "--modes", "inprocess", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("/trigger p50", "/trigger p99", "informer → enqueue median", "enqueue → worker Get median",
                 "enqueue → worker Get median (issue 18)"):
        assert f"target {name}" in proc.stdout
    assert "trigger loop thread on a core meanwhile" in proc.stdout  # the idle-worker gap, split up
    assert "CPU per trigger in the pipeline's threads:" in proc.stdout
    report = json.loads(out.read_text())
    (mode,) = report["results"]
    (phase,) = mode["phases"]
    assert phase["verification"]["ok"] and phase["load"]["errors"] == 0
    assert phase["load"]["requests"] == 20
    for stage in ("api_write", "write_to_informer", "enqueue_to_get", "queue_add", "queue_done", "reconcile"):
        assert phase["stages"][stage]["n"] > 0, stage
    assert {t["stage"] for t in report["targets"]} <= set(phase["stages"])
    threads = phase["thread_cpu_per_trigger_s"]
    assert threads["trigger loop"] > 0 and threads["informer"] > 0 and threads["workers"] > 0
    assert "watch line decode" in proc.stdout
    assert set(report["decode_microbench"]) == {"json_loads_s", "watch_unmarshal_event_s"}
    assert all(v > 0 for v in report["decode_microbench"].values())
