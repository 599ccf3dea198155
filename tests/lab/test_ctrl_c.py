"""Ctrl-C whenever it comes: a summary, exit status 130, no traceback."""

from __future__ import annotations

import re
import threading

import pytest

from keyqueue.lab.common import EXIT_INTERRUPTED
from keyqueue.lab.load import run_load_subprocess

from .ptys import interrupt_after


def test_a_load_child_stopped_while_it_starts_reports_nothing_sent(trigger_url: str) -> None:
    # The stop is already set: the child gets SIGTERM within its first 50 ms, before (or just after) it installs
    # its handlers. Either way the caller gets a result, never an exception.
    stop = threading.Event()
    stop.set()
    result = run_load_subprocess(trigger_url, 1_000_000, 2, stop=stop)
    assert result.stopped and result.requests < 1_000_000 and result.errors == 0


@pytest.mark.timeout(120)
def test_ctrl_c_as_the_pipeline_banner_appears() -> None:
    # The banner is the last line before the built-in load starts its child: the signal lands while the child
    # starts, before it can handle a signal.
    status, out = interrupt_after(
        ["pipeline", "--backend", "memory", "--requests", "1000000", "--stats-interval", "0", "--plain"],
        lambda line: line.startswith("pipeline: triggers on"))
    assert status == EXIT_INTERRUPTED, out
    assert "Traceback" not in out and "load generator failed" not in out
    assert "interrupted; the report covers" in out and "verification:" in out


def test_ctrl_c_in_load_exits_130_with_the_result(trigger_url: str) -> None:
    status, out = interrupt_after(["load", "--url", trigger_url, "--requests", "100000000", "--concurrency", "2"],
                                  lambda line: line.startswith("load: sending"))
    assert status == EXIT_INTERRUPTED, out
    assert "stopped early" in out and "Traceback" not in out


@pytest.mark.timeout(120)
def test_ctrl_c_in_the_control_race_drops_the_backlog() -> None:
    # Workers hold each key for a second, so the plain queue's backlog is thousands of entries when the signal
    # comes: working them off would take hours. The run must drop them and end after the keys held.
    status, out = interrupt_after(["race", "--control", "--adds", "100000", "--hold", "1s", "--workers", "4",
                                   "--progress-every", "100ms"],
                                  lambda line: "violations so far" in line, timeout=30)
    assert status == EXIT_INTERRUPTED, out
    dropped = re.search(r"dropped at Ctrl-C\s+: ([\d,]+) queued entries", out)
    assert dropped is not None and int(dropped.group(1).replace(",", "")) > 0, out
    assert "Traceback" not in out


def test_the_control_race_reports_while_its_workers_drain() -> None:
    # The plain queue keeps every add: after the producers finish, the workers still have most of them to do.
    # Progress goes on through that phase; Ctrl-C during it ends the run too.
    status, out = interrupt_after(["race", "--control", "--adds", "50000", "--hold", "1ms", "--workers", "2",
                                   "--progress-every", "100ms"],
                                  lambda line: "workers draining the queue" in line, timeout=30)
    assert status == EXIT_INTERRUPTED, out
    assert "dropped at Ctrl-C" in out and "Traceback" not in out
