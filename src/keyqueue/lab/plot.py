"""Pictures for ``run --plot`` and ``backoff --plot`` (matplotlib, the optional ``plot`` extra, imported lazily)."""

from __future__ import annotations

import importlib.util
import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keyqueue.lab.backoff import BackoffResult
    from keyqueue.lab.firehose import FirehoseResult

__all__ = ["PlotUnavailable", "backoff_figure", "herd_reference", "plot_backoff", "plot_run", "require_matplotlib",
           "run_figure"]


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
    fig = run_figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_figure(result: FirehoseResult) -> Any:
    """The figure :func:`plot_run` saves (a matplotlib ``Figure``; the caller closes it)."""
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
    # The queue evaluates every generator add (plus fired retries), so these two lines nearly coincide: the
    # generator's is drawn wide and pale underneath, the queue's thin and dashed on top, and both stay visible.
    top.plot(t, offered, label="generator adds/s", color="tab:red", linewidth=5, alpha=0.45, zorder=2)
    top.plot(t, reaching, label="adds/s evaluated by the queue (incl. fired retries)", color="black",
             linestyle="--", linewidth=1.2, zorder=3)
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
    return fig


def herd_reference(keys: int, qps: float, burst: int, window: float) -> tuple[list[float], list[float]]:
    """What the bucket allows a herd of ``keys`` over ``window`` seconds: ``burst`` at once, then ``qps`` per
    second, never more than ``keys`` in all. Returns the polyline's (times, counts)."""
    first = float(min(burst, keys))
    if qps <= 0 or first >= keys:
        return [0.0, window], [first, first]
    full = (keys - first) / qps  # when the last key is allowed back
    if full >= window:
        return [0.0, window], [first, first + qps * window]
    return [0.0, full, window], [first, float(keys), float(keys)]


def plot_backoff(result: BackoffResult, path: str) -> None:
    """The per-key backoff curve (log scale) and the herd's retries coming back over time → ``path``."""
    plt = _pyplot()
    fig = backoff_figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def backoff_figure(result: BackoffResult) -> Any:
    """The figure :func:`plot_backoff` saves (a matplotlib ``Figure``; the caller closes it)."""
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
        # The measured steps follow the bucket's line closely: the reference is drawn wide and pale underneath,
        # so that both can be seen, and it stops at the number of keys in the herd.
        ideal_t, ideal = herd_reference(herd.keys, herd.bucket_qps, herd.bucket_burst, herd.window_s)
        ax.plot(ideal_t, ideal, color="tab:orange", linewidth=5, alpha=0.5, zorder=2,
                label=f"bucket allows: burst {herd.bucket_burst} + {herd.bucket_qps:g}/s, at most {herd.keys} keys")
        ax.step(times, list(range(1, len(times) + 1)), where="post", color="tab:blue", linewidth=1.5, zorder=3,
                label="retries back (measured)")
        ax.set_xlabel(f"seconds after {herd.keys} keys failed at once ({herd.clock} clock)")
        ax.set_ylabel("retries handed out")
        ax.set_title(f"thundering herd: {herd.retry_rate:.2f} retries/s after the burst")
        ax.set_ylim(bottom=0, top=max(ideal[-1], len(times), 1) * 1.08)
        ax.legend(fontsize="small", loc="lower right")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
