"""``keyqueue-lab backoff``: what the default controller limiter does to failing keys.

1. The per-key exponential table: the n-th consecutive failure of one key waits 5 ms · 2^(n-1), capped at 1000 s.
2. ``forget`` on success: the key's failure count is wiped and its next failure waits 5 ms again.
3. The thundering herd: 1000 keys fail at once into a :class:`~keyqueue.RateLimitingQueue` with the default
   limiter. The per-key part would bring them all back after 5 ms; the global token bucket (10/s, burst 100)
   lets 100 through at once and spaces the rest 100 ms apart. The run measures when the retries really come
   back (on the real clock by default) and reports their rate after the burst.

Every delay shown comes from :func:`keyqueue.default_controller_rate_limiter` itself. ``--plot`` draws the curve
and the herd's returns (:func:`backoff_figure`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from keyqueue.clock import Clock, FakeClock, RealClock
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    add_json_argument,
    check_size,
    format_count,
    format_duration,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.plot import PlotUnavailable, pyplot, require_matplotlib
from keyqueue.ratelimit import BucketRateLimiter, default_controller_rate_limiter
from keyqueue.threaded import RateLimitingQueue

__all__ = ["BackoffResult", "add_arguments", "backoff_figure", "herd_reference", "measure_herd", "plot_backoff", "run",
           "run_backoff"]


@dataclass(frozen=True, slots=True)
class HerdResult:
    """When the retries of a herd of keys that failed at once came back."""

    keys: int
    clock: str  #: "real" or "fake"
    window_s: float  #: how long the run watched for retries
    scheduling_s: float  #: time taken by the add_rate_limited calls themselves
    bucket_qps: float
    bucket_burst: int
    arrivals_s: list[float]  #: when each retry was handed out, seconds after the failures
    burst: int  #: retries back before half a bucket interval had passed (the bucket's burst)
    burst_span_s: float  #: when the last of the burst came back
    retry_rate: float  #: retries per second after the burst (first to last arrival in the window)
    returned: int  #: retries handed out within the window
    pending: int  #: retries still scheduled when the window closed (dropped by shut_down)
    last_due_s: float  #: when, by the bucket's arithmetic, the last retry of the herd is due
    interrupted: bool = False  #: Ctrl-C ended the watch early; ``window_s`` is how long it really watched


@dataclass(frozen=True, slots=True)
class BackoffResult:
    delays: list[float]  #: attempt 1..n of one key → delay in seconds
    requeues_before_forget: int
    requeues_after_forget: int
    delay_after_forget: float
    max_delay: float
    herd: HerdResult | None = field(default=None)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        herd = data.pop("herd")
        if herd is not None:
            data.update({f"herd_{k}": v for k, v in herd.items()})
        return data


def exponential_table(attempts: int = 20, key: str = "default/obj-1") -> tuple[list[float], int, int, float, float]:
    """Fail ``key`` ``attempts`` times in a fresh default controller limiter, then forget it and fail once more.

    Returns (delays, requeues before forget, requeues after forget, delay after forget, the per-key cap). The
    bucket never adds to these delays: ``attempts + 1`` calls stay within its burst of 100.
    """
    limiter = default_controller_rate_limiter()
    delays = [limiter.when(key) for _ in range(attempts)]
    before = limiter.num_requeues(key)
    limiter.forget(key)
    after = limiter.num_requeues(key)
    again = limiter.when(key)
    cap = max((getattr(child, "max_delay", 0.0) for child in limiter.limiters), default=0.0)
    return delays, before, after, again, float(cap)


MAX_HERD_KEYS = 1_000_000
MAX_ATTEMPTS = 1000


def measure_herd(keys: int = 1000, window: float = 4.0, *, fake_clock: bool = False,
                 step: float = 0.01, on_progress: Callable[[float, int], None] | None = None,
                 progress_every: float = 1.0) -> HerdResult:
    """Fail ``keys`` distinct keys at once into a default rate-limiting queue and watch retries for ``window`` s.

    On the real clock this blocks for ``window`` seconds, calling ``on_progress(seconds watched, retries back)``
    about every ``progress_every`` seconds; Ctrl-C (``KeyboardInterrupt`` in the calling thread) ends the watch
    early and the result says so (``interrupted``, ``window_s`` = how long it watched). With ``fake_clock=True``
    a :class:`FakeClock` is stepped by ``step`` seconds at a time and the run takes only as long as the
    computation. Raises ``ValueError`` for a non-positive window or step, or ``keys`` outside 1..1,000,000.
    """
    check_size("herd keys", keys, 1, MAX_HERD_KEYS)
    if not window > 0 or not step > 0:
        raise ValueError(f"window and step must be > 0 seconds, got {window!r} and {step!r}")
    clock: Clock = FakeClock() if fake_clock else RealClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=clock, stats=True)
    bucket = next(
        (child for child in getattr(q.rate_limiter, "limiters", ()) if isinstance(child, BucketRateLimiter)), None
    )
    qps = bucket.qps if bucket is not None else 0.0
    burst_size = bucket.burst if bucket is not None else 0
    names = [f"default/herd-{i}" for i in range(keys)]
    t0 = clock.now()
    for name in names:
        q.add_rate_limited(name)
    scheduling = clock.now() - t0
    arrivals: list[float] = []
    interrupted = False
    if isinstance(clock, FakeClock):
        while clock.now() - t0 < window - 1e-12:
            clock.step(min(step, window - (clock.now() - t0)))
            while True:
                try:
                    key = q.get(timeout=0)
                except TimeoutError:
                    break
                arrivals.append(clock.now() - t0)
                q.done(key)
    else:
        deadline = t0 + window
        next_progress = t0 + progress_every
        try:
            while True:
                now = clock.now()
                if now >= next_progress:
                    next_progress += progress_every
                    if on_progress is not None:
                        on_progress(now - t0, len(arrivals))
                remaining = deadline - now
                if remaining <= 0:
                    break
                try:
                    key = q.get(timeout=min(remaining, max(next_progress - now, 0.0)))
                except TimeoutError:
                    continue
                arrivals.append(clock.now() - t0)
                q.done(key)
        except KeyboardInterrupt:
            interrupted = True
            window = clock.now() - t0
    q.shut_down()
    half_interval = 0.5 / qps if qps > 0 else window
    burst = sum(1 for t in arrivals if t < half_interval)
    after = arrivals[burst:]
    rate = (len(after) - 1) / (after[-1] - after[0]) if len(after) >= 2 and after[-1] > after[0] else 0.0
    last_due = (keys - burst_size) / qps if qps > 0 and keys > burst_size else 0.0
    return HerdResult(
        keys=keys,
        clock="fake" if fake_clock else "real",
        window_s=window,
        scheduling_s=scheduling,
        bucket_qps=qps,
        bucket_burst=burst_size,
        arrivals_s=arrivals,
        burst=burst,
        burst_span_s=arrivals[burst - 1] if burst else 0.0,
        retry_rate=rate,
        returned=len(arrivals),
        pending=keys - len(arrivals),
        last_due_s=last_due,
        interrupted=interrupted,
    )


def run_backoff(attempts: int = 20, *, herd_keys: int = 1000, herd_window: float = 4.0,
                fake_clock: bool = False) -> BackoffResult:
    """The table, the reset and (if ``herd_keys > 0``) the herd. Blocks ``herd_window`` s on the real clock."""
    delays, before, after, again, cap = exponential_table(attempts)
    herd = measure_herd(herd_keys, herd_window, fake_clock=fake_clock) if herd_keys > 0 else None
    return BackoffResult(delays, before, after, again, cap, herd)


def format_result(r: BackoffResult) -> str:
    """The whole text report: the table and the reset, then the herd (if it ran)."""
    parts = [format_table(r)]
    if r.herd is not None:
        parts += [format_herd_start(r.herd.keys, r.herd.window_s, r.herd.clock), format_herd(r.herd)]
    return "\n".join(parts)


def format_table(r: BackoffResult) -> str:
    """The per-key table and the reset by ``forget`` (computed, no waiting)."""
    lines = [
        "Per-key exponential backoff (default controller limiter: max of 5ms·2^(n-1) capped at "
        f"{format_duration(r.max_delay)}, and a shared bucket)",
        "",
        "  consecutive failures of one key │ delay before it is added again",
        "  ────────────────────────────────┼───────────────────────────────",
    ]
    for i, d in enumerate(r.delays, 1):
        note = "   (the cap)" if d >= r.max_delay else ""
        lines.append(f"  {i:>31} │ {format_duration(d)}{note}")
    lines += [
        "",
        f"forget() after success: failures remembered {r.requeues_before_forget} → {r.requeues_after_forget}; "
        f"the next failure waits {format_duration(r.delay_after_forget)} again",
    ]
    return "\n".join(lines)


def format_herd_start(keys: int, window: float, clock: str) -> str:
    """The line printed before the herd is watched."""
    return (f"\nThundering herd: {format_count(keys)} keys fail at once (add_rate_limited each); watching their "
            f"retries come back for {format_duration(window)} on the {clock} clock …")


def format_herd(h: HerdResult) -> str:
    """What the herd's watch measured."""
    lines = [
        f"  {format_duration(h.scheduling_s)} to schedule the {format_count(h.keys)} retries; watched "
        f"{format_duration(h.window_s)}" + (" — interrupted" if h.interrupted else ""),
        f"  shared bucket                  : {h.bucket_qps:g}/s, burst {h.bucket_burst}",
        f"  back at once (the burst)       : {h.burst} retries, the last after "
        f"{format_duration(h.burst_span_s)}",
        f"  then                           : {h.returned - h.burst} retries at {h.retry_rate:.2f}/s "
        f"(measured; the bucket allows {h.bucket_qps:g}/s)",
        f"  still waiting at the end       : {format_count(h.pending)} (the last is due "
        f"{format_duration(h.last_due_s)} after the failure; shut_down dropped them)",
        "",
        "Without the bucket all of them would be back after 5ms; with it the herd trickles back at the "
        "bucket's rate.",
    ]
    return "\n".join(lines)


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
    plt = pyplot()
    fig = backoff_figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def backoff_figure(result: BackoffResult) -> Any:
    """The figure :func:`plot_backoff` saves (a matplotlib ``Figure``; the caller closes it)."""
    plt = pyplot()
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--attempts", type=int, default=20, help="rows of the per-key table (default 20)")
    parser.add_argument("--herd-keys", type=int, default=1000, help="keys failing at once (default 1000; 0: skip)")
    parser.add_argument("--herd-window", type=parse_duration, default=4.0,
                        help="how long to watch the herd's retries come back (default 4s)")
    parser.add_argument("--fake-clock", action="store_true",
                        help="run the herd on a stepped fake clock instead of waiting in real time")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="draw the backoff curve and the herd's returns (needs matplotlib: keyqueue[plot])")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    out = human_stream(args)
    if args.plot is not None:
        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            print(f"backoff: {exc}", file=out)
            return 2
    try:
        check_size("--attempts", args.attempts, 1, MAX_ATTEMPTS)
        check_size("--herd-keys", args.herd_keys, 0, MAX_HERD_KEYS)
        if not args.herd_window > 0:
            raise ValueError(f"--herd-window must be > 0, got {format_duration(args.herd_window)}")
    except ValueError as exc:
        print(f"backoff: {exc}", file=out)
        return 2
    started = time.monotonic()
    # The table needs no waiting: it comes first; the herd (seconds on the real clock) follows with progress.
    delays, before, after, again, cap = exponential_table(args.attempts)
    result = BackoffResult(delays, before, after, again, cap)
    print(format_table(result), file=out, flush=True)
    if args.herd_keys > 0:
        clock = "fake" if args.fake_clock else "real"
        print(format_herd_start(args.herd_keys, args.herd_window, clock), file=out, flush=True)
        herd = measure_herd(args.herd_keys, args.herd_window, fake_clock=args.fake_clock,
                            on_progress=_progress_printer(out))
        result = BackoffResult(delays, before, after, again, cap, herd)
        print(format_herd(herd), file=out)
    print(f"\n(elapsed {format_duration(time.monotonic() - started)})", file=out, flush=True)
    if args.plot is not None:
        plot_backoff(result, args.plot)
        print(f"plot written to {args.plot}", file=out, flush=True)
    write_json(args.json, result.summary())
    return EXIT_INTERRUPTED if result.herd is not None and result.herd.interrupted else 0


def _progress_printer(out: TextIO) -> Callable[[float, int], None]:
    def progress(watched: float, back: int) -> None:
        print(f"  … {format_duration(watched)}: {format_count(back)} retries back so far", file=out, flush=True)

    return progress
