"""Pictures for ``run --plot`` and ``backoff --plot`` (matplotlib, the optional ``plot`` extra, imported lazily)."""

from __future__ import annotations

import importlib.util
import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keyqueue.lab.backoff import BackoffResult
    from keyqueue.lab.firehose import FirehoseResult

__all__ = ["PlotUnavailable", "plot_backoff", "plot_run", "require_matplotlib"]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailable` with installation advice unless matplotlib can be imported."""
    if importlib.util.find_spec("matplotlib") is None:
        from keyqueue.lab.common import install_line

        raise PlotUnavailable(
            f"--plot needs matplotlib, which is not installed; install it with: {install_line('lab')}"
        )


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def plot_run(result: FirehoseResult, path: str) -> None:
    """Adds/s offered, adds/s reaching the queue, processed/s (log scale) and queue length over time → ``path``."""
    plt = _pyplot()
    samples = result.timeline
    t: list[float] = []
    offered: list[float] = []
    reaching: list[float] = []
    processed: list[float] = []
    for prev, cur in itertools.pairwise(samples):
        dt = cur.t - prev.t
        if dt < result.config.sample_every / 2:  # the end-of-run sample can follow the last tick closely
            continue
        t.append(cur.t)
        offered.append((cur.enqueued - prev.enqueued) / dt)
        reaching.append((cur.stats.adds - prev.stats.adds) / dt)
        processed.append((cur.stats.dones - prev.stats.dones) / dt)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    c = result.config
    top.plot(t, offered, label="generator adds/s", color="tab:red")
    top.plot(t, reaching, label="adds/s evaluated by the queue (incl. fired retries)", color="tab:orange",
             linestyle="--")
    top.plot(t, processed, label="processed/s (done)", color="tab:green")
    top.set_yscale("symlog", linthresh=10)
    top.set_ylabel("per second")
    top.set_title(
        f"firehose: {c.rate:,.0f} adds/s onto {c.keys} keys, {c.workers} workers — "
        f"{result.adds_absorbed * 100:.2f}% of adds absorbed by the queue"
    )
    top.legend(loc="center right", fontsize="small")
    top.grid(True, which="both", alpha=0.3)
    bottom.step([s.t for s in samples], [s.queue_len for s in samples], where="post", color="tab:blue",
                label="queue.Len")
    bottom.axhline(c.keys, color="grey", linestyle=":", label=f"distinct keys ({c.keys})")
    bottom.set_ylim(bottom=0, top=max([c.keys, *(s.queue_len for s in samples)]) * 1.1 + 1)
    bottom.set_ylabel("queue.Len")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right", fontsize="small")
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_backoff(result: BackoffResult, path: str) -> None:
    """The per-key backoff curve (log scale) and the herd's retries coming back over time → ``path``."""
    plt = _pyplot()
    herd = result.herd
    fig, axes = plt.subplots(1, 2 if herd is not None else 1, figsize=(11 if herd is not None else 6, 4.5))
    curve = axes[0] if herd is not None else axes
    attempts = list(range(1, len(result.delays) + 1))
    curve.plot(attempts, result.delays, marker="o", color="tab:purple", label="delay")
    curve.axhline(result.max_delay, color="grey", linestyle=":", label=f"cap {result.max_delay:g}s")
    curve.set_yscale("log")
    curve.set_xticks(attempts[::2] if len(attempts) > 10 else attempts)
    curve.set_xlabel("consecutive failures of one key")
    curve.set_ylabel("delay before re-add (s)")
    curve.set_title("per-key exponential backoff (5ms · 2^(n-1))")
    curve.legend(fontsize="small")
    curve.grid(True, which="both", alpha=0.3)
    if herd is not None:
        ax = axes[1]
        times = herd.arrivals_s
        ax.step(times, list(range(1, len(times) + 1)), where="post", color="tab:blue", label="retries back")
        if herd.bucket_qps > 0:
            ideal_t = [0.0, herd.window_s]
            ideal = [herd.bucket_burst, herd.bucket_burst + herd.bucket_qps * herd.window_s]
            ax.plot(ideal_t, ideal, color="grey", linestyle=":",
                    label=f"burst {herd.bucket_burst} + {herd.bucket_qps:g}/s")
        ax.set_xlabel(f"seconds after {herd.keys} keys failed at once ({herd.clock} clock)")
        ax.set_ylabel("retries handed out")
        ax.set_title(f"thundering herd: {herd.retry_rate:.2f} retries/s after the burst")
        ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
