"""``keyqueue-lab run``: the firehose (:mod:`keyqueue.lab.firehose`) from the command line. A generator floods a
few keys; workers drain them; the queue absorbs.

Log levels: by default one processing cycle of each followed key (``--follow``, default ``default/obj-0`` and
``default/obj-1``) is traced per ``--follow-every`` (default 1 s), with runs of no-op adds folded into one line;
``--verbose`` prints every event of every key; ``--quiet`` prints only the ``[STATS]`` lines. ``--slow-motion``
runs at a walking pace, holds ``default/obj-0`` for 2.5 s each time and prints every event.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TextIO

from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    add_json_argument,
    counted,
    format_count,
    format_duration,
    format_percent,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.firehose import FirehoseConfig, Sample, measure_generator_rate, run_firehose, slow_motion_config
from keyqueue.lab.firehose_view import PlainWriter, format_summary, live_view, plot_run
from keyqueue.lab.plot import PlotUnavailable, require_matplotlib
from keyqueue.ratelimit import RateLimiter

__all__ = ["add_arguments", "config_from_args", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = FirehoseConfig()
    parser.add_argument("--rate", type=float, default=None,
                        help=f"generator adds per second (default {d.rate:.0f}; slow motion 2)")
    parser.add_argument("--keys", type=int, default=None, help=f"distinct keys (default {d.keys}; slow motion 2)")
    parser.add_argument("--workers", type=int, default=None,
                        help=f"worker threads (default {d.workers}; slow motion 2)")
    parser.add_argument("--work", type=parse_duration, default=None,
                        help="how long a worker holds a key (default 5ms)")
    parser.add_argument("--fail", type=float, default=None,
                        help=f"probability that a reconcile fails (default {d.fail})")
    parser.add_argument("--duration", type=parse_duration, default=None,
                        help="how long the generator runs (default 10s, also in slow motion)")
    parser.add_argument("--slow-motion", action="store_true",
                        help="walking pace: 2 adds/s on 2 keys for 10s, default/obj-0 held 2.5s, every event "
                             "logged (about 6 lines/s)")
    parser.add_argument("--hold", type=parse_duration, default=None,
                        help="slow motion: how long default/obj-0 is held (default 2.5s)")
    parser.add_argument("--follow", action="append", metavar="KEY", default=None,
                        help="trace this key in the log (repeatable; default default/obj-0 and default/obj-1)")
    parser.add_argument("--follow-every", type=parse_duration, default=1.0,
                        help="trace one processing cycle of each followed key per this interval (default 1s; "
                             "0 = every cycle)")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("--verbose", "-v", action="store_true", help="log every event of every key")
    level.add_argument("--quiet", "-q", action="store_true", help="print only the [STATS] lines and the summary")
    parser.add_argument("--plain", action="store_true", help="no live view, plain lines even on a terminal")
    parser.add_argument("--seed", type=int, default=None, help="seed for the workers' failures")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="draw adds/s, processed/s and queue length over time (needs matplotlib: keyqueue[plot])")
    parser.add_argument("--backend", choices=("memory", "redis"), default="memory",
                        help="memory: keyqueue.RateLimitingQueue (default); redis: keyqueue.redis.RateLimitingQueue")
    parser.add_argument("--redis-url", default=None,
                        help="with --backend redis: an existing Redis (default $KEYQUEUE_REDIS_URL, else a fresh "
                             "redis-server)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve the queue's Prometheus metrics on this port during the run (if available)")
    add_json_argument(parser)


def config_from_args(args: argparse.Namespace) -> FirehoseConfig:
    """Build the run's config from parsed options (slow motion changes the defaults, explicit options win)."""
    given = {name: getattr(args, name) for name in ("rate", "keys", "workers", "work", "fail", "duration")
             if getattr(args, name) is not None}
    if args.hold is not None:
        given["slow_hold"] = args.hold
    if args.follow:
        given["follow"] = tuple(args.follow)
    given["follow_every"] = args.follow_every
    given["seed"] = args.seed
    if args.quiet:
        given["log"] = "none"
    elif args.verbose:
        given["log"] = "all"
    if args.slow_motion:
        return slow_motion_config(**given)
    return FirehoseConfig(**given)


def _start_metrics(port: int, out: TextIO) -> tuple[Any, Any]:
    """A Prometheus provider on a private registry and a ``/metrics`` server for it, or (None, None) with a
    message when the metrics extra is missing or the port cannot be bound (the run goes on without metrics)."""
    try:
        from prometheus_client import CollectorRegistry

        from keyqueue.metrics import PrometheusMetricsProvider, serve
    except ImportError as exc:
        print(f"run: --metrics-port: metrics are not available ({exc}); running without them", file=out)
        return None, None
    try:
        provider = PrometheusMetricsProvider(CollectorRegistry())
        server = serve(port, registry=provider.registry)
    except (OSError, ValueError) as exc:
        print(f"run: --metrics-port: could not serve metrics on port {port}: {exc}", file=out)
        return None, None
    print(f"run: the queue's metrics (name 'lab') are served at {server.url} during the run", file=out)
    return provider, server


def run(args: argparse.Namespace) -> int:
    """Exit status 0 after a run in which no key reached two workers at once; 1 otherwise; 2 for bad options
    (including a ``--rate`` beyond the generator's measured maximum); 130 if Ctrl-C cut the run short (after the
    summary of what ran)."""
    out = human_stream(args)
    try:
        config = config_from_args(args)
        config.validate()
    except (ValueError, TypeError) as exc:
        print(f"run: {exc}", file=out)
        return 2
    if config.rate > _RATE_CHECKED_ABOVE:
        ceiling = measure_generator_rate(config.keys)
        if config.rate > ceiling:
            print(f"run: --rate {config.rate:g} adds/s is more than the generator can make here: measured just now, "
                  f"at most {format_count(ceiling)} adds/s; choose a lower --rate", file=out)
            return 2
    if args.plot is not None:
        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            print(f"run: {exc}", file=out)
            return 2
    provider, server = _start_metrics(args.metrics_port, out) if args.metrics_port is not None else (None, None)
    mode = {"all": "every event of every key", "none": "only [STATS]",
            "follow": f"one cycle of {', '.join(config.follow)} every {format_duration(config.follow_every)}"}
    header = (
        f"firehose: {format_count(config.rate)} adds/s onto {counted(config.keys, 'key')} for "
        f"{format_duration(config.duration)}; {counted(config.workers, 'worker')} "
        f"{'holds' if config.workers == 1 else 'hold'} each key {format_duration(config.work)}"
        + (f" ({config.slow_key}: {format_duration(config.slow_hold)})" if config.slow_key else "")
        + f", fail {format_percent(config.fail, 0)} → add_rate_limited; log: {mode[config.log]}"
    )
    live = None
    on_sample: Callable[[Sample], None] | None = None
    use_live = not args.plain and out.isatty() and _has_rich()
    if use_live:
        live, write, on_sample = live_view(out, config)
    else:
        write = PlainWriter(out).write
    write(header)
    if live is not None:
        live.start()
    factory, redis_server = _redis_backend(args, write) if args.backend == "redis" else (None, None)
    try:
        result = run_firehose(config, write, on_sample=on_sample, metrics_provider=provider, queue_factory=factory)
    finally:
        if live is not None:
            live.stop()
        if server is not None:
            server.close()
        if factory is not None:
            factory.cleanup()
        if redis_server is not None:
            redis_server.stop()
    PlainWriter(out).write(format_summary(result))
    if args.plot is not None:
        plot_run(result, args.plot)
        PlainWriter(out).write(f"plot written to {args.plot}")
    write_json(args.json, result.summary())
    if result.interrupted:
        return EXIT_INTERRUPTED
    return 0 if result.violations == 0 else 1


def _redis_backend(args: argparse.Namespace, write: Callable[[str], None]) -> tuple[Any, Any]:
    """``--backend redis``: a factory for keyqueue.redis.RateLimitingQueue, and the RedisServer it started."""
    import os
    import uuid

    from keyqueue.redis import RateLimitingQueue as RedisRateLimitingQueue
    from keyqueue.redis import RedisServer

    url = args.redis_url or os.environ.get("KEYQUEUE_REDIS_URL")
    server = None if url else RedisServer().start()
    url = url or server.url  # type: ignore[union-attr]
    write(f"backend: keyqueue.redis on {url} (every add, get and done is one Redis round trip)")

    made: list[Any] = []

    class Factory:
        def __call__(self, limiter: RateLimiter[Hashable]) -> Any:
            q = RedisRateLimitingQueue(f"lab-{uuid.uuid4().hex[:8]}", url=url, rate_limiter=limiter, stats=True)
            made.append(q)
            return q

        def cleanup(self) -> None:  # the queue's state outlives the run in Redis: delete it
            for q in made:
                q.delete()
                q.close()

    return Factory(), server


_RATE_CHECKED_ABOVE = 100_000.0  # below this every machine keeps up; above it the CLI measures the generator first


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience for `python -m`
    parser = argparse.ArgumentParser(prog="keyqueue-lab run")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
