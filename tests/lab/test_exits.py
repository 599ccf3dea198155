"""Every exit clean: bad output paths and sizes are refused before the run, Ctrl-C reports and exits 130."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keyqueue.lab.__main__ import main
from keyqueue.lab.common import EXIT_INTERRUPTED
from keyqueue.lab.firehose import FirehoseConfig, run_firehose

from .ptys import interrupt_after

Lab = Callable[..., tuple[int, dict[str, Any]]]


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    captured = capsys.readouterr()
    text = (captured.out + captured.err).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.mark.parametrize("command", [["run"], ["race"], ["backoff"], ["dedup"], ["drain"],
                                     ["load", "--url", "http://127.0.0.1:1"], ["pipeline"]])
def test_json_into_a_missing_directory_is_refused_before_the_run(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--json", str(tmp_path / "nope" / "summary.json")]) == 2
    _one_line_error(capsys, "--json", "does not exist")


def test_json_onto_a_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "--json", str(tmp_path)]) == 2
    _one_line_error(capsys, "is a directory")


@pytest.mark.parametrize(("name", "needle"), [("run.foo", "'.foo' is not a format"), ("run", "without an extension"),
                                               ("nope/run.png", "does not exist"), ("", "is a directory")])
def test_plot_paths_are_checked_before_the_run(
    name: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("run", "backoff"):
        assert main([command, "--plot", str(tmp_path / name) if name else str(tmp_path)]) == 2
        _one_line_error(capsys, "--plot", needle)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["run", "--workers", "100000"], "workers must be within 1..1,024"),
     (["run", "--keys", "0"], "keys must be within"),
     (["race", "--workers", "100000"], "workers must be within 1..1,024"),
     (["race", "--producers", "5000"], "producers must be within"),
     (["backoff", "--herd-keys", "10000000"], "--herd-keys must be within"),
     (["backoff", "--attempts", "0"], "--attempts must be within"),
     (["load", "--url", "http://127.0.0.1:1", "--concurrency", "100000"], "concurrency must be within"),
     (["pipeline", "--workers", "100000"], "--workers must be within"),
     (["dedup", "--adds-a", "1000000000000"], "adds_a must be within"),
     (["run", "--follow", "default/obj-99", "--keys", "5"], "'default/obj-99' is never added by this run")],
)
def test_impossible_sizes_get_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    _one_line_error(capsys, needle)


def test_a_rate_the_generator_cannot_make_is_refused_with_the_measured_maximum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--rate", "1e12", "--duration", "1", "--plain"]) == 2
    text = _one_line_error(capsys, "more than the generator can make", "measured just now")
    assert "adds/s" in text


@pytest.mark.timeout(60)
def test_a_huge_rate_still_ends_on_time() -> None:
    # Before the bound, one batch was rate × 50 ms adds (5·10^10 here) and the stop was checked only between
    # batches: this call would not return for hours. The pytest timeout is the guard, not a timing assertion.
    result = run_firehose(FirehoseConfig(rate=1e12, duration=0.2, keys=5, workers=2, log="none", fail=0.0))
    assert 0 < result.enqueued < 1e12 * 0.2
    assert result.delivered_rate < result.config.rate


def test_zero_duration_and_zero_adds_print_no_inf(capsys: pytest.CaptureFixture[str], lab: Lab) -> None:
    status, summary = lab("run", "--duration", "0", "--quiet", "--plain")
    assert status == 0 and summary["enqueued"] == 0
    status, summary = lab("race", "--adds", "0")
    assert status == 0 and summary["collapse"] is None
    out = capsys.readouterr().out
    assert "inf" not in out and "nan" not in out
    assert "no hand-out yet" in out and "- (no reconcile)" in out


def test_load_against_a_closed_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "-m", "keyqueue.lab", "load", "--url", f"http://127.0.0.1:{port}",
                           "--requests", "30", "--concurrency", "4", "--json", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert out.count(f"connection refused to 127.0.0.1:{port}") == 1, out
    assert "nan" not in out and "Traceback" not in out
    summary = json.loads(path.read_text(encoding="utf-8"))
    assert summary["requests"] == 30 and summary["errors"] == 30  # each failure counted once
    assert summary["statuses"] == {"connection refused": 30}


# -- Ctrl-C -------------------------------------------------------------------------------------------------------


def test_ctrl_c_in_run_prints_the_summary_and_exits_130() -> None:
    status, out = interrupt_after(["run", "--duration", "60", "--plain", "--quiet"],
                                   lambda line: line.startswith("[STATS] t="))
    assert status == EXIT_INTERRUPTED, out
    assert "[STATS] final" in out and "— interrupted" in out and "Traceback" not in out


def test_ctrl_c_in_race_prints_what_ran_and_exits_130() -> None:
    status, out = interrupt_after(["race", "--adds", "500000000", "--hold", "1ms", "--progress-every", "200ms"],
                                   lambda line: "adds," in line and "so far" in line)
    assert status == EXIT_INTERRUPTED, out
    assert out.index("race: 500,000,000 adds") < out.index("so far")  # the start line, then progress
    assert "same-key violations" in out and "interrupted: so far no key" in out and "Traceback" not in out


def test_ctrl_c_in_backoff_keeps_the_table_and_reports_the_herd() -> None:
    status, out = interrupt_after(["backoff", "--herd-window", "60s"], lambda line: "retries back so far" in line)
    assert status == EXIT_INTERRUPTED, out
    assert out.index("consecutive failures of one key") < out.index("Thundering herd")  # the table came first
    assert "— interrupted" in out and "back at once (the burst)" in out and "Traceback" not in out


@pytest.mark.timeout(120)
def test_ctrl_c_in_pipeline_reports_and_exits_130_without_watch_noise() -> None:
    status, out = interrupt_after(
        ["pipeline", "--backend", "memory", "--requests", "1000000", "--concurrency", "2", "--stats-interval", "0"],
        lambda line: line.startswith("[TRIGGER]"))
    assert status == EXIT_INTERRUPTED, out
    assert "interrupted; the report covers" in out and "verification:" in out
    assert "retrying" not in out and "watch failed" not in out and "Traceback" not in out
