"""The pipeline's live view: per-stage latency as it runs, the queue's funnel, triggers/s (on a terminal)."""

from __future__ import annotations

import re

import pytest

from .ptys import run_in_pty

pytest.importorskip("kubernetes")

ARGS = ["pipeline", "--backend", "memory", "--apiserver", "thread", "--requests", "100", "--concurrency", "4",
        "--stats-interval", "0", "--log-lines", "2"]


@pytest.mark.timeout(120)
def test_pipeline_live_view_in_a_terminal() -> None:
    status, out = run_in_pty(ARGS, columns=100, timeout=90)
    assert status == 0, out
    assert re.search(r"pipeline, [\d.]+m?s: [\d,]+ triggers \([\d,]+/s over the last second\)", out), out
    for part in ("stage (last 500 samples)", "API write (/trigger → answer)", "write sent → informer handler",
                 "enqueue → worker Get", "reconcile", "the queue, over the last second:", "informer add()",
                 "DIRTY set", "FIFO", "PROCESSING", "held of 4 workers", "DELAYED"):
        assert part in out, part
    assert "verification: 20 names, 100 triggers" in out  # the final report follows the live view
