"""The pipeline benchmark runs end to end (smoke mode: a few triggers, in-memory storage, no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
                 "enqueue → worker Get median (all adds)", "/trigger p50 (etcd fsync on)"):
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


def _phase(concurrency: int, p50_s: float, idle_p50_s: float, ok: bool = True) -> dict[str, Any]:
    def stage(p50: float) -> dict[str, Any]:
        return {"n": 10, "p50": p50, "p95": p50 * 2, "p99": p50 * 3, "max": p50 * 4, "mean": p50, "negative": 0}
    return {"requests": 10, "concurrency": concurrency, "load": {"rps": 500.0, "errors": 0},
            "verification": {"ok": ok}, "cpu_per_trigger_s": {},
            "stages": {"enqueue_to_get": stage(p50_s), "enqueue_to_get_idle": stage(idle_p50_s)}}


def test_benchmark_rows_report_the_pipeline_phases() -> None:
    """``python -m benchmarks``' pipeline rows: one pipeline run, its concurrency-1 phase the baseline, the
    ≤ 300 µs target judged on the concurrency-10 phase (a canned run here; the real one is a full benchmark run)."""
    from benchmarks.bench_pipeline import cases
    from benchmarks.harness import Context, Result, evaluate

    calls: list[Any] = []

    def fake_run(mode: str, args: Any) -> dict[str, Any]:
        calls.append((mode, args.concurrency, args.requests, args.backend, args.trigger_process))
        c10 = 200e-6 if args.trigger_process else 400e-6
        return {"phases": [_phase(1, 100e-6, 90e-6), _phase(10, c10, 250e-6)], "loadavg_after": (1.0, 1.0, 1.0)}

    rows = cases(smoke=False, run=fake_run)
    ctx = Context(smoke=False)
    for case in rows:
        ctx.results[case.id] = Result(case, case.run(ctx))  # type: ignore[arg-type]
    evaluate(ctx.results)
    # one run for the three rows of the seed's arrangement, one with the trigger server in a child process
    assert calls == [("process", 10, 1000, "etcd", False), ("process", 10, 1000, "etcd", True)]
    assert ctx.results["pipeline.get_c1"].median == pytest.approx(100.0)
    get = ctx.results["pipeline.get"]
    assert get.median == pytest.approx(400.0) and get.ratio == pytest.approx(4.0)
    assert get.verdict == "MISS"  # 400 µs > 300 µs
    assert ctx.results["pipeline.get_idle"].median == pytest.approx(250.0)
    tp = ctx.results["pipeline.get_tp"]
    assert tp.median == pytest.approx(200.0) and tp.ratio == pytest.approx(0.5) and tp.verdict == ""  # no target


def test_benchmark_rows_refuse_a_run_that_failed_its_check() -> None:
    from benchmarks.bench_pipeline import cases
    from benchmarks.harness import Context

    def broken(mode: str, args: Any) -> dict[str, Any]:
        return {"phases": [_phase(1, 1e-4, 1e-4), _phase(10, 1e-4, 1e-4, ok=False)], "loadavg_after": (1, 1, 1)}

    first = cases(smoke=False, run=broken)[0]
    with pytest.raises(RuntimeError, match="failed its check"):
        first.run(Context(smoke=False))


def test_benchmark_rows_skip_in_smoke_runs() -> None:
    from benchmarks.bench_pipeline import cases
    from benchmarks.harness import Context, Skip

    def never(mode: str, args: Any) -> dict[str, Any]:
        raise AssertionError("a smoke run must not start the pipeline")

    for case in cases(smoke=True, run=never):
        out = case.run(Context(smoke=True))
        assert isinstance(out, Skip) and "full runs only" in out.reason
