"""Where the milliseconds live: POST /trigger → API server → etcd → watch → informer → queue → worker.

    python benchmarks/bench_pipeline.py [--smoke] [--requests N] [--concurrency C] [--backend etcd|memory]
                                        [--modes process,inprocess] [--no-floor] [--pin] [--trigger-process]
                                        [--json PATH]

For each mode (the test API server in a child process, as a real cluster's would be, and/or in threads of the
pipeline's own process), one :class:`keyqueue.lab.pipeline.Pipeline` is started (etcd with fsync on, 4 workers,
2 ms simulated reconcile, logging off), warmed up with 40 triggers (not measured), and then driven by the load
generator in a child process (so the client does not compete for the pipeline's GIL): first at concurrency 1
(the latency floor, unless ``--no-floor``), then ``--requests`` at ``--concurrency``. Every stage is measured
inside the pipeline with ``perf_counter_ns`` (see :mod:`keyqueue.lab.pipeline`); the CPU time each process used
per trigger comes from ``/proc/<pid>/stat`` (10 ms ticks; the load generator measures its own).

Targets (200 requests at concurrency 10, etcd): /trigger p50 ≤ 3 ms and p99 ≤ 10 ms (the trigger
handler's time, server side, as in the seed's [STATS] line), informer → enqueue median ≤ 300 µs, enqueue →
worker Get median ≤ 100 µs with idle workers. With etcd's fsync on: at concurrency 10 ≥ 1,200 triggers/s
(the load generator's rate) with /trigger p50 ≤ 9 ms and p99 ≤ 25 ms; at concurrency 1 /trigger p50 ≤ 1.5 ms.
Enqueue → worker Get median ≤ 300 µs at concurrency 10 (all adds that queued a key; printed at
concurrency 1 too). Reported, never asserted: a MISS is a finding; the CPU time per trigger of each process (load
generator, the pipeline with its trigger server, the API server, etcd) and of the pipeline's own threads (trigger
loop, informer, workers, other) shows where the next step is, and the stage table splits each idle worker's add →
get gap into who was on a core meanwhile (:mod:`keyqueue.lab.handoff`). The adds that queued a key are split into
those a worker was free for and those that waited for a reconcile to end, and the same adds are replayed on instant
workers (:mod:`keyqueue.lab.replay`: how many would wait > 300 µs even then, the part the load's bursts set). The
machine's load average is printed before and after, since the targets are absolute figures.

``--trigger-process`` measures the other arrangement of the writer: the trigger server in a child process of its own
(``PipelineConfig.trigger_process``; in a cluster the writes come from kubectl or another service, not from the
controller's process), so the pipeline process holds only the informer, the queue and the workers. The rows of
``python -m benchmarks`` keep the trigger server in the pipeline's process.

``--pin`` measures a bound, it is not a setting to win a row with: the pipeline process's threads get CPU 1 to
themselves and its children (the API server, etcd, the load generator) share CPU 0, the same two cores split so
that the pipeline never waits for a core behind them (other work on the machine still can).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from keyqueue.apiserver import find_etcd_binary
from keyqueue.lab.common import format_duration, write_json
from keyqueue.lab.load import run_load_subprocess
from keyqueue.lab.pipeline import Pipeline, PipelineConfig
from keyqueue.lab.pipeline_stages import microbench_queue

if TYPE_CHECKING:
    from benchmarks.harness import Case, Context, Measurement, Skip

TARGETS = (
    ("/trigger p50", "trigger_handler", "p50", 3e-3),
    ("/trigger p99", "trigger_handler", "p99", 10e-3),
    ("informer → enqueue median", "write_to_informer", "p50", 300e-6),
    ("enqueue → worker Get median (idle worker)", "enqueue_to_get_idle", "p50", 100e-6),
    ("/trigger p50 (etcd fsync on)", "trigger_handler", "p50", 9e-3),
    ("/trigger p99 (etcd fsync on)", "trigger_handler", "p99", 25e-3),
    ("enqueue → worker Get median (all adds)", "enqueue_to_get", "p50", 300e-6),
)
FLOOR_TARGETS = (
    ("/trigger p50 at concurrency 1", "trigger_handler", "p50", 1.5e-3),
    ("enqueue → worker Get median (at 10)", "enqueue_to_get", "p50", 300e-6),
)
RATE_TARGET = 1200.0  # triggers/s at concurrency 10


def _ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _thread_cpu_ns() -> dict[str, int]:
    """CPU time so far of each group of this process's threads (ns, from ``/proc/self/task/*/schedstat``):
    the trigger server's loop, the informer, the workers, everything else. Empty where ``/proc`` is missing."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    groups: dict[str, int] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return groups
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
                ns = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
        name = names.get(int(tid), "")
        group = ("trigger loop" if name.startswith("trigger-server") else "informer" if name.startswith("informer")
                 else "workers" if name.startswith("pipeline-worker") else "other")
        groups[group] = groups.get(group, 0) + ns
    return groups


def _fmt(seconds: float) -> str:
    return "-" if math.isnan(seconds) else format_duration(seconds)


def run_phase(p: Pipeline, requests: int, concurrency: int, keys: int) -> dict[str, Any]:
    """One measured load against a running pipeline (after resetting its samples)."""
    p.reset_measurements()
    pids = p.process_ids()
    hz = os.sysconf("SC_CLK_TCK")
    before = {name: _ticks(pid) for name, pid in pids.items()}
    threads_before = _thread_cpu_ns()
    t0 = time.perf_counter()
    load = run_load_subprocess(p.url, requests, concurrency, keys)
    settled = p.wait_reconciled(30.0)
    wall = time.perf_counter() - t0
    after = {name: _ticks(pid) for name, pid in pids.items()}
    threads_after = _thread_cpu_ns()
    cpu: dict[str, float] = {}
    for name in pids:
        b, a = before[name], after[name]
        if a is not None and b is not None:
            cpu[name] = (a - b) / hz / max(1, load.requests)
    if pids.get("apiserver") == pids["pipeline"]:
        cpu.pop("apiserver", None)  # same process: counted under "pipeline"
    cpu["load generator"] = load.cpu_s / max(1, load.requests)  # measured inside it, without its start-up
    stages = p.stages()
    return {
        "requests": requests,
        "concurrency": concurrency,
        "settled": settled,
        "wall_s": wall,
        "load": load.summary(),
        "stages": {k: vars(v) for k, v in stages.items()},
        "cpu_per_trigger_s": cpu,
        # this process's threads (when the API server runs here too, its threads are under "other")
        "thread_cpu_per_trigger_s": {k: (v - threads_before.get(k, 0)) / 1e9 / max(1, load.requests)
                                     for k, v in threads_after.items()},
        "handoff_slices": p.handoff_slices(),
        "replay_bound": {k: vars(v) for k, v in p.replay_bound().items()},
        "verification": {**vars(p.verify()), "ok": p.verify().ok},
        "report": p.report(verbose=True),
    }


def _pin_pipeline_threads(cpu: int) -> None:
    """``--pin``: every thread of this process but the calling one (the main thread, which only waits for the load
    generator) to ``cpu``. The children (API server, etcd, load generator) keep the main thread's CPU."""
    me = threading.get_native_id()
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != me:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), {cpu})


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cfg = PipelineConfig(backend=args.backend, workers=args.workers, reconcile=args.reconcile, log_lines=0,
                         stats_interval=0, apiserver_process=(mode == "process"),
                         trigger_process=getattr(args, "trigger_process", False), switch_interval=args.switch_interval)
    saved = os.sched_getaffinity(0) if args.pin else None
    if args.pin:
        os.sched_setaffinity(0, {0})  # this thread: every thread and child started from here inherits CPU 0
    try:
        return _run_mode(mode, cfg, args)
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)


def _run_mode(mode: str, cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, Any]:
    with Pipeline(cfg, out=sys.stderr) as p:
        if args.pin:
            _pin_pipeline_threads(1)
        run_load_subprocess(p.url, args.warmup, min(4, args.concurrency), args.keys)  # warm-up, not measured
        assert p.wait_reconciled(30.0)
        phases = []
        if args.floor:
            phases.append(run_phase(p, max(20, args.requests // 2), 1, args.keys))
        phases.append(run_phase(p, args.requests, args.concurrency, args.keys))
        load_cpu = os.getloadavg()
    print(f"load average after the {mode} mode: {load_cpu[0]:.2f}", file=sys.stderr)
    return {"mode": mode, "trigger_process": cfg.trigger_process, "phases": phases, "loadavg_after": load_cpu}


def print_mode(result: dict[str, Any]) -> None:
    label = {"process": "API server in a child process", "inprocess": "API server in the pipeline's process"}
    where = ", trigger server in a child process" if result.get("trigger_process") else ""
    print(f"\n=== {label[result['mode']]}{where} ===")
    for phase in result["phases"]:
        load = phase["load"]
        print(f"\n-- {phase['requests']} requests at concurrency {phase['concurrency']}: "
              f"{load['rps']:,.0f} req/s, client round trip p50={load['p50_ms']:.2f}ms p99={load['p99_ms']:.2f}ms, "
              f"errors={load['errors']}")
        print(phase["report"])
        cpu = ", ".join(f"{k} {v * 1e6:,.0f}µs" for k, v in phase["cpu_per_trigger_s"].items())
        print(f"CPU per trigger: {cpu}")
        threads = ", ".join(f"{k} {v * 1e6:,.0f}µs" for k, v in sorted(phase["thread_cpu_per_trigger_s"].items()))
        print(f"CPU per trigger in the pipeline's threads: {threads}")
        stages, all_adds = phase["stages"], phase["stages"]["enqueue_to_get"]["n"]
        if all_adds:
            free, busy = stages["enqueue_to_get_free"], stages["enqueue_to_get_busy"]
            bound = phase["replay_bound"]
            replayed = ", ".join(f"{name} {b['above'] / b['n']:.0%}" for name, b in bound.items() if b["n"])
            print(f"enqueue → Get: {free['n'] / all_adds:.0%} of the adds found a worker free (median "
                  f"{_fmt(free['p50'])}), {busy['n'] / all_adds:.0%} waited for a reconcile (median "
                  f"{_fmt(busy['p50'])}); the same adds on instant workers wait > 300µs: {replayed or '-'}")
        if phase["concurrency"] > 1:
            rate = load["rps"]
            print(f"  target {'triggers/s (load generator)':<44} {rate:>9,.0f} (≥ {RATE_TARGET:,.0f})  "
                  f"{'ok' if rate >= RATE_TARGET else 'MISS'}")
        targets = TARGETS if phase["concurrency"] > 1 else FLOOR_TARGETS
        for name, stage, stat, limit in targets:
            value = phase["stages"][stage][stat]
            verdict = "-" if math.isnan(value) else ("ok" if value <= limit else "MISS")
            negative, n = phase["stages"][stage]["negative"], phase["stages"][stage]["n"]
            if negative:  # a signed difference: say how much of the distribution is below zero
                verdict += f" ({negative} of {n} samples negative: the event came before the write's answer)"
            print(f"  target {name:<44} {_fmt(value):>9} (≤ {_fmt(limit)})  {verdict}")


def decode_microbench(n: int = 5000) -> dict[str, float]:
    """Seconds per watch line: the informer's ``json.loads`` against ``watch.Watch``'s decoding into ``V1ConfigMap``
    (the figure the :mod:`keyqueue.informer.informer` docstring quotes), on a small ConfigMap MODIFIED event."""
    import json
    import timeit

    from kubernetes import watch

    line = json.dumps({"type": "MODIFIED", "object": {
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "obj-7", "namespace": "default", "uid": "d390ea30-26d3-4b01-a904-0586046de60e",
                     "resourceVersion": "197", "creationTimestamp": "2026-11-29T22:38:06Z"},
        "data": {"trigger-seq": "12", "trigger-run": "abcd1234"}}})
    w: Any = cast(Any, watch.Watch)()  # its constructor is untyped
    try:
        informer = min(timeit.repeat(lambda: json.loads(line), number=n, repeat=3)) / n
        official = min(timeit.repeat(lambda: w.unmarshal_event(line, "V1ConfigMap"), number=n, repeat=3)) / n
    finally:
        w._api_client.close()
    return {"json_loads_s": informer, "watch_unmarshal_event_s": official}


G_PIPELINE = "pipeline (benchmarks/bench_pipeline.py: trigger → API server → etcd → informer → queue → worker)"


def cases(smoke: bool, run: Callable[[str, argparse.Namespace], dict[str, Any]] | None = None) -> list[Case]:
    """The issue-18 pipeline rows of ``python -m benchmarks``: one pipeline run (etcd with fsync on, the API server
    in a child process, 4 workers, 2 ms reconciles), whose concurrency-1 phase (500 triggers) is the baseline of its
    concurrency-10 phase (1,000 triggers), both in the same run; then the same run with the trigger server in a
    child process (``pipeline.get_tp``, against ``pipeline.get``). ``--smoke`` skips them: starting etcd, the API
    server and the load generator takes longer than the whole smoke run, and ``tests/pipeline`` runs this script's
    own ``--smoke``. A run whose final check (every triggered name reconciled after its last trigger) fails, or that
    had load errors, raises: its figures would not describe a working pipeline. ``run`` replaces :func:`run_mode`
    (tests).
    """
    # Imported here: this file also runs as a script (``python benchmarks/bench_pipeline.py``), where the
    # ``benchmarks`` package is not importable before main() puts the project on the path.
    from benchmarks.harness import Case, Check, Measurement, Skip

    run_pipeline = run_mode if run is None else run
    args = argparse.Namespace(backend="etcd", workers=4, reconcile=0.002, switch_interval=None, warmup=40,
                              concurrency=10, requests=1000, keys=20, floor=True, pin=False, trigger_process=False)
    memo: dict[bool, Any] = {}

    def measured(trigger_process: bool) -> dict[str, Any] | Skip:
        if trigger_process not in memo and smoke:
            memo[trigger_process] = Skip("full runs only (etcd, the API server and a load generator; "
                                         "tests/pipeline runs bench_pipeline.py --smoke)")
        if trigger_process not in memo and run is None:
            try:
                find_etcd_binary()
            except FileNotFoundError as e:
                memo[trigger_process] = Skip(f"no etcd binary ({e})")
        if trigger_process not in memo:
            result = run_pipeline("process", argparse.Namespace(**{**vars(args), "trigger_process": trigger_process}))
            for phase in result["phases"]:
                if not phase["verification"]["ok"] or phase["load"]["errors"]:
                    raise RuntimeError(f"pipeline run at concurrency {phase['concurrency']} failed its check: "
                                       f"verification {phase['verification']}, load errors {phase['load']['errors']}")
            memo[trigger_process] = result
        return cast("dict[str, Any] | Skip", memo[trigger_process])

    def row(phase_index: int, stage: str, trigger_process: bool = False) -> Callable[[Context], Measurement | Skip]:
        def measure(ctx: Context) -> Measurement | Skip:
            out = measured(trigger_process)
            if isinstance(out, Skip):
                return out
            phase = out["phases"][phase_index]
            st = phase["stages"][stage]
            if not st["n"]:
                return Skip(f"no {stage} samples at concurrency {phase['concurrency']}")
            load = phase["load"]
            return Measurement(
                "µs", [st["p50"] * 1e6], ops=int(st["n"]),
                note=(f"{args.backend}, {phase['requests']} triggers at concurrency {phase['concurrency']}, "
                      f"{load['rps']:,.0f}/s, {st['n']} samples, p99 {st['p99'] * 1e6:,.0f} µs, "
                      f"load average after {out['loadavg_after'][0]:.1f}"),
                extra={"stage": dict(st), "rps": load["rps"], "cpu_per_trigger_s": phase["cpu_per_trigger_s"]},
            )
        return measure

    target = (Check("≤ 300 µs", "le", 300.0),)
    c = args.concurrency
    return [
        Case("pipeline.get_c1", "enqueue → worker Get median, concurrency 1 (the floor)", G_PIPELINE,
             row(0, "enqueue_to_get")),
        Case("pipeline.get", f"enqueue → worker Get median, concurrency {c} (every add that queued a key)",
             G_PIPELINE, row(1, "enqueue_to_get"), baseline="pipeline.get_c1", checks=target,
             needs=("pipeline.get_c1",)),
        Case("pipeline.get_idle", f"the same, adds that found a worker idle (concurrency {c})", G_PIPELINE,
             row(1, "enqueue_to_get_idle"), baseline="pipeline.get_c1", needs=("pipeline.get_c1",)),
        # A second run of its own: the trigger server in a child process (--trigger-process), as a controller's
        # process is in a cluster (only informer, queue and workers). Reported beside the row, which keeps the
        # seed's arrangement (the HTTP handler in the controller's process) and its target.
        Case("pipeline.get_tp", f"the same, every add, trigger server in a process of its own (concurrency {c})",
             G_PIPELINE, row(1, "enqueue_to_get", trigger_process=True), baseline="pipeline.get",
             needs=("pipeline.get",)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny run (20 requests at concurrency 2), for CI")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--reconcile", type=float, default=0.002, help="simulated work per reconcile, seconds")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd")
    parser.add_argument("--modes", default="process,inprocess",
                        help="comma-separated: process (API server in a child process), inprocess")
    parser.add_argument("--no-floor", dest="floor", action="store_false",
                        help="skip the concurrency-1 run that shows the latency floor")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="GIL switch interval of the pipeline process in seconds (default: Python's 0.005)")
    parser.add_argument("--pin", action="store_true",
                        help="a measurement of the bound, not a setting: the pipeline process's threads on CPU 1, the "
                             "API server, etcd and the load generator on CPU 0 (Linux, 2 CPUs or more, --modes "
                             "process only)")
    parser.add_argument("--trigger-process", action="store_true",
                        help="the trigger server in a child process of its own (Pipeline(trigger_process=True)) "
                             "instead of the pipeline's loop; --modes process only")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.requests, args.concurrency, args.warmup, args.floor = 20, 2, 5, False
    if args.backend == "etcd":
        try:
            find_etcd_binary()
        except FileNotFoundError:
            print("no etcd binary: falling back to the memory backend", file=sys.stderr)
            args.backend = "memory"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("process", "inprocess"):
            parser.error(f"unknown mode {m!r}")
    if args.pin and (modes != ["process"] or not hasattr(os, "sched_setaffinity") or
                     not {0, 1} <= os.sched_getaffinity(0)):
        parser.error("--pin needs --modes process and CPUs 0 and 1 (Linux)")
    if args.trigger_process and modes != ["process"]:
        parser.error("--trigger-process needs --modes process (the trigger process reads the API server's kubeconfig)")
    print(f"pipeline benchmark: backend={args.backend} workers={args.workers} reconcile={args.reconcile * 1e3:g}ms "
          f"keys={args.keys} switch-interval={args.switch_interval or sys.getswitchinterval()}s"
          f"{' pinned: pipeline on CPU 1, the other processes on CPU 0' if args.pin else ''}"
          f"{' trigger server in a child process' if args.trigger_process else ''} | "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average before {os.getloadavg()[0]:.2f}")
    results = [run_mode(m, args) for m in modes]
    for r in results:
        print_mode(r)
    micro = microbench_queue()
    print(f"\nqueue add+get+done, one thread, uncontended (this run): {_fmt(micro['cycle'])} "
          f"(add {_fmt(micro['add'])}, get {_fmt(micro['get'])}, done {_fmt(micro['done'])})")
    decode = decode_microbench(500 if args.smoke else 5000)
    print(f"watch line decode, small ConfigMap event: informer json.loads {_fmt(decode['json_loads_s'])}, "
          f"official watch.Watch into V1ConfigMap {_fmt(decode['watch_unmarshal_event_s'])}")
    if args.json:
        for r in results:
            for phase in r["phases"]:
                phase.pop("report")
        write_json(str(args.json), {
            "backend": args.backend, "workers": args.workers, "reconcile_s": args.reconcile, "keys": args.keys,
            "python": platform.python_version(), "cpus": os.cpu_count(), "results": results,
            "queue_microbench": micro, "decode_microbench": decode,
            "targets": [{"name": n, "stage": s, "stat": st, "limit_s": lim} for n, s, st, lim in TARGETS],
        })
    bad = [r for r in results for ph in r["phases"] if not ph["verification"]["ok"] or ph["load"]["errors"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
