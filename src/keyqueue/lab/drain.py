"""``keyqueue-lab drain``: ``shut_down()`` vs ``shut_down_with_drain()`` while workers hold keys.

The same scene is played three times on a fresh :class:`~keyqueue.DelayingQueue`:

* two workers each hold a key (their work is gated by an event, so "in flight" is certain, not a timing guess);
* one held key is added again (it is marked for redelivery), four more keys wait in the FIFO, one key has a
  delayed entry due in a minute;
* then the main thread calls ``shut_down()`` / ``shut_down_with_drain()`` / ``shut_down_with_drain(timeout)``
  and records when the call returned and what was finished at that moment; afterwards one late add is tried.

keyqueue's drain waits for the FIFO to empty and for every held key to be done (client-go's waits only for the
held keys). In all three, keys already queued are still handed out, delayed entries are dropped, late adds are
refused; what differs is whether the caller waited for the work.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from keyqueue._core import AddResult
from keyqueue.errors import ShutDown
from keyqueue.lab.common import add_json_argument, format_duration, human_stream, parse_duration, write_json
from keyqueue.threaded import DelayingQueue

__all__ = ["DrainArm", "DrainResult", "add_arguments", "run", "run_drain"]

HELD = ("default/obj-0", "default/obj-1")
QUEUED = ("default/obj-2", "default/obj-3", "default/obj-4", "default/obj-5")
DELAYED = "default/obj-later"
LATE = "default/obj-late"


@dataclass(frozen=True, slots=True)
class DrainArm:
    """One way of shutting down, and what it did."""

    call: str  #: the call made, e.g. "shut_down_with_drain()"
    returned: bool | None  #: its return value (None for shut_down, which returns nothing)
    returned_after_s: float  #: how long the call blocked
    finished_at_return: list[str]  #: keys whose work was finished when the call returned
    in_flight_at_return: int  #: keys held by a worker when the call returned
    queued_at_return: int  #: len(q) when the call returned
    processed: list[str]  #: every key finished by the workers, in order, by the end of the scene
    redelivered: list[str]  #: keys done() put back in the FIFO (re-added while held)
    dropped_delayed: list[str]  #: keys whose delayed entry never fired
    late_add: str  #: what an add after the call returned (AddResult name)

    @property
    def waited_for_work(self) -> bool:
        return self.in_flight_at_return == 0 and self.queued_at_return == 0


@dataclass(frozen=True, slots=True)
class DrainResult:
    work_s: float
    arms: list[DrainArm]

    def summary(self) -> dict[str, Any]:
        return {
            "work_s": self.work_s,
            "arms": [dict(asdict(arm), waited_for_work=arm.waited_for_work) for arm in self.arms],
            **{_slug(arm.call): dict(asdict(arm), waited_for_work=arm.waited_for_work) for arm in self.arms},
        }


def _slug(call: str) -> str:
    return "shut_down_with_drain_timeout" if "timeout" in call else call.split("(")[0]


def _scene(mode: str, work: float, drain_timeout: float) -> DrainArm:
    q: DelayingQueue[str] = DelayingQueue()
    lock = threading.Lock()
    held_now: set[str] = set()
    processed: list[str] = []
    redelivered: list[str] = []
    both_holding = threading.Barrier(len(HELD) + 1)
    release = threading.Event()

    def worker() -> None:
        first = True
        while True:
            try:
                key = q.get()
            except ShutDown:
                return
            with lock:
                held_now.add(key)
            if first:
                first = False
                both_holding.wait(10)
            release.wait(30)  # the work: gated, so it is certainly in flight when shutdown is called
            with lock:
                held_now.discard(key)
                processed.append(key)
            if q.done(key):
                with lock:
                    redelivered.append(key)

    for key in HELD:
        q.add(key)
    workers = [threading.Thread(target=worker, name=f"drain-worker-{i}", daemon=True) for i in range(len(HELD))]
    for t in workers:
        t.start()
    both_holding.wait(10)
    for key in (HELD[0], *QUEUED):
        q.add(key)  # HELD[0] is being processed: marked, it will come back once
    q.add_after(DELAYED, 60.0)

    releaser: threading.Timer | None = None
    started = time.monotonic()
    if mode == "shut_down":
        call, value = "shut_down()", None
        q.shut_down()
    elif mode == "drain":
        call = "shut_down_with_drain()"
        releaser = threading.Timer(work, release.set)  # the work in flight ends after `work` seconds
        releaser.start()
        value = q.shut_down_with_drain()
    else:
        call = f"shut_down_with_drain(timeout={format_duration(drain_timeout)})"
        value = q.shut_down_with_drain(drain_timeout)
    elapsed = time.monotonic() - started
    with lock:
        finished_at_return = list(processed)
        in_flight = len(held_now)
    queued = len(q)
    late = q.add(LATE)
    release.set()
    for t in workers:
        t.join(30)
    if releaser is not None:
        releaser.join()
    done_keys = set(processed)
    return DrainArm(
        call=call,
        returned=value,
        returned_after_s=elapsed,
        finished_at_return=finished_at_return,
        in_flight_at_return=in_flight,
        queued_at_return=queued,
        processed=processed,
        redelivered=redelivered,
        dropped_delayed=[k for k in (DELAYED,) if k not in done_keys],
        late_add=AddResult(late).name,
    )


def run_drain(work: float = 0.2, drain_timeout: float = 0.05) -> DrainResult:
    """Play the scene with ``shut_down()``, ``shut_down_with_drain()`` and ``shut_down_with_drain(timeout)``.

    ``work``: how long the held keys stay in flight after a drain starts (real time; the drain arm blocks about
    that long). ``drain_timeout``: the third arm's timeout (its work is released only after the call returns).
    """
    if not work >= 0 or not drain_timeout >= 0:
        raise ValueError(f"work and drain_timeout must be >= 0 seconds, got {work!r} and {drain_timeout!r}")
    return DrainResult(work, [_scene("shut_down", work, drain_timeout), _scene("drain", work, drain_timeout),
                              _scene("timeout", work, drain_timeout)])


def format_result(r: DrainResult) -> str:
    lines = [
        f"Scene: 2 workers hold {', '.join(HELD)} (work in flight); {HELD[0]} is added again while held; "
        f"{len(QUEUED)} keys wait in the FIFO; {DELAYED} is due in 60s. Then the shutdown call:",
        "",
    ]
    rows: list[tuple[str, list[str]]] = [
        ("call", [a.call for a in r.arms]),
        ("returned", [repr(a.returned) for a in r.arms]),
        ("blocked for", [format_duration(a.returned_after_s) for a in r.arms]),
        ("finished when it returned", [f"{len(a.finished_at_return)} keys" for a in r.arms]),
        ("still held when it returned", [str(a.in_flight_at_return) for a in r.arms]),
        ("len(q) when it returned", [str(a.queued_at_return) for a in r.arms]),
        ("processed in the end", [f"{len(a.processed)} keys" for a in r.arms]),
        ("re-added while held", [", ".join(a.redelivered) or "-" for a in r.arms]),
        ("delayed entry", ["dropped" if a.dropped_delayed else "fired" for a in r.arms]),
        ("an add after the call", [a.late_add for a in r.arms]),
    ]
    label_w = max(len(label) for label, _ in rows)
    col_w = [max(len(values[i]) for _, values in rows) for i in range(len(r.arms))]
    for label, values in rows:
        lines.append(f"{label:<{label_w}} │ " + " │ ".join(f"{v:<{col_w[i]}}" for i, v in enumerate(values)))
    lines += [
        "",
        "shut_down() returns at once: the caller cannot tell when the work is finished, though workers still get",
        "the keys already queued. shut_down_with_drain() returns True only when the FIFO is empty and no key is held",
        "— everything queued or re-added while held was processed first. With a timeout it gives up and returns",
        "False, the work still in flight. Delayed entries are dropped and later adds refused in every case.",
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--work", type=parse_duration, default=0.2,
                        help="how long the held keys stay in flight once the drain starts (default 200ms)")
    parser.add_argument("--drain-timeout", type=parse_duration, default=0.05,
                        help="the timeout of the third arm (default 50ms)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit status 0 if the three arms behaved as documented, else 1."""
    out = human_stream(args)
    try:
        result = run_drain(args.work, args.drain_timeout)
    except ValueError as exc:
        print(f"drain: {exc}", file=out)
        return 2
    print(format_result(result), file=out, flush=True)
    write_json(args.json, result.summary())
    plain, drained, timed_out = result.arms
    everything = len(HELD) + len(QUEUED) + 1  # + the redelivery of HELD[0]
    ok = (
        plain.in_flight_at_return == len(HELD) and not plain.finished_at_return
        and drained.returned is True and drained.waited_for_work and len(drained.finished_at_return) == everything
        and timed_out.returned is False and timed_out.in_flight_at_return == len(HELD)
        and all(len(a.processed) == everything and a.dropped_delayed == [DELAYED] and a.late_add == "DROPPED"
                for a in result.arms)
    )
    return 0 if ok else 1
