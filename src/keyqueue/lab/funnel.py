"""The funnel, drawn: adds entering, the dirty set, the FIFO, the processing set, the delayed entries, hand-outs
leaving. Shared by ``run``'s live view and ``[FUNNEL]`` lines and by the pipeline's live view.

Everything drawn comes from the queue itself: the sizes from one :meth:`~keyqueue._shell.ShellBase.snapshot`
(taken under the queue's lock), the rates from two of its :class:`~keyqueue._core.QueueStats` (``stats=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from keyqueue._core import QueueSnapshot, QueueStats
from keyqueue.lab.common import format_count, format_percent

__all__ = ["FunnelRates", "funnel_line", "funnel_text"]


@dataclass(frozen=True, slots=True)
class FunnelRates:
    """Per-second rates of the queue's decisions between two moments (all zero over an empty interval)."""

    offered: float  #: adds/s made by the source (the generator or the informer)
    evaluated: float  #: adds/s the queue evaluated (the source's, plus retries that fell due)
    queued: float  #: adds/s that put a key in the FIFO
    deduplicated: float  #: adds/s that were no-ops (key already dirty)
    marked: float  #: adds/s that marked a held key (redelivered once at done)
    handed_out: float  #: get()s/s: keys leaving the FIFO for a worker
    done: float  #: done()s/s
    redelivered: float  #: done()s/s that put a re-added key back in the FIFO

    @classmethod
    def between(cls, t0: float, offered0: int, s0: QueueStats, t1: float, offered1: int,
                s1: QueueStats) -> FunnelRates:
        """Rates from the counters at ``t0`` and ``t1`` (seconds); ``offered*``: the source's add count."""
        dt = t1 - t0
        if not dt > 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return cls(
            (offered1 - offered0) / dt,
            (s1.adds - s0.adds) / dt,
            (s1.queued - s0.queued) / dt,
            (s1.deduplicated - s0.deduplicated) / dt,
            (s1.marked - s0.marked) / dt,
            (s1.gets - s0.gets) / dt,
            (s1.dones - s0.dones) / dt,
            (s1.redelivered - s0.redelivered) / dt,
        )

    @property
    def absorbed(self) -> float:
        """Share of the evaluated adds that did not lengthen the FIFO (no-ops + marks), 0 when there were none."""
        return (self.deduplicated + self.marked) / self.evaluated if self.evaluated > 0 else 0.0


def _rate(per_second: float) -> str:
    return f"{format_count(per_second)}/s"


def funnel_text(snap: QueueSnapshot, rates: FunnelRates, *, source: str = "generator", workers: int = 0) -> str:
    """The funnel as a small picture (at most 78 columns): the queue's Add → DIRTY → FIFO → PROCESSING → Done,
    with each structure's size now and the rate of every arrow over the last interval."""
    held = f" of {workers} workers" if workers else ""
    lines = [
        f"  {source} add()  {_rate(rates.offered)} in"
        + (f"   (+ {_rate(rates.evaluated - rates.offered)} retries fired)"
           if rates.evaluated - rates.offered >= 0.5 else ""),
        f"     │  {format_percent(rates.absorbed, 2)} absorbed: {_rate(rates.deduplicated)} no-ops, "
        f"{_rate(rates.marked)} marked a held key",
        "     ▼",
        f"  DIRTY set      {format_count(snap.dirty):>9} keys   need work; "
        f"{format_count(snap.held_dirty)} of them held and re-added",
        f"     │  {_rate(rates.queued)} joined the FIFO, {_rate(rates.redelivered)} put back by done()",
        "     ▼",
        f"  FIFO           {format_count(snap.fifo):>9} keys   waiting (queue.Len)",
        f"     │  get(): {_rate(rates.handed_out)} handed out",
        "     ▼",
        f"  PROCESSING     {format_count(snap.processing):>9} keys   held{held}",
        f"     │  done(): {_rate(rates.done)}",
        "     ▼",
        f"  DELAYED        {format_count(snap.delayed):>9} keys   waiting for their backoff (add_rate_limited)",
    ]
    return "\n".join(lines)


def funnel_line(snap: QueueSnapshot, rates: FunnelRates) -> str:
    """One line for logs: ``[FUNNEL] in=… → dirty=… fifo=… processing=… delayed=… → out=… | absorbed-now=…``."""
    return (
        f"[FUNNEL] in={_rate(rates.offered)} → dirty={format_count(snap.dirty)} fifo={format_count(snap.fifo)} "
        f"processing={format_count(snap.processing)} delayed={format_count(snap.delayed)} → "
        f"out={_rate(rates.handed_out)} | absorbed-now={format_percent(rates.absorbed, 2)}"
    )
