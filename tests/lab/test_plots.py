"""Plots: the generator's line stays visible; the herd's reference line is visible and bounded by the herd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

import matplotlib.pyplot as plt

from keyqueue.lab.__main__ import main
from keyqueue.lab.backoff import backoff_figure, herd_reference, run_backoff
from keyqueue.lab.firehose import FirehoseConfig, run_firehose
from keyqueue.lab.firehose_view import run_figure


def _line(ax: Any, prefix: str) -> Any:
    return next(line for line in ax.get_lines() if str(line.get_label()).startswith(prefix))


def test_generator_line_is_not_hidden_under_the_queue_line() -> None:
    result = run_firehose(FirehoseConfig(rate=2000, duration=1.0, keys=4, workers=2, log="none", sample_every=0.05))
    fig = run_figure(result)
    try:
        top = fig.axes[0]
        generator, queue = _line(top, "generator"), _line(top, "adds/s evaluated")
        assert len(generator.get_xdata()) > 3
        # Whatever is drawn above the generator's line is thinner than it, so the generator's line shows around it.
        above = [line for line in top.get_lines() if line.get_zorder() > generator.get_zorder()]
        assert queue in above
        assert all(line.get_linewidth() * 3 <= generator.get_linewidth() for line in above)
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("keys", "window", "top"), [(1000, 4.0, 140.0), (150, 10.0, 150.0), (40, 3.0, 40.0)])
def test_herd_reference_never_claims_more_keys_than_exist(keys: int, window: float, top: float) -> None:
    times, counts = herd_reference(keys, 10.0, 100, window)
    assert counts[-1] == pytest.approx(top) and max(counts) <= keys and times[-1] == window


def test_backoff_plot_reference_line_is_visible_and_bounded() -> None:
    result = run_backoff(5, herd_keys=150, herd_window=10.0, fake_clock=True)
    fig = backoff_figure(result)
    try:
        ax = fig.axes[1]
        reference, measured = _line(ax, "bucket allows"), _line(ax, "retries back")
        assert max(reference.get_ydata()) <= 150
        assert reference.get_linewidth() >= 3 * measured.get_linewidth()  # drawn wide underneath the steps
        assert reference.get_zorder() < measured.get_zorder()
        assert ax.get_ylim()[1] >= 150
    finally:
        plt.close(fig)


def test_plot_files_are_written(tmp_path: Path) -> None:
    path = tmp_path / "herd.svg"
    assert main(["backoff", "--fake-clock", "--herd-keys", "150", "--herd-window", "10s", "--plot", str(path)]) == 0
    assert path.stat().st_size > 1000
    path = tmp_path / "run.png"
    assert main(["run", "--duration", "0.3", "--rate", "500", "--keys", "2", "--quiet", "--plain",
                 "--plot", str(path)]) == 0
    assert path.stat().st_size > 1000
