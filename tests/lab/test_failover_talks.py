"""``keyqueue-lab failover`` says what happens as it happens, names every replica, and stops clean on Ctrl-C."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from keyqueue.lab.common import EXIT_INTERRUPTED

from .ptys import interrupt_after

pytest.importorskip("kubernetes")


@pytest.mark.timeout(150)
def test_progress_as_it_happens_and_every_replica_in_the_report() -> None:
    # A rate no API server reaches: the load sends fewer writes than asked for, and must say so.
    proc = subprocess.run([sys.executable, "-m", "keyqueue.lab", "failover", "--backend", "memory", "--duration",
                           "2s", "--kill-at", "1s", "--rate", "100000"],
                          capture_output=True, text=True, timeout=140, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = out.splitlines()

    def first(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert found, (pattern, out)
        return found[0]

    started = [first(r"^failover: API server on "), *(first(rf"^failover: replica-{i} is up") for i in (1, 2, 3))]
    assert started[0] < min(started[1:]), out
    load, kill, report = (first(r"^failover: load: "), first(r"^failover: SIGKILL replica-\d \(the leader\)"),
                          first(r"^failover: 3 replicas"))
    assert max(started) < load < kill < report, out
    assert first(r"^failover: replica-\d leads$") < load, out
    assert kill < first(r"^failover: replica-\d leads \(\S+ after the kill\)") < report, out
    assert kill < first(r"^failover: load sent: [\d,]+ writes of the 200,000 asked for") < report, out
    assert re.search(r"^failover: 3 replicas, [\d,]+ triggers of the 200,000 asked for over 30 names$", out, re.M)
    per_replica = lines[first(r"^reconciles per replica: ")]
    assert all(f"replica-{i}=" in per_replica for i in (1, 2, 3)), per_replica
    timeline = out.split("leadership timeline", 1)[1].split("reconciles per replica", 1)[0]
    assert all(f"replica-{i}" in timeline for i in (1, 2, 3)), timeline  # a standby that never led is named too


@pytest.mark.timeout(150)
def test_ctrl_c_during_the_load_reports_what_ran_and_exits_130() -> None:
    status, out = interrupt_after(["failover", "--backend", "memory", "--duration", "60s", "--kill-at", "50s"],
                                  lambda line: line.startswith("failover: load: "), timeout=120)
    assert status == EXIT_INTERRUPTED, out
    assert "Traceback" not in out and "Error" not in out
    assert "failover: SIGINT: stopping the replicas" in out and "— interrupted" in out
    assert "reconciles per replica: replica-1=" in out
