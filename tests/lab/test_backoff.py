from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keyqueue.lab.__main__ import main

Lab = Callable[..., tuple[int, dict[str, Any]]]


def test_backoff_table_reset_and_herd(lab: Lab) -> None:
    status, s = lab("backoff", "--fake-clock")
    assert status == 0
    delays = s["delays"]
    assert len(delays) == 20
    assert delays[:5] == pytest.approx([0.005, 0.010, 0.020, 0.040, 0.080])
    for earlier, later in itertools.pairwise(delays):
        assert later == pytest.approx(min(2 * earlier, 1000.0))
    assert delays[-1] == 1000.0 and max(delays) == 1000.0
    assert s["requeues_before_forget"] == 20
    assert s["requeues_after_forget"] == 0
    assert s["delay_after_forget"] == pytest.approx(0.005)
    # The herd: 1000 keys fail at once; the shared bucket lets its burst through, then ~10/s.
    assert s["herd_keys"] == 1000
    assert s["herd_burst"] == 100
    assert s["herd_retry_rate"] == pytest.approx(10.0, rel=0.05)
    assert s["herd_returned"] + s["herd_pending"] == 1000
    assert s["herd_pending"] > 800  # most retries are still scheduled after a 4 s window


def test_backoff_plot(tmp_path: Path, lab: Lab) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "backoff.png"
    status, _ = lab("backoff", "--fake-clock", "--herd-window", "1s", "--plot", str(png))
    assert status == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["backoff", "--fake-clock", "--plot", str(tmp_path / "x.png")]) == 2
    captured = capsys.readouterr()
    assert "-m pip install -e" in captured.err and "[lab]'" in captured.err
    assert main(["run", "--duration", "0.1", "--plot", str(tmp_path / "y.png")]) == 2
