"""Electors in separate processes against the real API server on etcd.

Every replica reports, on one machine-wide clock (``time.monotonic()``), when it started and stopped leading and
every 10 ms at which ``is_leader()`` held (the moments it would act). A term runs from ``started`` to its last
such heartbeat; :func:`find_overlaps` over all terms of a run is the never-two-leaders check, and the broken
control (a renew deadline not below the lease duration) must make it fire.

Durations: lease 2 s, renew deadline 1.5 s, retry period 0.5 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer, find_etcd_binary
from keyqueue.leaderelection import Interval, find_overlaps

pytestmark = pytest.mark.etcd

LD, RD, RP = 2.0, 1.5, 0.5
ROOT = Path(__file__).resolve().parents[2]
WAIT = 15.0


@pytest.fixture(scope="module")
def apiserver() -> Iterator[TestAPIServer]:
    try:
        find_etcd_binary()
    except FileNotFoundError:
        pytest.skip("no etcd binary (install the apiserver extra)")
    with TestAPIServer("etcd", unsafe_no_fsync=True) as s:
        yield s


class Group:
    """Replica processes of one election and everything they reported."""

    def __init__(self, apiserver: TestAPIServer, lease: str | None = None) -> None:
        self.kubeconfig = str(apiserver.kubeconfig_path)
        self.lease = lease or f"lease-{uuid.uuid4().hex[:8]}"
        self.cond = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def spawn(self, identity: str, *extra: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.leaderelection.replica", "--kubeconfig", self.kubeconfig,
             "--identity", identity, "--lease", self.lease, "--lease-duration", str(LD),
             "--renew-deadline", str(RD), "--retry-period", str(RP), *extra],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.procs[identity] = proc
        threading.Thread(target=self._read, args=(identity, proc), daemon=True).start()

    def _read(self, identity: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            event["who_reported"] = identity
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()

    def wait(self, event: str, after: float = 0.0, who: str | None = None, count: int = 1) -> list[dict[str, Any]]:
        """The first ``count`` events of that kind (by ``who`` if given) later than ``after``."""
        def found() -> list[dict[str, Any]]:
            return [e for e in self.events if e["event"] == event and e["t"] > after
                    and (who is None or e["who_reported"] == who)]

        with self.cond:
            ok = self.cond.wait_for(lambda: len(found()) >= count, WAIT)
            assert ok, f"no {event} by {who or 'anyone'} after {after} within {WAIT} s: {self.summary()}"
            return found()[:count]

    def leaders(self, after: float = 0.0) -> list[str]:
        with self.cond:
            return [e["who_reported"] for e in self.events if e["event"] == "leading" and e["t"] > after]

    def terms(self) -> list[Interval]:
        out: list[Interval] = []
        with self.cond:
            events = list(self.events)
        for identity in self.procs:
            start: float | None = None
            last: float | None = None
            for e in (e for e in events if e["who_reported"] == identity):
                if e["event"] == "started":
                    if start is not None:
                        out.append(Interval(identity, start, last if last is not None else start))
                    start, last = e["t"], None
                elif e["event"] == "leading" and start is not None:
                    last = e["t"]
                elif e["event"] == "stopped" and start is not None:
                    out.append(Interval(identity, start, last if last is not None else start))
                    start = None
            if start is not None:
                out.append(Interval(identity, start, last if last is not None else start))
        return out

    def summary(self) -> str:
        with self.cond:
            return str([(e["who_reported"], e["event"], round(e["t"], 3)) for e in self.events
                        if e["event"] != "leading"])

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(10)
            assert proc.stdout is not None
            proc.stdout.close()


@pytest.fixture
def group(apiserver: TestAPIServer) -> Iterator[Group]:
    g = Group(apiserver)
    yield g
    g.close()


def test_sigkill_and_release_failover_never_two_leaders(group: Group, record_property: Any) -> None:
    for identity in ("r1", "r2", "r3"):
        group.spawn(identity)
    group.wait("ready", count=3)
    first = group.wait("started")[0]
    leader = first["who_reported"]

    # SIGKILL the leader: a standby leads after the lease expires by its own clock
    group.wait("leading", after=first["t"] + 1.0, who=leader)  # a renewal or two first
    killed_at = time.monotonic()
    group.procs[leader].send_signal(signal.SIGKILL)
    second = group.wait("started", after=killed_at)[0]
    kill_gap = second["t"] - killed_at
    record_property("sigkill_to_new_leader_s", round(kill_gap, 3))
    # The standby saw the last renewal up to one retry period after it was written and then waits a full lease
    # duration by its own clock, plus at most one retry period to its next attempt. The lower bound is the safety
    # property and holds under any load; the upper one allows for a loaded machine (two cores shared with other
    # suites: the standby's attempt and its report may be scheduled late).
    assert LD - RP - 0.05 <= kill_gap <= LD + 2 * RP + 1.0, group.summary()

    # stop() with release: the last standby leads within one retry period
    new_leader = second["who_reported"]
    group.wait("leading", after=second["t"] + 0.5, who=new_leader)
    # On a loaded machine a leader may miss its renew deadline, step down and be elected again before this: the
    # stop that counts is the one after the SIGTERM.
    sigterm_at = time.monotonic()
    group.procs[new_leader].send_signal(signal.SIGTERM)
    stopped = group.wait("stopped", after=sigterm_at, who=new_leader)[0]
    third = group.wait("started", after=stopped["t"])[0]
    release_gap = third["t"] - stopped["t"]
    record_property("release_to_new_leader_s", round(release_gap, 3))
    assert third["who_reported"] not in (leader, new_leader)
    # Within one retry period plus scheduling; anything below LD - RP - 0.05 can only be the release (a standby
    # that had to wait for the lease to run out takes at least that long, see above).
    assert release_gap < LD - RP - 0.05, group.summary()
    group.wait("released", who=new_leader)
    group.wait("leading", after=third["t"] + 0.5)

    terms = group.terms()
    owners = [t.owner for t in sorted(terms, key=lambda t: t.start)]
    assert [o for i, o in enumerate(owners) if i == 0 or o != owners[i - 1]] == [leader, new_leader,
                                                                                  third["who_reported"]]
    assert find_overlaps(terms) == [], group.summary()


def _stall_leader(group: Group) -> tuple[str, float]:
    """SIGSTOP the leader for longer than the lease duration (its standby takes over), then SIGCONT it."""
    first = group.wait("started")[0]
    leader = first["who_reported"]
    group.wait("leading", after=first["t"] + 1.0, who=leader)
    stopped_at = time.monotonic()
    group.procs[leader].send_signal(signal.SIGSTOP)
    group.wait("started", after=stopped_at)
    group.procs[leader].send_signal(signal.SIGCONT)
    return leader, stopped_at


def test_stalled_leader_never_overlaps_and_the_broken_control_does(apiserver: TestAPIServer) -> None:
    """Two elections side by side: a correct one and the control whose renew deadline (4 s) exceeds the lease
    duration (2 s). The stall ends as soon as the standby leads; the stalled correct leader then already sees its
    deadline passed, the broken one still believes it leads, and the detector must report that."""
    good, broken = Group(apiserver), Group(apiserver)
    try:
        good.spawn("g1")
        broken.spawn("b1", "--unsafe-renew-deadline", "4.0")
        good.wait("ready")
        broken.wait("ready")
        good.wait("started")
        broken.wait("started")
        good.spawn("g2")
        broken.spawn("b2", "--unsafe-renew-deadline", "4.0")
        good.wait("ready", who="g2")
        broken.wait("ready", who="b2")
        good_leader, _ = _stall_leader(good)
        broken_leader, _ = _stall_leader(broken)
        resumed = time.monotonic()
        # give both stalled leaders time to run again and report
        good.wait("stopped", who=good_leader)
        broken.wait("stopped", who=broken_leader)
        assert find_overlaps(good.terms()) == [], good.summary()
        overlaps = find_overlaps(broken.terms())
        assert overlaps, broken.summary()
        assert any(e > resumed for e in [o[0].end for o in overlaps])
    finally:
        good.close()
        broken.close()


def test_apiserver_outage_leader_steps_down_and_leadership_resumes(apiserver: TestAPIServer, group: Group) -> None:
    group.spawn("o1")
    group.spawn("o2")
    group.wait("ready", count=2)
    first = group.wait("started")[0]
    group.wait("leading", after=first["t"] + 0.5)
    # The outage starts when stop_server() is called: it closes the listener at once, then gives the requests in
    # flight up to 1 s; aiohttp reads no more input once it stops, so a renewal whose body had not arrived yet
    # waits out that second, and the leader may step down before stop_server() returns. No renewal succeeds after
    # it returned.
    down_from = time.monotonic()
    apiserver.stop_server()
    down_at = time.monotonic()
    try:
        stopped = group.wait("stopped", after=down_from)[0]
        assert stopped["t"] - down_at <= RD + 0.25, group.summary()
        # nobody leads during the rest of the outage (longer than renew_deadline in total)
        quiet_from = stopped["t"] + 0.05
        window = down_at + RD + 1.0 - time.monotonic()
        with group.cond:  # wakes at once if anyone reports leading; else watches the whole window
            leaked = group.cond.wait_for(lambda: bool(group.leaders(after=quiet_from)), max(0.0, window))
        assert not leaked, group.summary()
    finally:
        apiserver.start_server()
    back_at = time.monotonic()
    resumed = group.wait("started", after=back_at)[0]
    record_gap = resumed["t"] - back_at
    assert record_gap <= LD + 2 * RP + 0.5, group.summary()
    assert find_overlaps(group.terms()) == [], group.summary()
