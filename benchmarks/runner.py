"""``python -m benchmarks``: run every row side by side in one process, print the table, write JSON, draw the plot.

Exit status: 0 when every selected row ran (targets missed or not — a MISS is a finding, not a crash; pass
``--fail-on-miss`` to make it 1), 2 when a row raised (a broken benchmark must not look like a skipped one).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cases import build_cases
from benchmarks.harness import (
    Case,
    Check,
    Context,
    Measurement,
    Result,
    Skip,
    evaluate,
    fmt_value,
    format_table,
    format_targets,
    machine_info,
    write_json,
)

__all__ = ["main", "select"]

G_API = "API server (benchmarks/bench_apiserver.py)"

HARNESS = (
    "timeit.Timer (statement compiled into the timing loop, gc off while timing); autorange to calibrate and warm "
    "up; median of repeats. Batch rows: Timer.repeat(number=1) with fresh state built by the untimed setup. "
    "Threaded scenarios: perf_counter around the scenario, repeated."
)


def select(cases: Sequence[Case], pattern: str | None) -> list[Case]:
    """The cases whose id or name matches ``pattern`` (a case-insensitive regex), plus the rows they compare with
    (baseline, target references, ``needs``), in table order. ``None`` selects everything."""
    if pattern is None:
        return list(cases)
    rx = re.compile(pattern, re.IGNORECASE)
    by_id = {c.id: c for c in cases}
    wanted = {c.id for c in cases if rx.search(c.id) or rx.search(c.name)}
    stack = list(wanted)
    while stack:
        c = by_id[stack.pop()]
        deps = [*c.needs, *(chk.ref for chk in c.checks if chk.ref), *([c.baseline] if c.baseline else [])]
        for d in deps:
            if d in by_id and d not in wanted:
                wanted.add(d)
                stack.append(d)
    return [c for c in cases if c.id in wanted]


def _apiserver_cases(smoke: bool) -> tuple[list[Case], list[tuple[Case, str]]]:
    """Rows from ``benchmarks/bench_apiserver.py`` (the API-server issue's script) if that file exists.

    It may define ``cases(smoke) -> list[Case]`` (rows built with :mod:`benchmarks.harness`), or — what it does
    now — ``measure(backend, iterations, warmup) -> {metric: {"n", "median_ms", "min_ms", "max_ms", "p99_ms"}}``
    and ``TARGETS_MS``. Full runs use the etcd backend and the script's default sizes (300 iterations after 30
    warm-up); ``--smoke`` uses the in-memory backend, 20 iterations after 5 (no etcd process needed).
    """
    if not (Path(__file__).resolve().parent / "bench_apiserver.py").exists():
        return [], []
    placeholder = Case("apiserver", "API server latency (benchmarks/bench_apiserver.py)", G_API,
                       lambda ctx: Skip("not run"))
    try:
        mod = importlib.import_module("benchmarks.bench_apiserver")
    except Exception as e:
        return [], [(placeholder, f"import failed: {type(e).__name__}: {e}")]
    make = getattr(mod, "cases", None)
    if callable(make):
        return list(make(smoke)), []
    measure = getattr(mod, "measure", None)
    if not callable(measure):
        return [], [(placeholder, "bench_apiserver defines neither cases(smoke) nor measure(...)")]
    backend, iterations, warmup = ("memory", 20, 5) if smoke else ("etcd", 300, 30)
    targets: Mapping[str, float] = getattr(mod, "TARGETS_MS", {})
    memo: dict[str, Any] = {}

    def row(metric: str) -> Any:
        def run(ctx: Context) -> Measurement | Skip:
            if "out" not in memo:
                try:
                    memo["out"] = measure(backend, iterations, warmup)
                except Exception as e:  # no etcd binary, port trouble ...: say so, do not fail the whole run
                    memo["out"] = Skip(f"bench_apiserver.measure({backend!r}) raised {type(e).__name__}: {e}")
            out = memo["out"]
            if isinstance(out, Skip):
                return out
            r = out[metric]
            return Measurement(
                "ms", [r["median_ms"]], ops=int(r["n"]),
                note=f"{backend} backend, {int(r['n'])} iterations, p99 {r['p99_ms']:.2f} ms",
                extra=dict(r), summary={"median": r["median_ms"], "min": r["min_ms"], "max": r["max_ms"],
                                        "n": r["n"]},
            )
        return run

    names = {"update": "ConfigMap replace (PUT, CAS)", "patch": "ConfigMap strategic-merge patch",
             "write->watch": "patch → watch event at a 2nd client"}
    made = []
    for metric, label in names.items():
        target = targets.get(metric) if backend == "etcd" else None  # the targets are for the etcd backend
        checks = (Check(f"≤ {target:g} ms", "le", float(target)),) if target is not None else ()
        made.append(Case(f"apiserver.{metric.replace('->', '_')}", f"{label} ({backend})", G_API, row(metric),
                         checks=checks))
    return made, []


def _pipeline_cases(smoke: bool) -> tuple[list[Case], list[tuple[Case, str]]]:
    """The rows of ``benchmarks/bench_pipeline.py``, or one skipped row saying why they cannot run here (the
    pipeline needs the ``lab`` extra: the API server, the kubernetes client, aiohttp)."""
    try:
        mod = importlib.import_module("benchmarks.bench_pipeline")
    except ImportError as e:
        placeholder = Case("pipeline", "pipeline (benchmarks/bench_pipeline.py)", "pipeline",
                           lambda ctx: Skip("not run"))
        return [], [(placeholder, f"import failed: {type(e).__name__}: {e}")]
    return list(mod.cases(smoke)), []


def _run_all(
    cases: Sequence[Case], ctx: Context
) -> tuple[list[Result], list[tuple[Case, str]], list[tuple[Case, str]]]:
    """Interleaved rows first (``ctx.rounds`` passes over all of them, values pooled), then the others in order.
    Returns the results in table order, the skips and the errors."""
    skipped: dict[str, str] = {}
    errors: dict[str, str] = {}
    inter = [c for c in cases if c.interleave]
    rest = [c for c in cases if not c.interleave]
    plan = [(c, rnd) for rnd in range(ctx.rounds) for c in inter] + [(c, 0) for c in rest]
    for i, (case, rnd) in enumerate(plan, 1):
        if case.id in skipped or case.id in errors:
            continue
        ctx.current = case.id
        t0 = time.perf_counter()
        tag = f" r{rnd + 1}" if case.interleave and ctx.rounds > 1 else ""
        print(f"[{i:3}/{len(plan)}] {case.id + tag:24} ", end="", file=sys.stderr, flush=True)
        try:
            out = case.run(ctx)
        except Exception as e:
            errors[case.id] = "".join(traceback.format_exception_only(type(e), e)).strip()
            print(f"ERROR {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            continue
        took = time.perf_counter() - t0
        if isinstance(out, Skip):
            skipped[case.id] = out.reason
            print(f"skipped: {out.reason}", file=sys.stderr)
            continue
        prev = ctx.results.get(case.id)
        if prev is not None:  # a later round: pool the values
            out.values = prev.m.values + out.values
            out.ops += prev.m.ops
        r = ctx.results[case.id] = Result(case, out)
        print(f"{fmt_value(r.median, r.m.unit):>16}  ({took:.1f} s)", file=sys.stderr)
    results = [ctx.results[c.id] for c in cases if c.id in ctx.results]
    return (results, [(c, skipped[c.id]) for c in cases if c.id in skipped],
            [(c, errors[c.id]) for c in cases if c.id in errors])


# CPython primitives on the reference machine (benchmarks/REFERENCE.md), midpoints of the quoted ranges.
_REFERENCE_PRIMITIVES = {"base.queue": 1080.0, "base.lock": 61.0, "base.simplequeue": 39.0, "base.set_in": 11.5}


def _machine_vs_reference(results: Mapping[str, Result]) -> str:
    """How fast this machine runs CPython primitives compared with the reference machine of benchmarks/REFERENCE.md."""
    parts = [
        f"{rid} {results[rid].median:,.1f} ns ({results[rid].median / ref:.2f}x)"
        for rid, ref in _REFERENCE_PRIMITIVES.items() if rid in results
    ]
    if not parts:
        return ""
    return ("this machine vs the reference machine of benchmarks/REFERENCE.md (CPython primitives, this run / "
            "reference): " + ", ".join(parts))


def plot_scaling(path: str, results: Sequence[Result], info: Mapping[str, Any]) -> str | None:
    """Draw the scaling curve to ``path``. Returns an error text instead of raising if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"--plot needs matplotlib (pip install 'keyqueue[plot]'): {e}"
    by_id = {r.case.id: r for r in results}
    rows = [r for r in results if "keys_queued" in r.m.extra]
    if not rows:
        return "--plot: no scaling rows were measured (check --only)"
    xs = [r.m.extra["keys_queued"] for r in rows]
    ys = [r.median for r in rows]
    err = [[y - r.min for y, r in zip(ys, rows, strict=True)], [r.max - y for y, r in zip(ys, rows, strict=True)]]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label="keyqueue add+get+done (median, min–max)")
    for rid, style, label in (("cycle", ":", "keyqueue, one key"), ("base.queue", "--", "queue.Queue put+get"),
                              ("base.naive", "-.", "naive locked workqueue")):
        if rid in by_id:
            ax.axhline(by_id[rid].median, linestyle=style, color="grey", label=f"{label}: {by_id[rid].median:.0f} ns")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("distinct keys queued (steady state)")
    ax.set_ylabel("ns per add+get+done")
    ax.set_title(f"keyqueue cost per cycle vs queue size — Python {info['python']}, {info['date'][:10]}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure keyqueue against its baselines in one run; print the table, optionally write JSON.",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 repeats: checks the benchmarks run (CI)")
    ap.add_argument("--json", metavar="PATH", help="write the full report as JSON ('-' for stdout)")
    ap.add_argument("--plot", metavar="PNG", help="draw the scaling curve (needs matplotlib)")
    ap.add_argument("--only", metavar="PATTERN",
                    help="regex on row ids/names; the rows they compare with are run too")
    ap.add_argument("--rounds", type=int, default=None, metavar="N",
                    help="interleaved passes over the per-operation rows (default 3; 1 with --smoke)")
    ap.add_argument("--timer", choices=("wall", "cpu"), default="wall",
                    help="what the per-operation and batch rows time: wall clock (default) or this thread's CPU "
                         "time (less inflated when other processes load the machine)")
    ap.add_argument("--list", action="store_true", help="list the row ids and exit")
    ap.add_argument("--fail-on-miss", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)

    plugin_cases, plugin_skips = _apiserver_cases(args.smoke)
    from benchmarks.bench_redis import cases as redis_cases

    pipeline_cases, pipeline_skips = _pipeline_cases(args.smoke)
    plugin_skips += pipeline_skips
    cases = build_cases(args.smoke) + plugin_cases + redis_cases(args.smoke) + pipeline_cases
    if args.list:
        for c in cases:
            print(f"{c.id:24} {c.name}")
        return 0
    chosen = select(cases, args.only)
    if not chosen:
        print(f"--only {args.only!r} matches no row; see --list", file=sys.stderr)
        return 2

    info = machine_info()
    out = sys.stderr if args.json == "-" else sys.stdout
    print(f"keyqueue benchmarks{' (SMOKE: tiny sizes, numbers not meaningful)' if args.smoke else ''}: "
          f"{len(chosen)} rows on {info['cpu_model']} ({info['cpu_count']} CPUs), Python {info['python']}, "
          f"{info['date']}, load average {info['loadavg_at_start']}", file=sys.stderr)
    rounds = args.rounds if args.rounds is not None else (1 if args.smoke else 3)
    if rounds < 1:
        print("--rounds must be >= 1", file=sys.stderr)
        return 2
    ctx = Context(smoke=args.smoke, rounds=rounds, timer=time.thread_time if args.timer == "cpu" else time.perf_counter)
    t0 = time.perf_counter()
    results, skipped, errors = _run_all(chosen, ctx)
    skipped = plugin_skips + skipped
    elapsed = time.perf_counter() - t0
    evaluate(ctx.results)
    try:
        load_end: list[float] | None = list(os.getloadavg())
    except OSError:
        load_end = None

    print(file=out)
    print(f"machine: {info['cpu_model']}, {info['cpu_count']} CPUs, {info['platform']}", file=out)
    print(f"python:  {info['python_implementation']} {info['python']} ({info['python_build']})", file=out)
    print(f"date:    {info['date']}   keyqueue {info['keyqueue_version']} @ {info['git_commit']}   "
          f"run took {elapsed:.0f} s   load avg start {info['loadavg_at_start']} end {load_end}", file=out)
    print(f"source:  keyqueue from {info['keyqueue_path']}", file=out)
    print(f"harness: {HARNESS}", file=out)
    if args.timer == "cpu":
        print("timer:   --timer cpu: per-operation and batch rows are this thread's CPU time (time.thread_time), "
              "not wall time", file=out)
    print("ratio = this row's median / its baseline's median (below 1 = faster). client-go figures are reference "
          "only (benchmarks/REFERENCE.md), not measured in this run.", file=out)
    print(file=out)
    print(format_table(results, skipped), file=out)
    calib = _machine_vs_reference(ctx.results)
    if calib:
        print("\n" + calib, file=out)
    targets = format_targets(results)
    if targets:
        print("\ntargets:", file=out)
        print(targets, file=out)
    if errors:
        print("\nERRORS (benchmarks that raised):", file=out)
        for c, msg in errors:
            print(f"  {c.id}: {msg}", file=out)

    plot_error = None
    if args.plot:
        plot_error = plot_scaling(args.plot, results, info)
        print(f"\nplot: {plot_error or 'wrote ' + args.plot}", file=out)

    if args.json:
        scaling = ctx.results.get("scale.flatness")
        payload: dict[str, Any] = {
            "schema": "keyqueue-benchmarks/1",
            "date": info["date"],
            "smoke": args.smoke,
            "argv": list(sys.argv[1:] if argv is None else argv),
            "machine": info,
            "loadavg_at_end": load_end,
            "duration_s": elapsed,
            "harness": HARNESS,
            "timer": args.timer,
            "results": [r.to_json() for r in results],
            "skipped": [{"id": c.id, "name": c.name, "reason": why} for c, why in skipped],
            "errors": [{"id": c.id, "name": c.name, "error": msg} for c, msg in errors],
            "scaling": scaling.m.extra | {"flatness": scaling.median} if scaling is not None else None,
            "plot": None if not args.plot else {"path": args.plot, "error": plot_error},
        }
        write_json(args.json, payload)

    if errors:
        return 2
    if args.fail_on_miss and any(r.verdict == "MISS" for r in results):
        return 1
    return 0
