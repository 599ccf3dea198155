"""The never-two-leaders check: do intervals of different owners overlap?"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Interval", "find_overlaps"]


@dataclass(frozen=True, slots=True)
class Interval:
    """``owner`` led (or reconciled) from ``start`` to ``end`` (seconds of one clock shared by all owners, e.g.
    ``time.monotonic()`` of one machine)."""

    owner: str
    start: float
    end: float


def find_overlaps(intervals: list[Interval]) -> list[tuple[Interval, Interval]]:
    """Every pair of intervals of **different** owners that share some time (touching ends do not count), in
    order of start. Intervals of one owner may overlap each other (e.g. two workers of one replica)."""
    ordered = sorted(intervals, key=lambda i: (i.start, i.end))
    out: list[tuple[Interval, Interval]] = []
    active: list[Interval] = []  # intervals that may still overlap a later start
    for cur in ordered:
        active = [a for a in active if a.end > cur.start]
        out.extend((a, cur) for a in active if a.owner != cur.owner)
        active.append(cur)
    return out
