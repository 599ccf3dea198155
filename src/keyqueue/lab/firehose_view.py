"""What ``keyqueue-lab run`` shows of a firehose run: plain lines, the live view on a terminal, the summary, and
the ``--plot`` picture."""

from __future__ import annotations

import collections
import itertools
import shutil
import textwrap
from collections.abc import Callable
from typing import Any, TextIO

from keyqueue.lab.common import counted, format_count, format_duration, format_percent
from keyqueue.lab.firehose import FirehoseConfig, FirehoseResult, Sample, stats_line
from keyqueue.lab.funnel import funnel_text
from keyqueue.lab.plot import pyplot

__all__ = ["PlainWriter", "format_summary", "live_view", "plot_run", "run_figure"]


def format_summary(r: FirehoseResult) -> str:
    c, s = r.config, r.stats
    final = Sample(r.generator_elapsed_s, r.enqueued, s, r.queue_len, r.rate_limited)
    asked = c.rate * c.duration
    per_handout = f"{r.enqueued / s.gets:.1f} generator adds per hand-out" if s.gets else "no hand-out yet"
    lines = [
        stats_line(final, "final"),
        f"generator: asked for {format_count(c.rate)} adds/s for {format_duration(c.duration)} "
        f"({counted(asked, 'add')}); delivered {counted(r.enqueued, 'add')} in "
        f"{format_duration(r.generator_elapsed_s)} = {format_count(r.delivered_rate)} adds/s "
        f"({format_percent(r.delivered_rate / c.rate)} of the requested rate)"
        + (" — interrupted" if r.interrupted else ""),
        f"funnel: {counted(s.adds, 'add')} reached the queue ({format_count(s.fired)} of them fired retries); "
        f"{format_count(s.queued)} joined the FIFO, {format_count(s.deduplicated)} "
        f"{'was a no-op' if s.deduplicated == 1 else 'were no-ops'}, {format_count(s.marked)} marked a held key, "
        f"{counted(s.redelivered, 'redelivery', 'redeliveries')}",
        f"workers: {counted(s.gets, 'hand-out')} to {counted(c.workers, 'worker')} ({per_handout}), "
        f"{counted(r.rate_limited, 'failure')} sent to add_rate_limited; a key was started while "
        f"another worker held it {counted(r.violations, 'time')} (must be 0); at most "
        f"{counted(r.max_in_flight, 'key')} in flight",
        f"queue.Len when the generator stopped: {r.queue_len} (of {counted(c.keys, 'key')}) — it tracks distinct "
        "hot keys, "
        "not the event count; retries still scheduled at the end were dropped by the shutdown",
    ]
    return "\n".join(lines)


class PlainWriter:
    """Writes lines to a text stream (no live view). On a terminal, lines longer than its width are wrapped at
    word boundaries (continuations indented), so that the terminal never breaks a word; elsewhere (a file, a
    pipe) every line stays whole."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.width = shutil.get_terminal_size().columns if stream.isatty() else 0

    def write(self, text: str) -> None:
        if self.width > 20:
            text = "\n".join(
                textwrap.fill(line, self.width - 1, subsequent_indent="    ", break_long_words=False,
                              break_on_hyphens=False) if len(line) >= self.width else line
                for line in text.split("\n")
            )
        self.stream.write(text + "\n")
        self.stream.flush()


def live_view(stream: TextIO, config: FirehoseConfig) -> tuple[Any, Callable[[str], None], Callable[[Sample], None]]:
    """A rich live view: a progress bar through the duration and the current counters; log lines scroll above."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream)
    latest: list[Sample] = []
    history: collections.deque[Sample] = collections.deque()

    def render() -> Any:
        sample = latest[-1] if latest else None
        t = sample.t if sample is not None else 0.0
        bar = Table.grid(padding=(0, 1))
        bar.add_row(Text("firehose", style="bold"), ProgressBar(total=config.duration or 1.0,
                                                               completed=min(t, config.duration), width=40),
                    Text(f"{format_duration(t)} / {format_duration(config.duration)}"))
        if sample is None:
            return bar
        s = sample.stats
        absorbed = (s.deduplicated + s.marked) / s.adds if s.adds else 0.0
        earlier = next((h for h in history if sample.t - h.t <= 1.0 + 1e-6), history[0]) if history else sample
        funnel = Text(funnel_text(sample.funnel, sample.rates_since(earlier), workers=config.workers)
                      if sample.funnel is not None else "")
        grid = Table.grid(padding=(0, 2))
        for _ in range(4):
            grid.add_column(justify="right")
        grid.add_row("enqueued", format_count(sample.enqueued), "adds/s", format_count(sample.enqueued / t if t else 0))
        grid.add_row("adds-total", format_count(s.adds), "deduplicated", format_count(s.deduplicated))
        grid.add_row("marked", format_count(s.marked), "processed", format_count(s.dones))
        grid.add_row("rate-limited", format_count(sample.rate_limited), "absorbed", format_percent(absorbed, 2))
        grid.add_row("queue.Len", str(sample.queue_len), "redelivered", format_count(s.redelivered))
        return Group(bar, Text("the funnel, over the last second:", style="bold"), funnel, grid)

    live = Live(get_renderable=render, console=console, refresh_per_second=4, transient=False)

    def write(text: str) -> None:
        console.print(Text(text))  # wrapped at word boundaries to the terminal's width

    def on_sample(sample: Sample) -> None:
        history.append(sample)
        while len(history) > 2 and sample.t - history[0].t > 1.5:
            history.popleft()
        latest[:] = [sample]

    return live, write, on_sample


def plot_run(result: FirehoseResult, path: str) -> None:
    """Adds/s offered, adds/s reaching the queue, processed/s (log scale) and queue length over time → ``path``."""
    plt = pyplot()
    fig = run_figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_figure(result: FirehoseResult) -> Any:
    """The figure :func:`plot_run` saves (a matplotlib ``Figure``; the caller closes it)."""
    plt = pyplot()
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
        f"firehose: {c.rate:,.0f} adds/s onto {counted(c.keys, 'key')}, {counted(c.workers, 'worker')} — "
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
