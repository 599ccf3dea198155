"""The election algorithm on the fake clock: each attempt is driven by hand against an in-memory Lease store."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue import FakeClock
from keyqueue.leaderelection import Interval, LeaderElector, find_overlaps
from keyqueue.leaderelection._core import JITTER

from .helpers import LeaseStore, StoreClient

LD, RD, RP = 15.0, 10.0, 2.0
START = 1_700_000_000.0  # the fake clock's seconds double as wall-clock seconds for acquireTime/renewTime


class Replica:
    """One elector whose attempts the test runs one at a time (the elector's loop is not started)."""

    def __init__(self, store: LeaseStore, clock: FakeClock, who: str, *, precondition: bool = True) -> None:
        self.clock = clock
        self.who = who
        self.log: list[tuple[str, float]] = []
        self.new_leaders: list[str] = []
        self.e = LeaderElector(
            StoreClient(store, who, precondition=precondition), name="lease", namespace="ns", identity=who,
            lease_duration=LD, renew_deadline=RD, retry_period=RP, clock=clock,
            on_started_leading=lambda: self.log.append(("started", clock.now())),
            on_stopped_leading=lambda: self.log.append(("stopped", clock.now())),
            on_new_leader=self.new_leaders.append,
        )

    def attempt(self) -> None:
        self.e._dispatch(self.e._attempt())

    def tick(self) -> None:
        self.e._dispatch(self.e._check_deadline())

    def stop(self) -> bool:
        self.e._dispatch(self.e._step_down())
        return self.e._release()

    def intervals(self) -> list[Interval]:
        """Leadership terms: from ``started`` to ``stopped`` (or to the current deadline if still leading)."""
        out: list[Interval] = []
        start: float | None = None
        for kind, t in self.log:
            if kind == "started":
                start = t
            elif start is not None:
                out.append(Interval(self.who, start, t))
                start = None
        if start is not None:
            out.append(Interval(self.who, start, self.e._core.deadline_ns / 1e9))
        return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store() -> LeaseStore:
    return LeaseStore()


def spec(store: LeaseStore) -> dict[str, Any]:
    assert store.obj is not None
    s: dict[str, Any] = store.obj["spec"]
    return s


def test_acquire_absent_lease_then_renew(store: LeaseStore, clock: FakeClock) -> None:
    a = Replica(store, clock, "a")
    assert not a.e.is_leader() and a.e.leader() == ""
    a.attempt()
    assert a.e.is_leader() and a.e.leader() == "a"
    assert a.log == [("started", START)] and a.new_leaders == ["a"]
    first = dict(spec(store))
    assert first["holderIdentity"] == "a" and first["leaseDurationSeconds"] == 15
    assert first["leaseTransitions"] == 0
    assert first["acquireTime"] == first["renewTime"] == "2023-11-14T22:13:20.000000Z"
    clock.step(RP)
    a.attempt()  # renew: an update with the resourceVersion just read
    renewed = spec(store)
    assert renewed["renewTime"] == "2023-11-14T22:13:22.000000Z"
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["leaseTransitions"] == 0
    assert store.obj is not None and store.obj["metadata"]["resourceVersion"] == "2"
    assert a.log == [("started", START)]  # a renew starts no new term
    assert a.e._next_wait() == RP


def test_standby_waits_lease_duration_by_its_own_clock(store: LeaseStore, clock: FakeClock) -> None:
    a, b = Replica(store, clock, "a"), Replica(store, clock, "b")
    a.attempt()
    clock.step(100.0)  # a's record is 100 s old by its timestamps, but b has never seen it
    b.attempt()
    assert not b.e.is_leader() and b.e.leader() == "a" and b.new_leaders == ["a"]
    clock.step(LD - 0.001)  # a is dead (never renews); b saw the record 14.999 s ago
    b.attempt()
    assert not b.e.is_leader() and len(store.writes) == 1
    clock.step(0.001)
    b.attempt()  # lease_duration since b observed the record: expired
    assert b.e.is_leader() and b.e.leader() == "b"
    assert spec(store)["leaseTransitions"] == 1 and spec(store)["holderIdentity"] == "b"
    assert spec(store)["acquireTime"] == spec(store)["renewTime"]


def test_renewals_keep_standby_waiting(store: LeaseStore, clock: FakeClock) -> None:
    a, b = Replica(store, clock, "a"), Replica(store, clock, "b")
    a.attempt()
    for _ in range(20):  # 40 s of renewals every 2 s: each one is a new record for b, observed anew
        clock.step(RP)
        a.attempt()
        b.attempt()
        assert a.e.is_leader() and not b.e.is_leader()
    assert b.log == []


def test_leader_steps_down_when_renewals_fail_before_anyone_can_acquire(store: LeaseStore, clock: FakeClock) -> None:
    a, b = Replica(store, clock, "a"), Replica(store, clock, "b")
    a.attempt()
    b.attempt()
    store.down = True
    t = 0.0
    while t + RP < RD:
        clock.step(RP)
        t += RP
        a.attempt()  # fails: still leading until renew_deadline after the last successful attempt
        assert a.e.is_leader(), t
    clock.step(RD - t)
    assert not a.e.is_leader()  # the deadline holds even before the loop notices
    a.tick()
    assert a.log == [("started", START), ("stopped", START + RD)]
    store.down = False
    b.attempt()  # b observed the record at START: 10 s < 15 s, not expired yet
    assert not b.e.is_leader()
    clock.step(LD - RD)
    b.attempt()
    assert b.e.is_leader()
    assert find_overlaps(a.intervals() + b.intervals()) == []
    assert a.intervals()[0].end < b.intervals()[0].start


def test_a_leader_back_in_time_renews_its_own_lease(store: LeaseStore, clock: FakeClock) -> None:
    a = Replica(store, clock, "a")
    a.attempt()
    store.down = True
    clock.step(RD)
    a.attempt()
    assert a.log[-1] == ("stopped", START + RD)
    store.down = False
    clock.step(RP)
    a.attempt()  # the Lease still names a: it takes it back at once, as the same term's holder
    assert a.e.is_leader() and a.log[-1] == ("started", START + RD + RP)
    assert spec(store)["leaseTransitions"] == 0


def test_release_lets_a_standby_acquire_at_its_next_attempt(store: LeaseStore, clock: FakeClock) -> None:
    a, b = Replica(store, clock, "a"), Replica(store, clock, "b")
    a.attempt()
    b.attempt()
    clock.step(1.0)
    assert a.stop()
    assert a.log == [("started", START), ("stopped", START + 1.0)]
    assert spec(store)["holderIdentity"] == "" and spec(store)["leaseDurationSeconds"] == 1
    assert spec(store)["leaseTransitions"] == 0
    assert a.e.leader() == "" and not a.e.is_leader()
    clock.step(0.5)
    b.attempt()  # no wait for lease_duration: the Lease is not held
    assert b.e.is_leader() and spec(store)["leaseTransitions"] == 1
    assert not a.stop()  # releasing again: a no longer holds it, nothing is written
    assert spec(store)["holderIdentity"] == "b"


def _race(store: LeaseStore, clock: FakeClock, precondition: bool) -> tuple[Replica, Replica]:
    """b reads the expired Lease; before b's write, a reads and writes; then b writes with what it read."""
    old = Replica(store, clock, "old")
    a = Replica(store, clock, "a", precondition=precondition)
    b = Replica(store, clock, "b", precondition=precondition)
    old.attempt()
    a.attempt()
    b.attempt()
    clock.step(LD)
    store.before_write = lambda who: a.attempt()
    b.attempt()
    for _ in range(6):  # a few renew rounds, each replica in turn
        clock.step(RP)
        a.attempt()
        b.attempt()
        a.tick()
        b.tick()
    return a, b


def test_a_lost_race_is_a_409_not_a_second_leader(store: LeaseStore, clock: FakeClock) -> None:
    a, b = _race(store, clock, precondition=True)
    assert a.e.is_leader() and not b.e.is_leader() and b.log == []
    assert [w["spec"]["holderIdentity"] for w in store.writes] == ["old", "a"] + ["a"] * 6
    assert find_overlaps(a.intervals() + b.intervals()) == []


def test_control_without_the_precondition_makes_two_leaders(store: LeaseStore, clock: FakeClock) -> None:
    """The detector is not blind: with updates that carry no resourceVersion both racers win."""
    a, b = _race(store, clock, precondition=False)
    overlaps = find_overlaps(a.intervals() + b.intervals())
    assert overlaps, (a.log, b.log)
    assert {overlaps[0][0].owner, overlaps[0][1].owner} == {"a", "b"}


def test_waits_are_jittered_only_downwards(store: LeaseStore, clock: FakeClock) -> None:
    a = Replica(store, clock, "a")
    waits = {a.e._next_wait() for _ in range(200)}
    assert min(waits) >= RP * (1 - JITTER) and max(waits) <= RP and len(waits) > 100
    a.attempt()
    clock.step(RD - 0.5)  # leading, 0.5 s before the deadline: never sleep past it
    assert a.e._next_wait() == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease_duration"),
        ({"renew_deadline": 2.0, "retry_period": 2.0}, "renew_deadline"),
        ({"retry_period": -1.0}, "retry_period"),
        ({"lease_duration": float("nan")}, "lease_duration"),
        ({"identity": ""}, "identity"),
        ({"name": ""}, "name"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(store: LeaseStore, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"name": "lease", "namespace": "ns", "identity": "a", **kwargs}
    with pytest.raises(ValueError, match=message):
        LeaderElector(StoreClient(store, "a"), **args)


def test_bad_argument_types_are_type_errors(store: LeaseStore) -> None:
    with pytest.raises(TypeError, match="lease_duration"):
        LeaderElector(StoreClient(store, "a"), name="l", namespace="ns", identity="a", lease_duration="15")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_started_leading"):
        LeaderElector(StoreClient(store, "a"), name="l", namespace="ns", identity="a", on_started_leading=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="api_client"):
        LeaderElector(None, name="l", namespace="ns", identity="a")


def test_a_raising_callback_does_not_stop_the_election(store: LeaseStore, clock: FakeClock) -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    e = LeaderElector(StoreClient(store, "a"), name="lease", namespace="ns", identity="a", clock=clock,
                      on_started_leading=boom)
    e._dispatch(e._attempt())
    assert e.is_leader()


def test_find_overlaps() -> None:
    assert find_overlaps([Interval("a", 0, 1), Interval("b", 1, 2)]) == []  # touching is not overlapping
    assert find_overlaps([Interval("a", 0, 2), Interval("a", 1, 3)]) == []  # one owner
    pairs = find_overlaps([Interval("a", 0, 10), Interval("b", 2, 3), Interval("c", 11, 12), Interval("b", 9, 11)])
    assert [(x.owner, y.owner) for x, y in pairs] == [("a", "b"), ("a", "b")]


def test_master_status_metric(store: LeaseStore, clock: FakeClock) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from keyqueue.leaderelection import export_metrics

    registry = prometheus_client.CollectorRegistry()
    a = Replica(store, clock, "a")
    export_metrics(a.e, registry)

    def status() -> float | None:
        value: float | None = registry.get_sample_value("leader_election_master_status", {"name": "lease"})
        return value

    assert status() == 0
    a.attempt()
    assert status() == 1
    clock.step(RD)
    assert status() == 0
