"""``keyqueue-lab failover``: three controller replicas, one leader at a time, SIGKILL of the leader mid-run.

One API server (the project's test server on etcd, in this process) and ``--replicas`` child processes, each the
pipeline's chain informer → queue → :class:`keyqueue.Controller`, the controller gated by a
:class:`keyqueue.leaderelection.LeaderElector` on one Lease. Every replica's informer fills its queue (warm
standbys); only the leader reconciles. The reconcile reads the ConfigMap from the informer's cache and does
``--work`` of simulated work.

Meanwhile this process writes a load of triggers (ConfigMap updates over ``--names`` names at ``--rate`` per
second for ``--duration``) and, at ``--kill-at``, SIGKILLs the replica that leads. Then it waits until every
name was reconciled after its last write and stops the replicas (SIGTERM: release).

It prints the leadership timeline (who led from when to when, on the run's clock), the gap with no leader after
the kill, reconciles per replica, and the checks: a new leader took over, ``lost=0`` (every name reconciled at or
after its last written resourceVersion) and no two replicas reconciling at once (reconcile intervals of different
replicas never overlap, :func:`keyqueue.leaderelection.find_overlaps`). The exit status is 1 if a check fails.

``--control`` runs the replicas without leader election: all of them reconcile, and the overlap check must fail.
``--manager`` makes each replica a :class:`keyqueue.Manager` (its shared informer, one controller over ConfigMaps,
its leader election) instead of the informer, queue and controller wired by hand: the same checks, measuring the
manager.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from keyqueue._procs import die_with_parent, wait_or_kill
from keyqueue._signals import recorded_signals
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    add_json_argument,
    format_duration,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.leaderelection import Interval, find_overlaps

__all__ = ["FailoverResult", "Term", "add_arguments", "run", "run_failover"]

_WAIT = 60.0  # seconds: bound of every wait for a replica (starting 3 on a busy machine can take a while)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replicas", type=int, default=3, help="controller processes (default 3)")
    parser.add_argument("--duration", type=parse_duration, default=8.0, help="length of the trigger load (default 8s)")
    parser.add_argument("--kill-at", type=parse_duration, default=3.0,
                        help="when to SIGKILL the leader, from the start of the load (default 3s)")
    parser.add_argument("--rate", type=float, default=100.0, help="trigger writes per second (default 100)")
    parser.add_argument("--names", type=int, default=30, help="ConfigMap names the triggers spread over (default 30)")
    parser.add_argument("--work", type=parse_duration, default=0.002, help="simulated work per reconcile (default 2ms)")
    parser.add_argument("--lease-duration", type=parse_duration, default=2.0, help="lease duration (default 2s)")
    parser.add_argument("--renew-deadline", type=parse_duration, default=1.5, help="renew deadline (default 1.5s)")
    parser.add_argument("--retry-period", type=parse_duration, default=0.5, help="retry period (default 0.5s)")
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd",
                        help="the API server's storage: a real etcd (default) or in-memory")
    parser.add_argument("--control", action="store_true",
                        help="replicas without leader election: every replica reconciles (the overlap check fails)")
    parser.add_argument("--manager", action="store_true",
                        help="each replica is a keyqueue.Manager (shared informer, controller, leader election) "
                             "instead of an informer wired to a Controller by hand")
    add_json_argument(parser)
    # the child side (internal)
    parser.add_argument("--replica", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lease", default=None, help=argparse.SUPPRESS)


# -- the replica (child process) ----------------------------------------------------------------------------------

_out_lock = threading.Lock()


def _emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.monotonic(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _replica(args: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes import config as kube_config

    from keyqueue._signals import recorded_signals
    from keyqueue.controller import Controller
    from keyqueue.informer import Informer, meta_namespace_key
    from keyqueue.leaderelection import LeaderElector

    conf = client.Configuration()
    load: Any = kube_config.load_kube_config
    load(config_file=args.kubeconfig, client_configuration=conf)
    writer, watcher = client.ApiClient(conf), client.ApiClient(conf)
    elector = None
    if not args.control:
        elector = LeaderElector(
            writer, name=args.lease, namespace=args.namespace, identity=args.replica,
            lease_duration=args.lease_duration, renew_deadline=args.renew_deadline, retry_period=args.retry_period,
            on_started_leading=lambda: _emit("started"), on_stopped_leading=lambda: _emit("stopped"),
        )
    if args.manager:
        return _manager_replica(args, watcher, elector)
    informer = Informer.for_config_maps(watcher, args.namespace, name=f"failover {args.replica}")

    def reconcile(key: str) -> None:
        t0 = time.monotonic()
        obj = informer.store.get_by_key(key)
        rv = int(obj["metadata"].get("resourceVersion") or 0) if obj is not None else 0
        time.sleep(args.work)
        _emit("reconciled", key=key, rv=rv, start=t0, end=time.monotonic())

    controller: Controller[str] = Controller(reconcile, name="failover", leader_election=elector, stop_timeout=10.0)

    def enqueue(obj: Any) -> None:
        controller.queue.add(meta_namespace_key(obj))

    informer.add_event_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)
    with recorded_signals(signal.SIGTERM, signal.SIGINT) as received:
        informer.start()
        if not informer.wait_for_cache_sync(_WAIT):
            _emit("error", message="the informer did not sync")
            return 1
        controller.start()
        _emit("ready")
        while not received:
            time.sleep(0.05)
    controller.stop(10.0)  # workers first, then the elector (release)
    informer.stop()
    _emit("exited")
    return 0


def _manager_replica(args: argparse.Namespace, api_client: Any, elector: Any) -> int:
    """The replica as a :class:`keyqueue.Manager`: the same reconcile and events as the hand-wired one."""
    from keyqueue._signals import recorded_signals
    from keyqueue.manager import Manager

    mgr = Manager(api_client, namespace=args.namespace, leader_election=elector, stop_timeout=10.0)
    cache = mgr.cache("v1/configmaps")

    def reconcile(key: str) -> None:
        t0 = time.monotonic()
        obj = cache.get(key)
        rv = int(obj["metadata"].get("resourceVersion") or 0) if obj is not None else 0
        time.sleep(args.work)
        _emit("reconciled", key=key, rv=rv, start=t0, end=time.monotonic())

    mgr.add_controller(reconcile, for_="v1/configmaps", name="failover")
    with recorded_signals(signal.SIGTERM, signal.SIGINT) as received:
        try:
            mgr.start()  # returns once the cache has synced
        except TimeoutError as exc:
            _emit("error", message=str(exc))
            return 1
        _emit("ready")
        while not received:
            time.sleep(0.05)
    mgr.stop(10.0)  # controllers first, then the elector (release), then the informers
    _emit("exited")
    return 0


# -- the orchestrator ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Term:
    """``who`` led from ``start`` to ``end`` (seconds since the load started; ``end`` None: still at the end)."""

    who: str
    start: float
    end: float | None
    ended_by: str  #: "stopped" (stepped down or released), "killed", or "running"


@dataclass
class FailoverResult:
    replicas: int
    control: bool
    triggers: int
    names: int
    killed: str | None
    killed_at_s: float | None
    new_leader: str | None
    no_leader_gap_s: float | None  #: from the kill to the next term's start
    terms: list[Term]
    reconciles: dict[str, int]
    reconciles_after_kill: dict[str, int]
    lost: int
    lost_names: list[str]
    overlaps: int
    overlap_examples: list[str]
    lease_duration_s: float
    retry_period_s: float
    checks: dict[str, bool] = field(default_factory=dict)
    triggers_asked: int = 0  #: rate × duration: the writes the load was to make
    interrupted: bool = False  #: a signal stopped the scene; the result covers what ran
    manager: bool = False  #: each replica was a keyqueue.Manager

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


class _Replicas:
    """The replica processes and the events they print; ``on_event(event)`` is called (from a reader thread) for
    each one as it comes."""

    def __init__(self, args: argparse.Namespace, kubeconfig: str, namespace: str, lease: str,
                 on_event: Callable[[dict[str, Any]], None]) -> None:
        self.cond = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self._on_event = on_event
        for i in range(1, args.replicas + 1):
            who = f"replica-{i}"
            cmd = [sys.executable, "-m", "keyqueue.lab", "failover", "--replica", who, "--kubeconfig", kubeconfig,
                   "--namespace", namespace, "--lease", lease, "--work", str(args.work),
                   "--lease-duration", str(args.lease_duration), "--renew-deadline", str(args.renew_deadline),
                   "--retry-period", str(args.retry_period)]
            if args.control:
                cmd.append("--control")
            if args.manager:
                cmd.append("--manager")
            # In a process group of their own, a terminal's Ctrl-C reaches this process only, which stops them in
            # order (close); they get SIGTERM if it dies (die_with_parent).
            cmd, preexec = die_with_parent(cmd)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ), process_group=0,
                                    preexec_fn=preexec)
            self.procs[who] = proc
            threading.Thread(target=self._read, args=(who, proc), daemon=True).start()

    def _read(self, who: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["who"] = who
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()
            self._on_event(event)

    def wait_for(self, predicate: Any, timeout: float = _WAIT, received: list[int] | None = None) -> bool:
        """Wait until ``predicate(events)`` holds (True), ``timeout`` passed or a signal was ``received`` (False)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or received:
                    return False
                self.cond.wait(min(left, 0.1))
            return True

    def leader(self) -> str | None:
        """The replica whose last started/stopped event is ``started`` (if any)."""
        state: dict[str, str] = {}
        with self.cond:
            for e in self.events:
                if e["event"] in ("started", "stopped"):
                    state[e["who"]] = e["event"]
        leading = [w for w, s in state.items() if s == "started" and self.procs[w].poll() is None]
        return leading[0] if leading else None

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            wait_or_kill(proc, 15)
            if proc.stdout is not None:
                proc.stdout.close()


def _trigger_load(api: Any, namespace: str, args: argparse.Namespace, last_rv: dict[str, int],
                  stop_at: float, stop: threading.Event) -> int:
    """Write ConfigMaps round-robin at ``args.rate`` until ``stop_at`` (monotonic) or ``stop``; returns the write
    count."""
    n = 0
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    while time.monotonic() < stop_at and not stop.is_set():
        name = f"cm-{n % args.names}"
        body = {"data": {"seq": str(n)}}
        if n < args.names:
            obj = api.create_namespaced_config_map(namespace, {"metadata": {"name": name}, **body})
        else:
            obj = api.patch_namespaced_config_map(name, namespace, body)
        last_rv[f"{namespace}/{name}"] = int(obj.metadata.resource_version)
        n += 1
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0 and stop.wait(delay):
            break
    return n


def run_failover(args: argparse.Namespace, say: Callable[[str], None] | None = None,
                 received: list[int] | None = None) -> FailoverResult | None:
    """Run the scene (see the module docstring) and return what it measured and checked. ``say(line)`` is called
    as things happen (from several threads). A signal number appended to ``received`` stops the scene: the load
    stops, the replicas are stopped, and the result covers what ran (``interrupted``); ``None`` if that was
    before the load started."""
    from kubernetes import client

    from keyqueue.apiserver import TestAPIServer

    signals: list[int] = received if received is not None else []
    tell = say if say is not None else (lambda line: None)

    kill_times: list[float] = []  # the monotonic time of the kill, once it was sent

    def on_event(event: dict[str, Any]) -> None:
        who, kind = event["who"], event["event"]
        if kind == "ready":
            tell(f"failover: {who} is up (its informer synced; a warm standby until it leads)")
        elif kind == "started":
            after = f" ({format_duration(event['t'] - kill_times[0])} after the kill)" if kill_times else ""
            tell(f"failover: {who} leads{after}")
        elif kind == "stopped":
            tell(f"failover: {who} stopped leading")
        elif kind == "error":
            tell(f"failover: {who}: {event.get('message', '')}")

    namespace, lease = f"failover-{uuid.uuid4().hex[:6]}", "failover-controller"
    tell(f"failover: starting the test API server ({args.backend} storage) ...")
    with TestAPIServer(args.backend, unsafe_no_fsync=True) as server:
        tell(f"failover: API server on {server.url}; starting {args.replicas} replicas ...")
        api_client: Any = server.api_client()
        api: Any = client.CoreV1Api(api_client)
        api.create_namespace({"metadata": {"name": namespace}})
        replicas = _Replicas(args, str(server.kubeconfig_path), namespace, lease, on_event)
        killed: str | None = None
        killed_at: float | None = None
        last_rv: dict[str, int] = {}
        count = [0]
        t0: float | None = None
        try:
            ready = replicas.wait_for(lambda ev: sum(e["event"] == "ready" for e in ev) >= args.replicas,
                                      received=signals)
            if signals:
                return None
            if not ready:
                raise RuntimeError("the replicas did not start: " + str(replicas.events[-5:]))
            if not args.control and not replicas.wait_for(lambda ev: any(e["event"] == "started" for e in ev),
                                                           received=signals):
                if signals:
                    return None
                raise RuntimeError("no replica became leader")
            t0 = time.monotonic()
            done, stop = threading.Event(), threading.Event()

            def load() -> None:
                try:
                    count[0] = _trigger_load(api, namespace, args, last_rv, t0 + args.duration, stop)
                finally:
                    done.set()

            tell(f"failover: load: {args.rate:g} writes/s for {format_duration(args.duration)} over {args.names} "
                 f"ConfigMaps; SIGKILL of the leader at {format_duration(args.kill_at)}")
            loader = threading.Thread(target=load, name="failover-load", daemon=True)
            loader.start()
            kill_at = t0 + args.kill_at
            while not done.is_set() and not signals and time.monotonic() < kill_at:
                done.wait(min(0.1, max(0.0, kill_at - time.monotonic())))
            if not done.is_set() and not signals:
                killed = replicas.leader() if not args.control else "replica-1"
                if killed is not None:
                    killed_at = time.monotonic()
                    kill_times.append(killed_at)
                    replicas.procs[killed].send_signal(signal.SIGKILL)
                    tell(f"failover: SIGKILL {killed}" + ("" if args.control else " (the leader)") +
                         f" at {killed_at - t0:.3f}s")
            while not done.wait(0.1):
                if signals:
                    stop.set()
            loader.join()
            asked = round(args.rate * args.duration)
            short = f" of the {asked:,} asked for (the writes took longer than 1/rate)" if count[0] < asked else ""
            tell(f"failover: load sent: {count[0]:,} writes{short}; waiting until every name is reconciled ...")

            def caught_up(ev: list[dict[str, Any]]) -> bool:
                seen: dict[str, int] = {}
                for e in ev:
                    if e["event"] == "reconciled":
                        seen[e["key"]] = max(seen.get(e["key"], 0), e["rv"])
                return all(seen.get(k, 0) >= rv for k, rv in last_rv.items())

            replicas.wait_for(caught_up, args.lease_duration + _WAIT, received=signals)
        finally:
            if signals:
                tell(f"failover: {signal.Signals(signals[0]).name}: stopping the replicas ...")
            replicas.close()
            api_client.close()
    assert t0 is not None  # the load started: every earlier way out returned or raised
    result = _summarise(args, replicas.events, t0, count[0], last_rv, killed, killed_at)
    result.interrupted = bool(signals)
    return result


def _summarise(args: argparse.Namespace, events: list[dict[str, Any]], t0: float, triggers: int,
               last_rv: dict[str, int], killed: str | None, killed_at: float | None) -> FailoverResult:
    terms: list[Term] = []
    open_terms: dict[str, float] = {}
    for e in events:
        if e["event"] == "started":
            open_terms[e["who"]] = e["t"]
        elif e["event"] == "stopped" and e["who"] in open_terms:
            terms.append(Term(e["who"], open_terms.pop(e["who"]) - t0, e["t"] - t0, "stopped"))
    for who, start in open_terms.items():
        if who == killed and killed_at is not None:
            terms.append(Term(who, start - t0, killed_at - t0, "killed"))
        else:
            terms.append(Term(who, start - t0, None, "running"))
    terms.sort(key=lambda t: t.start)
    everyone = [f"replica-{i}" for i in range(1, args.replicas + 1)]
    reconciles: dict[str, int] = dict.fromkeys(everyone, 0)
    after_kill: dict[str, int] = dict.fromkeys(everyone, 0) if killed_at is not None else {}
    seen: dict[str, int] = {}
    intervals: list[Interval] = []
    for e in events:
        if e["event"] != "reconciled":
            continue
        reconciles[e["who"]] = reconciles.get(e["who"], 0) + 1
        if killed_at is not None and e["start"] > killed_at:
            after_kill[e["who"]] = after_kill.get(e["who"], 0) + 1
        seen[e["key"]] = max(seen.get(e["key"], 0), e["rv"])
        intervals.append(Interval(e["who"], e["start"], e["end"]))
    lost = sorted(k for k, rv in last_rv.items() if seen.get(k, 0) < rv)
    overlaps = find_overlaps(intervals)
    new_leader, gap = None, None
    if killed_at is not None and not args.control:
        later = [t for t in terms if t.start > killed_at - t0 and t.who != killed]
        if later:
            new_leader, gap = later[0].who, later[0].start - (killed_at - t0)
    result = FailoverResult(
        replicas=args.replicas, control=args.control, triggers=triggers, names=len(last_rv), killed=killed,
        killed_at_s=None if killed_at is None else killed_at - t0, new_leader=new_leader, no_leader_gap_s=gap,
        terms=terms, reconciles=dict(sorted(reconciles.items())),
        reconciles_after_kill=dict(sorted(after_kill.items())),
        lost=len(lost), lost_names=lost[:20], overlaps=len(overlaps),
        overlap_examples=[f"{a.owner} {a.start - t0:.3f}-{a.end - t0:.3f}s / {b.owner} {b.start - t0:.3f}-"
                          f"{b.end - t0:.3f}s" for a, b in overlaps[:5]],
        lease_duration_s=args.lease_duration, retry_period_s=args.retry_period,
        triggers_asked=round(args.rate * args.duration), manager=args.manager,
    )
    if not args.control:
        result.checks["failover"] = new_leader is not None
    result.checks["lost=0"] = result.lost == 0
    result.checks["never two replicas reconciling at once"] = result.overlaps == 0
    return result


def _print(result: FailoverResult, out: TextIO) -> None:
    mode = " (control: no leader election)" if result.control else ""
    if result.manager:
        mode += " (replicas: keyqueue.Manager)"
    asked = (f" of the {result.triggers_asked:,} asked for" if result.triggers < result.triggers_asked else "")
    print(f"\nfailover{mode}: {result.replicas} replicas, {result.triggers:,} "
          f"{'trigger' if result.triggers == 1 else 'triggers'}{asked} over {result.names} "
          f"{'name' if result.names == 1 else 'names'}" + (" — interrupted" if result.interrupted else ""), file=out)
    if not result.control:
        print("leadership timeline (seconds since the load started):", file=out)
        for t in result.terms:
            end = f"{t.end:7.3f}s" if t.end is not None else "    end"
            print(f"  {t.who:<10} {t.start:7.3f}s → {end}  ({t.ended_by})", file=out)
        led = {t.who for t in result.terms}
        for who in result.reconciles:
            if who not in led:
                print(f"  {who:<10} never led (a warm standby)", file=out)
    if result.killed is not None and result.killed_at_s is not None:
        print(f"SIGKILL {result.killed} at {result.killed_at_s:.3f}s", file=out)
    if result.no_leader_gap_s is not None:
        print(f"no leader for {format_duration(result.no_leader_gap_s)} (lease duration "
              f"{format_duration(result.lease_duration_s)}, retry period {format_duration(result.retry_period_s)}); "
              f"new leader {result.new_leader}", file=out)
    per = ", ".join(f"{w}={n}" for w, n in result.reconciles.items()) or "none"
    after = ", ".join(f"{w}={n}" for w, n in result.reconciles_after_kill.items()) or "none"
    print(f"reconciles per replica: {per} (after the kill: {after})", file=out)
    print(f"lost={result.lost}" + (f" {result.lost_names}" if result.lost else ""), file=out)
    print(f"two replicas reconciling at once: {result.overlaps}", file=out)
    for example in result.overlap_examples:
        print(f"  overlap: {example}", file=out)
    for name, passed in result.checks.items():
        print(f"{'PASS' if passed else 'FAIL'}  {name}", file=out)


def run(args: argparse.Namespace) -> int:
    if args.replica is not None:
        return _replica(args)
    for name in ("replicas", "names"):
        if getattr(args, name) < 1:
            print(f"keyqueue-lab failover: --{name} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if not args.rate > 0:
        print(f"keyqueue-lab failover: --rate must be > 0, got {args.rate}", file=sys.stderr)
        return 2
    if not args.lease_duration > args.renew_deadline > args.retry_period > 0:
        print("keyqueue-lab failover: need --lease-duration > --renew-deadline > --retry-period > 0",
              file=sys.stderr)
        return 2
    out = human_stream(args)

    def say(line: str) -> None:
        with _out_lock:
            print(line, file=out, flush=True)

    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        result = run_failover(args, say, received)
    if result is None:
        print("failover: interrupted before the load started; nothing to report", file=out, flush=True)
        return EXIT_INTERRUPTED
    _print(result, out)
    summary = asdict(result)
    summary["ok"] = result.ok
    write_json(args.json, summary)
    if result.interrupted:
        return EXIT_INTERRUPTED
    return 0 if result.ok else 1
