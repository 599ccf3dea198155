"""The API server benchmark runs (smoke mode: a few iterations, no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.etcd
def test_bench_apiserver_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_apiserver.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"storage txn", "http floor", "update", "patch", "write->watch"}
    assert all(r["n"] == 20 and r["median_ms"] > 0 for r in report["results"].values())
    # CPU per operation: the measuring thread always; the server's threads for every row through HTTP
    assert all(r["client_cpu_us"] > 0 for r in report["results"].values())
    assert all(r["server_cpu_us"] > 0 for name, r in report["results"].items() if name != "storage txn")
    assert "etcd_cpu_us" in report["results"]["update"]


@pytest.mark.etcd
def test_ab_apiserver_runs_two_sides() -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "ab_apiserver.py"), "--rounds", "1", "--chunk", "5",
           f"a={sys.executable}", f"b={sys.executable}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:3]] == ["a", "b"]
    assert "API server CPU/op" in lines[1] and lines[-1].startswith("ratio b/a: API server CPU ")
