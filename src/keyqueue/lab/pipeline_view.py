"""The pipeline's live view (``keyqueue-lab pipeline`` on a terminal): per-stage latency as it runs, the queue's
funnel (sizes from ``snapshot()``, rates from its counters), triggers/s. Log lines scroll above it.

Only reads what the :class:`~keyqueue.lab.pipeline.Pipeline` measures (:meth:`~keyqueue.lab.pipeline.Pipeline.stages`,
:meth:`~keyqueue.lab.pipeline.Pipeline.counters`, its queue); it changes nothing in the run.
"""

from __future__ import annotations

import collections
import math
import time
from typing import TYPE_CHECKING, Any, TextIO

from keyqueue.lab.common import format_count, format_duration
from keyqueue.lab.funnel import FunnelRates, funnel_text

if TYPE_CHECKING:
    from keyqueue._core import QueueStats
    from keyqueue.lab.pipeline import Pipeline

__all__ = ["PipelineLiveView", "start_live_view"]

RECENT = 500  #: the live stage table shows percentiles of each stage's last this many samples

_STAGES = (
    ("API write (/trigger → answer)", "api_write"),
    ("write sent → informer handler", "write_sent_to_informer"),
    ("queue add (call)", "queue_add"),
    ("enqueue → worker Get", "enqueue_to_get"),
    ("reconcile", "reconcile"),
    ("queue done (call)", "queue_done"),
)


class PipelineLiveView:
    """A ``rich`` live display of a running pipeline on ``stream``; :meth:`start`, then :meth:`stop` (idempotent).
    While it runs, the pipeline's log lines go through :meth:`write` and print above the display."""

    def __init__(self, pipeline: Pipeline, stream: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.pipeline = pipeline
        self.console = Console(file=stream)
        self._started = time.monotonic()
        self._history: collections.deque[tuple[float, int, int, QueueStats]] = collections.deque()
        self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=4,
                          transient=False, redirect_stdout=False, redirect_stderr=False)
        self._running = False

    def start(self) -> PipelineLiveView:
        self.pipeline.line_sink = self.write
        self._live.start()
        self._running = True
        return self

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._live.stop()
        self.pipeline.line_sink = None

    def write(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line))

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        p = self.pipeline
        queue = p.queue
        now = time.monotonic() - self._started
        triggers, events, _ = p.counters()
        if queue is None:
            return Text("pipeline: starting …")
        stats = queue.stats()
        history = self._history
        history.append((now, triggers, events, stats))
        while len(history) > 2 and now - history[0][0] > 1.0:
            history.popleft()
        t0, triggers0, events0, stats0 = history[0]
        dt = now - t0
        per_second = (triggers - triggers0) / dt if dt > 0 else 0.0
        rates = FunnelRates.between(t0, events0, stats0, now, events, stats)
        stages = p.stages(RECENT)
        table = Table(title=f"pipeline, {format_duration(now)}: {format_count(triggers)} triggers "
                            f"({format_count(per_second)}/s over the last second), {format_count(events)} "
                            f"informer events", title_justify="left", box=None, padding=(0, 1))
        table.add_column("stage (last 500 samples)")
        for name in ("median", "p95", "p99", "n"):
            table.add_column(name, justify="right")

        def f(x: float) -> str:
            return "-" if math.isnan(x) else format_duration(x)

        for label, key in _STAGES:
            st = stages[key]
            table.add_row(label, f(st.p50), f(st.p95), f(st.p99), format_count(st.n))
        funnel = funnel_text(queue.snapshot(), rates, source="informer", workers=p.config.workers)
        return Group(table, Text("the queue, over the last second:", style="bold"), Text(funnel))


def start_live_view(pipeline: Pipeline, stream: TextIO) -> PipelineLiveView | None:
    """Start a live view of ``pipeline`` on ``stream``, or return ``None`` when ``rich`` is not installed."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return None
    return PipelineLiveView(pipeline, stream).start()
