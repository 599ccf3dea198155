"""``keyqueue-lab explain [TERM]``: what every counter and size the lab prints means, and which Prometheus series
(``keyqueue.metrics``, client-go's names) shows the same thing — or why none does.

The one fact that surprises a dashboard reader: ``workqueue_adds_total`` counts only the adds that made a key
dirty (``queued`` + ``marked``), not every ``add()`` call. In the default firehose 50,000 adds/s reach the
queue and about 1,000/s of them make a key dirty, so the series' rate reads ~50x lower than the lab's ``adds/s``:
the difference is exactly the ``deduplicated`` adds, which change nothing and are counted by no series.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass

from keyqueue.lab.common import human_stream

__all__ = ["GLOSSARY", "Term", "add_arguments", "lookup", "run"]


@dataclass(frozen=True, slots=True)
class Term:
    """One entry of the glossary."""

    name: str
    meaning: str
    prometheus: str  #: the matching series, or why there is none


GLOSSARY: tuple[Term, ...] = (
    Term("enqueued", "add() calls the lab's generator (or the pipeline's informer) made.",
         "none: client-go's metrics do not see adds that change nothing."),
    Term("adds-total", "adds the queue evaluated: the generator's plus delayed retries that fell due "
         "(= queued + deduplicated + marked + dropped).",
         "none; not workqueue_adds_total, which counts only queued + marked."),
    Term("queued", "adds that put a key that was not dirty into the FIFO.",
         "part of workqueue_adds_total."),
    Term("deduplicated", "adds of a key already dirty (waiting in the FIFO, or held and already re-added): "
         "nothing changes.",
         "none: this is why workqueue_adds_total's rate is far below the lab's adds/s."),
    Term("marked", "an add of a key a worker holds (client-go's requeue while processing): the key becomes "
         "dirty and done() puts it back in the FIFO once.",
         "part of workqueue_adds_total and of workqueue_depth (a marked key counts in depth until its next get)."),
    Term("absorbed", "(deduplicated + marked) / adds-total since the start: the share of adds that did not "
         "lengthen the FIFO.",
         "1 - rate(workqueue_adds_total) / the lab's adds/s, roughly (marked adds are in both)."),
    Term("absorbed-now", "the same share over the last interval only (the [FUNNEL] line, the live funnel).",
         "as for absorbed, over that interval."),
    Term("processed", "done() calls: keys a worker finished, successfully or not.",
         "workqueue_work_duration_seconds_count."),
    Term("rate-limited", "the workers' add_rate_limited() calls after a failed reconcile (the delay is "
         "max(per-key backoff, shared bucket)).",
         "workqueue_retries_total (which also counts add_after calls)."),
    Term("queue.Len", "len(q): keys waiting in the FIFO. Not counted: keys being processed, held keys re-added, "
         "delayed keys.",
         "lower than workqueue_depth, which also counts held keys re-added (depth = the dirty set's size)."),
    Term("dirty", "the dirty set: keys that need work, waiting in the FIFO or held and re-added.",
         "workqueue_depth."),
    Term("fifo", "the FIFO: keys waiting to be handed out, each once, in order (= queue.Len).",
         "workqueue_depth minus the held keys re-added."),
    Term("processing", "the processing set: keys handed out by get() and not yet done(); at most one worker "
         "per key.",
         "the keys behind workqueue_unfinished_work_seconds and workqueue_longest_running_processor_seconds."),
    Term("delayed", "keys with a pending add_after()/add_rate_limited() entry that has not fallen due; dropped "
         "at shutdown.",
         "none: client-go has no series for the delay heap."),
    Term("adds/s", "enqueued per second: what enters the funnel.",
         "none; rate(workqueue_adds_total) is only the adds that made a key dirty."),
    Term("hand-outs/s", "get() calls per second: what leaves the FIFO for the workers.",
         "rate(workqueue_queue_duration_seconds_count)."),
    Term("redelivered", "done() calls that found the key re-added meanwhile and put it back in the FIFO (once "
         "for any number of adds while held).",
         "none."),
)


def lookup(name: str) -> Term | None:
    """The entry for ``name`` (case-insensitive; ``queue.len`` and ``len`` find ``queue.Len``), or ``None``."""
    wanted = name.strip().lower().replace("_", "-")
    for term in GLOSSARY:
        if term.name.lower() in (wanted, f"queue.{wanted}"):
            return term
    return None


def _format(term: Term) -> str:
    """One entry, wrapped to 78 columns."""
    def fill(text: str) -> str:
        return textwrap.fill(text, 78, initial_indent="    ", subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False)

    return f"{term.name}\n{fill(term.meaning)}\n{fill('Prometheus: ' + term.prometheus)}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("terms", nargs="*", metavar="TERM", help="the counters to explain (default: all)")


def run(args: argparse.Namespace) -> int:
    """Print the glossary (or the named entries). Exit status 2 for an unknown term."""
    out = human_stream(args)
    if not args.terms:
        intro = " ".join((__doc__ or "").split("\n\n", 1)[1].replace("``", "").split())
        print(textwrap.fill(intro, 78), file=out)
        print("", file=out)
        print("\n".join(_format(term) for term in GLOSSARY), file=out)
        return 0
    found = []
    for name in args.terms:
        term = lookup(name)
        if term is None:
            print(f"explain: no entry {name!r}; the entries: {', '.join(t.name for t in GLOSSARY)}", file=out)
            return 2
        found.append(term)
    print("\n".join(_format(term) for term in found), file=out)
    return 0
