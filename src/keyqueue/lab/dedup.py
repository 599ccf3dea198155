"""``keyqueue-lab dedup``: where adds go.

Part A — 100,000 adds of one waiting key leave one entry in the queue.
Part B — a worker holds the key while 200 more adds arrive: the queue's length stays 0 (the adds only mark the
key dirty), becomes 1 the moment ``done`` runs (the key is queued again, once), and exactly one more reconcile
drains it.

Every number printed comes from the queue itself: ``len(q)``, the :class:`~keyqueue.AddResult` of each add, the
value ``done`` returns, and the queue's own counters (``stats=True``).
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import Any

from keyqueue._core import AddResult, QueueStats
from keyqueue.errors import ShutDown
from keyqueue.lab.common import add_json_argument, check_size, format_count, human_stream, write_json
from keyqueue.threaded import Queue

__all__ = ["DedupResult", "add_arguments", "run", "run_dedup"]

KEY = "default/target"
MAX_ADDS = 100_000_000  #: the most adds a part may ask for (about a minute of adds in one thread)


@dataclass(frozen=True, slots=True)
class DedupResult:
    """The facts of both parts, as the queue reported them."""

    part_a_adds: int
    part_a_len: int  #: len(q) after part A's adds (must be 1)
    part_a_outcomes: dict[str, int]  #: AddResult name → count, part A
    part_a_stats: dict[str, int]
    part_b_adds: int
    part_b_len_while_held: int  #: len(q) after the adds, key still held (must be 0)
    part_b_len_seen_by_worker: int  #: len(q) read by the holding worker just before done (must be 0)
    part_b_done_redelivered: bool  #: what done() returned (must be True)
    part_b_len_after_done: int  #: len(q) right after done (must be 1)
    part_b_extra_reconciles: int  #: further get()s needed to drain (must be 1)
    part_b_outcomes: dict[str, int]  #: AddResult name → count for the adds made while held
    part_b_stats: dict[str, int]

    def facts(self) -> list[tuple[str, bool]]:
        """Each durable fact with whether it held in this run."""
        return [
            (f"A: {format_count(self.part_a_adds)} adds of one key → len 1", self.part_a_len == 1),
            (f"B: len 0 while the key is held, after {self.part_b_adds} adds", self.part_b_len_while_held == 0),
            ("B: len 0 as seen by the holding worker before done()", self.part_b_len_seen_by_worker == 0),
            ("B: done() reports a redelivery", self.part_b_done_redelivered),
            ("B: len 1 right after done()", self.part_b_len_after_done == 1),
            (f"B: {self.part_b_adds} adds while held → exactly 1 more reconcile", self.part_b_extra_reconciles == 1),
        ]

    @property
    def ok(self) -> bool:
        return all(held for _, held in self.facts())

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["facts"] = [{"fact": text, "held": held} for text, held in self.facts()]
        data["ok"] = self.ok
        return data


def _stats_dict(stats: QueueStats) -> dict[str, int]:
    return {f.name: int(getattr(stats, f.name)) for f in fields(QueueStats)}


def _outcomes(results: Counter[AddResult]) -> dict[str, int]:
    return {outcome.name: results[outcome] for outcome in AddResult if results[outcome]}


def run_dedup(adds_a: int = 100_000, adds_b: int = 200, timeout: float = 10.0) -> DedupResult:
    """Run both parts and return what the queue reported. Blocks until done (a worker thread is used in part B).

    Raises ``TimeoutError`` if the worker of part B does not respond within ``timeout`` seconds (it always should)
    and ``ValueError`` for negative sizes.
    """
    check_size("adds_a", adds_a, 0, MAX_ADDS)
    check_size("adds_b", adds_b, 0, MAX_ADDS)

    # Part A: a waiting key, added over and over.
    qa: Queue[str] = Queue(stats=True)
    outcomes_a: Counter[AddResult] = Counter()
    add = qa.add
    for _ in range(adds_a):
        outcomes_a[add(KEY)] += 1
    len_a = len(qa)
    stats_a = qa.stats()
    qa.shut_down()

    # Part B: a worker holds the key while the adds arrive.
    qb: Queue[str] = Queue(stats=True)
    qb.add(KEY)
    holding = threading.Event()
    release = threading.Event()
    finished = threading.Event()
    seen: dict[str, Any] = {}

    def worker() -> None:
        key = qb.get()
        holding.set()
        if not release.wait(timeout):
            seen["error"] = "never released"
        seen["len_before_done"] = len(qb)
        seen["redelivered"] = qb.done(key)
        finished.set()

    thread = threading.Thread(target=worker, name="dedup-worker", daemon=True)
    thread.start()
    if not holding.wait(timeout):
        raise TimeoutError("dedup: the worker did not take the key")
    outcomes_b: Counter[AddResult] = Counter()
    for _ in range(adds_b):
        outcomes_b[qb.add(KEY)] += 1
    len_held = len(qb)
    release.set()
    if not finished.wait(timeout):
        raise TimeoutError("dedup: the worker did not finish")
    thread.join(timeout)
    len_after = len(qb)
    # Drain: count how many more hand-outs the 200 adds produced. After shut_down, queued keys are still handed
    # out and get() then raises ShutDown, so the loop ends exactly when the queue is empty.
    qb.shut_down()
    extra = 0
    while True:
        try:
            key = qb.get(timeout)
        except ShutDown:
            break
        extra += 1
        qb.done(key)
    return DedupResult(
        part_a_adds=adds_a,
        part_a_len=len_a,
        part_a_outcomes=_outcomes(outcomes_a),
        part_a_stats=_stats_dict(stats_a),
        part_b_adds=adds_b,
        part_b_len_while_held=len_held,
        part_b_len_seen_by_worker=int(seen["len_before_done"]),
        part_b_done_redelivered=bool(seen["redelivered"]),
        part_b_len_after_done=len_after,
        part_b_extra_reconciles=extra,
        part_b_outcomes=_outcomes(outcomes_b),
        part_b_stats=_stats_dict(qb.stats()),
    )


def format_result(r: DedupResult) -> str:
    def outcomes(d: dict[str, int]) -> str:
        return ", ".join(f"{name} {format_count(n)}" for name, n in d.items()) or "none"

    lines = [
        f"A. add({KEY!r}) × {format_count(r.part_a_adds)}",
        f"   len(q)                                   : {r.part_a_len}",
        f"   what the adds did                        : {outcomes(r.part_a_outcomes)}",
        "",
        f"B. a worker holds {KEY!r}; {r.part_b_adds} more adds arrive",
        f"   what the adds did                        : {outcomes(r.part_b_outcomes)}",
        f"   len(q) while the key is held             : {r.part_b_len_while_held}"
        "   ← the adds marked the key dirty; nothing entered the FIFO",
        f"   len(q) read by the worker before done()  : {r.part_b_len_seen_by_worker}",
        f"   done() returned                          : {r.part_b_done_redelivered}"
        "   ← True: the key was re-added while held, so it is queued again",
        f"   len(q) right after done()                : {r.part_b_len_after_done}"
        f"   ← queued once, not {r.part_b_adds} times",
        f"   further get()s needed to drain           : {r.part_b_extra_reconciles}"
        f"   ← {r.part_b_adds} adds cost exactly this many reconciles",
        "",
        f"len(q) counts only keys waiting in the FIFO: it read {r.part_b_len_while_held} while "
        f"{r.part_b_adds} changes were pending on a held key.",
        "",
    ]
    for text, held in r.facts():
        lines.append(f"  [{'ok' if held else 'FAILED'}] {text}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adds-a", type=int, default=100_000, metavar="N",
                        help="part A: adds of one waiting key (default 100000)")
    parser.add_argument("--adds-b", type=int, default=200, metavar="N",
                        help="part B: adds while a worker holds the key (default 200)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit status 0 if every fact held, 1 if one did not, 2 for bad options."""
    out = human_stream(args)
    try:
        result = run_dedup(args.adds_a, args.adds_b)
    except ValueError as exc:
        print(f"dedup: {exc}", file=out)
        return 2
    print(format_result(result), file=out, flush=True)
    write_json(args.json, result.summary())
    return 0 if result.ok else 1
