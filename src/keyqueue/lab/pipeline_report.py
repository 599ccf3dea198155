"""What a pipeline run reports: the correctness check (:class:`Verification`), the stage table with the verdict
(:func:`format_report`) and the ``[STATS]`` line (:func:`format_stats_line`), as text."""

from __future__ import annotations

import math
from dataclasses import dataclass

from keyqueue._core import QueueStats
from keyqueue.lab.common import format_duration
from keyqueue.lab.load import LoadResult
from keyqueue.lab.pipeline_stages import ENQUEUE_TO_GET_GOAL_NS, StageStats

__all__ = ["Verification", "format_report", "format_stats_line"]


@dataclass(frozen=True)
class Verification:
    """Did every triggered name get reconciled after its last trigger, and never by two workers at once?"""

    names: int  #: distinct names triggered
    triggers: int
    reconciles: int
    lost: int  #: names whose last reconcile saw an older resourceVersion than their last trigger wrote
    lost_names: list[str]
    violations: int  #: reconciles that started while another worker held the same key

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.violations == 0


def format_report(st: dict[str, StageStats], bound: dict[str, StageStats], slices: dict[str, float],
                  v: Verification, ok: bool, reconcile: float | None, micro: dict[str, float] | None = None,
                  load: LoadResult | None = None, *, interrupted: bool = False, verbose: bool = False) -> str:
    """The stage table (``st``: :func:`~keyqueue.lab.pipeline_stages.stage_stats`, ``bound``:
    :func:`~keyqueue.lab.pipeline_stages.replay_bound`, ``slices``:
    :func:`~keyqueue.lab.pipeline_stages.slice_summary`, ``micro``:
    :func:`~keyqueue.lab.pipeline_stages.microbench_queue`) and the verification ``v`` with the run's verdict
    (``ok``: OK or FAILED; INTERRUPTED instead of OK when a signal cut the load short), as text. ``reconcile``: the
    simulated reconcile's seconds (``None``: a custom reconcile function). Without ``verbose`` the table keeps the
    path and its hand-offs; the parts of each stage (the handler, the watch chunk, the write's answer against its
    event, which can come second), the scheduler's share of a hand-off and the replays need ``verbose``."""

    def f(x: float) -> str:
        return "-" if math.isnan(x) else format_duration(x)

    def mean(s: StageStats) -> str:
        return f"mean {f(s.mean)}"

    all_adds = st["enqueue_to_get"].n

    def share(s: StageStats) -> str:
        return f"{s.n / all_adds:.0%}" if all_adds else "-"

    def over(s: StageStats) -> str:
        return f"{s.above / s.n:.0%} wait > {f(ENQUEUE_TO_GET_GOAL_NS / 1e9)}" if s.n else ""

    free_note = "more idle workers than keys waiting" + ("; split up below (means add up)" if verbose else "")
    # (label, stage, note, shown without verbose)
    rows: list[tuple[str, StageStats | None, str, bool]] = [
        ("API write (/trigger → API server → answer)", st["api_write"], "client call in the trigger handler", True),
        ("  /trigger handler, whole", st["trigger_handler"], "", False),
        ("write sent → informer handler", st.get("write_sent_to_informer"),
         "the write, etcd, the watch, the informer", True),
        ("  write answered → informer handler", st["write_to_informer"],
         f"{st['write_to_informer'].negative} events came before the write's answer (negative)", False),
        ("  watch chunk read → handler", st["watch_chunk_to_handler"], "JSON decode + cache update", False),
        ("queue add (call)", st["queue_add"], "", True),
        ("enqueue → worker Get", st["enqueue_to_get"], "all adds that queued a key", True),
        ("  … with a worker idle at the add", st["enqueue_to_get_idle"], "fewer reconciles running than workers",
         False),
        ("  … a worker free for it at the add", st["enqueue_to_get_free"],
         f"{share(st['enqueue_to_get_free'])}: {free_note}", True),
        ("    trigger loop thread on a core meanwhile", st["handoff_loop"], mean(st["handoff_loop"]), False),
        ("    informer thread on a core meanwhile", st["handoff_informer"], mean(st["handoff_informer"]), False),
        ("    other threads here (the worker too)", st["handoff_others"], mean(st["handoff_others"]), False),
        ("    no thread of this process on a core", st["handoff_idle"], mean(st["handoff_idle"]) +
         " (kernel wake-up, other processes)", False),
        ("    worker runnable, waiting for a core", st["handoff_runqueue"], mean(st["handoff_runqueue"]), False),
        ("  … no worker free: waits for a reconcile", st["enqueue_to_get_busy"],
         f"{share(st['enqueue_to_get_busy'])}: every idle worker had a key waiting already", True),
        *((f"  replay, instant hand-offs, {label}", bound[name], f"the same adds; {over(bound[name])}", False)
          for name, label in (("reconcile", "exact reconcile"), ("measured", "measured busy"))
          if name in bound),
        ("queue done (call)", st["queue_done"], "", True),
        ("worker busy per key (get → next get)", st["worker_busy"], "the reconcile and the worker's turnaround",
         True),
        ("reconcile", st["reconcile"],
         "simulated: sleep " + format_duration(reconcile) if reconcile is not None else "custom", True),
    ]
    lines = [f"{'stage':<44} {'median':>9} {'p95':>9} {'p99':>9} {'n':>7}  note", "-" * 100]
    for label, s, note, default in rows:
        if s is None or not (default or verbose):
            continue
        lines.append(f"{label:<44} {f(s.p50):>9} {f(s.p95):>9} {f(s.p99):>9} {s.n:>7}  {note}".rstrip())
    if slices and verbose:
        label = "    worker put on a core, per woken get"
        lines.append(f"{label:<44} {slices['p50']:>9.0f} {slices['p95']:>9.0f} {'':>9} {slices['n']:>7.0f}  "
                     f"times; mean {slices['mean']:.2f}, {slices['once']:.0%} once (the GIL free at its first try)")
    if micro:
        lines.append(f"{'queue add+get+done, one thread (microbench)':<44} {f(micro['cycle']):>9} "
                     f"{'':>9} {'':>9} {'':>7}  add {f(micro['add'])}, get {f(micro['get'])}, "
                     f"done {f(micro['done'])}; measured now")
    if not verbose:
        lines.append("(--verbose adds the stages' parts, the scheduler's share of each hand-off and the replays)")
    lines.append("")
    failed = f" | failed requests={load.errors}" if load is not None else ""
    lines.append(f"verification: {v.names} names, {v.triggers} triggers, {v.reconciles} reconciles | "
                 f"lost={v.lost} (names not reconciled after their last trigger) | same-key overlaps="
                 f"{v.violations}{failed} -> {_verdict_word(ok, interrupted)}")
    if v.lost_names:
        lines.append(f"  not reconciled after the last trigger: {', '.join(v.lost_names)}")
    return "\n".join(lines)


def format_stats_line(st: QueueStats, queue_len: int, stage: StageStats, triggers: int, events: int,
                      reconciles: int, lost: int) -> str:
    """The ``[STATS]`` line: the queue's counters ``st`` and length, the trigger handler's ``stage``, the pipeline's
    counters and the number of names not reconciled after their last trigger."""

    def ms(x: float) -> str:
        return "-" if math.isnan(x) else f"{x * 1e3:.2f}ms"

    return (f"[STATS] events={events:,} adds={st.adds:,} queued={st.queued:,} deduplicated={st.deduplicated:,} "
            f"marked={st.marked:,} reconciles={reconciles:,} queue.len={queue_len} "
            f"unreconciled-names={lost} | /trigger reqs={triggers:,} p50={ms(stage.p50)} p95={ms(stage.p95)} "
            f"p99={ms(stage.p99)}")


def _verdict_word(ok: bool, interrupted: bool) -> str:
    if not ok:
        return "FAILED"
    return "INTERRUPTED (verified so far)" if interrupted else "OK"
