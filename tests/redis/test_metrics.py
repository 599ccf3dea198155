"""workqueue_* metrics of the Redis queues, both shells: client-go's sequence (as tests/metrics/test_sequence.py)
through SnapshotMetricsProvider and a Prometheus registry, per-handle counters next to the shared depth, retries,
delayed keys, lost leases, an unreachable Redis at scrape time, and which providers are accepted."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from keyqueue import AddResult, FakeClock
from keyqueue.metrics import NoopMetricsProvider, PrometheusMetricsProvider, SnapshotMetricsProvider, set_provider
from keyqueue.ratelimit import ItemExponentialFailureRateLimiter
from keyqueue.redis import LeaseLost
from tests.metrics.prom import Scrape
from tests.metrics.recording import RecordingProvider
from tests.metrics.test_sequence import KINDS, drive
from tests.shells import REDIS_SHELLS


@pytest.fixture(params=sorted(REDIS_SHELLS))
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fresh() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_snapshot_provider(make_queue: Callable[..., Any], kind: str) -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    name = fresh()
    q = make_queue(kind, name=name, clock=clock, metrics_provider=provider)

    def check(step: str) -> None:
        s = provider.snapshot()[name]
        qd, wd = s.queue_duration, s.work_duration
        if step == "added":
            assert (s.adds, s.depth) == (1, 1)
            assert qd.count == 0 and wd.count == 0
        elif step == "got":
            assert s.depth == 0
            assert (qd.count, qd.sum) == (1, 5e-05)  # measured by Redis, in queue time
            assert dict(qd.buckets)[1e-05] == 0 and dict(qd.buckets)[0.0001] == 1
            assert s.unfinished_work_seconds == 0.0
        elif step == "re-added":
            assert (s.adds, s.depth) == (2, 1)  # MARKED once, then four DEDUPs (not counted)
        elif step == "done1":
            assert (wd.count, wd.sum) == (1, 2.5e-05)
            assert s.depth == 1  # queued again, still dirty
        elif step == "got2":
            assert qd.count == 2 and qd.sum == 7.5e-05  # dirty since the re-add, 25 µs before
            assert s.depth == 0
        elif step == "stepped":
            assert s.unfinished_work_seconds == 0.001
            assert s.longest_running_processor_seconds == 0.001
        elif step == "done2":
            assert wd.count == 2 and wd.sum == 0.001025
            assert dict(wd.buckets)[0.0001] == 1 and dict(wd.buckets)[0.001] == 2
            assert s.unfinished_work_seconds == 0.0 and s.longest_running_processor_seconds == 0.0
            assert s.retries == 0 and s.queues == 1 and s.adds == 2

    drive(q, clock, check)


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_prometheus_exposition(make_queue: Callable[..., Any], kind: str) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    name = fresh()
    q = make_queue(kind, name=name, clock=clock, metrics_provider=PrometheusMetricsProvider(registry))
    lbl = {"name": name}

    def check(step: str) -> None:
        s = Scrape(registry)
        v = s.value
        if step == "added":
            assert v("workqueue_adds_total", **lbl) == 1 and v("workqueue_depth", **lbl) == 1
        elif step == "got":
            assert v("workqueue_depth", **lbl) == 0
            assert v("workqueue_queue_duration_seconds_sum", **lbl) == 5e-05
            b = s.buckets("workqueue_queue_duration_seconds", name)
            assert (b["1e-05"], b["0.0001"], b["+Inf"]) == (0, 1, 1)
        elif step == "re-added":
            assert v("workqueue_adds_total", **lbl) == 2 and v("workqueue_depth", **lbl) == 1
        elif step == "done1":
            assert v("workqueue_work_duration_seconds_sum", **lbl) == 2.5e-05
        elif step == "got2":
            assert v("workqueue_queue_duration_seconds_count", **lbl) == 2
        elif step == "stepped":
            assert v("workqueue_unfinished_work_seconds", **lbl) == 0.001
            assert v("workqueue_longest_running_processor_seconds", **lbl) == 0.001
        elif step == "done2":
            assert v("workqueue_work_duration_seconds_sum", **lbl) == 0.001025
            assert v("workqueue_longest_running_processor_seconds", **lbl) == 0
            assert v("workqueue_retries_total", **lbl) == 0
            assert {f.name for f in s.families.values()} == {
                "workqueue_adds", "workqueue_depth", "workqueue_longest_running_processor_seconds",
                "workqueue_queue_duration_seconds", "workqueue_retries", "workqueue_unfinished_work_seconds",
                "workqueue_work_duration_seconds",
            }

    drive(q, clock, check)


def test_counters_per_handle_depth_shared(make_queue: Callable[..., Any], shell: str, redis_url: str) -> None:
    """Two "processes" (handles with their own providers) on one queue: each counts its own adds and gets; both
    see the one shared depth. Two handles on one provider report that depth once."""
    name = fresh()
    pa, pb = SnapshotMetricsProvider(), SnapshotMetricsProvider()
    a = make_queue("queue", name=name, metrics_provider=pa)
    b = make_queue("queue", name=name, metrics_provider=pb)
    for i in range(3):
        assert a.add(f"k{i}") is AddResult.QUEUED
    assert b.add("k0") is AddResult.DEDUP  # not counted: it made nothing dirty
    assert b.add("b0") is AddResult.QUEUED
    sa, sb = pa.snapshot()[name], pb.snapshot()[name]
    assert (sa.adds, sa.depth) == (3, 4)
    assert (sb.adds, sb.depth) == (1, 4)
    assert b.get(timeout=5) == "k0"  # b takes a key that a added: b observes its queue duration
    sa, sb = pa.snapshot()[name], pb.snapshot()[name]
    assert (sa.adds, sa.depth, sa.queue_duration.count) == (3, 3, 0)
    assert (sb.adds, sb.depth, sb.queue_duration.count) == (1, 3, 1)
    assert sb.longest_running_processor_seconds >= 0 and sa.unfinished_work_seconds == 0  # b holds it, not a
    b.done("k0")
    assert pb.snapshot()[name].work_duration.count == 1 and pa.snapshot()[name].work_duration.count == 0

    shared = SnapshotMetricsProvider()
    c = REDIS_SHELLS[shell]("queue", name=name, metrics_provider=shared, url=redis_url)  # closed below
    d = make_queue("queue", name=name, metrics_provider=shared)
    s = shared.snapshot()[name]
    assert (s.queues, s.depth, s.adds) == (2, 3, 0)  # once, not 2 x 3
    c.close()  # the handle that reported the depth goes: the other one takes over
    assert shared.snapshot()[name].depth == 3
    assert d.add("d0") is AddResult.QUEUED
    assert shared.snapshot()[name].adds == 1


def test_adds_of_a_handle_without_metrics_read_no_clock(make_queue: Callable[..., Any], redis_url: str) -> None:
    """The time a key became dirty is only read for workqueue_queue_duration: an add of a handle that records no
    metrics stores none (no TIME in Redis), and a handle that records them observes no queue duration for that key.
    The control: a key added by a handle with metrics is stored with its time and observed."""
    import redis

    name = fresh()
    provider = SnapshotMetricsProvider()
    plain = make_queue("queue", name=name, metrics_provider=NoopMetricsProvider())
    observed = make_queue("queue", name=name, metrics_provider=provider)
    assert plain.add("k1") is AddResult.QUEUED
    assert observed.add("k2") is AddResult.QUEUED
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        entries = r.hgetall(f"kq:{{{name}}}:state")
        seconds, micros = r.time()
    assert entries["k1"] == ""
    assert 0 <= seconds * 1_000_000 + micros - int(entries["k2"]) < 5_000_000  # Redis TIME's two parts, as µs
    assert plain.add("k1") is AddResult.DEDUP  # a waiting key without a time is dirty all the same
    assert observed.get(timeout=5) == "k1"
    assert provider.snapshot()[name].queue_duration.count == 0
    assert observed.get(timeout=5) == "k2"
    assert provider.snapshot()[name].queue_duration.count == 1
    assert plain.add("k1") is AddResult.MARKED and observed.done("k1") is True  # queued again, still no time
    assert observed.get(timeout=5) == "k1" and provider.snapshot()[name].queue_duration.count == 1


def test_retries_and_delayed_keys(make_queue: Callable[..., Any]) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    name = fresh()
    q = make_queue("ratelimiting", ItemExponentialFailureRateLimiter(0.001, 1.0), name=name, clock=clock,
                   metrics_provider=PrometheusMetricsProvider(registry))

    def value(metric: str) -> float:
        return Scrape(registry).value(metric, name=name)

    q.add("plain")
    assert value("workqueue_retries_total") == 0  # control: a plain add is not a retry
    q.add_after("a", 1.0)
    q.add_after("a", 0.5)
    assert q.add_after("a", 5.0) is AddResult.DELAY_KEPT  # ignored, but counted like client-go
    q.add_after("b", 0)  # added now, and counted
    q.add_rate_limited("c")
    assert value("workqueue_retries_total") == 5
    assert value("workqueue_depth") == 2 and value("workqueue_adds_total") == 2  # plain, b; a and c wait
    clock.step(2.0)
    # The scrape fires what is due (as the in-process queues' scrapes do) and counts those adds.
    assert value("workqueue_depth") == 4 and value("workqueue_adds_total") == 4
    got = {q.get(timeout=5) for _ in range(4)}
    assert got == {"plain", "a", "b", "c"}
    # a was due at 0.5 s, c at 0.001 s; handed out at 2.0 s: queue time from when they fell due (1.5 + 1.999 s).
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(2.0 + 2.0 + 1.5 + 1.999)
    q.shut_down()
    q.add_after("d", 1.0)
    q.add_rate_limited("e")
    assert value("workqueue_retries_total") == 5  # dropped after shutdown: not counted


def test_lost_lease_observes_no_work_and_its_reclaim_counts_as_an_add(make_queue: Callable[..., Any]) -> None:
    clock = FakeClock()
    name = fresh()
    pa, pb = SnapshotMetricsProvider(), SnapshotMetricsProvider()
    # A 300 s lease: the heartbeat (every 100 real seconds) never beats in this test; the fake clock runs it out.
    a = make_queue("queue", name=name, clock=clock, lease=300.0, metrics_provider=pa)
    b = make_queue("queue", name=name, clock=clock, lease=300.0, metrics_provider=pb)
    a.add("k")
    assert a.get(timeout=5) == "k"
    clock.step(400.0)
    assert b.get(timeout=5) == "k"  # b's script reclaimed the run-out lease: the key became dirty again
    sb = pb.snapshot()[name]
    assert (sb.adds, sb.queue_duration.count, sb.queue_duration.sum) == (1, 1, 0.0)
    assert pa.snapshot()[name].unfinished_work_seconds == 400.0  # a does not know yet
    with pytest.raises(LeaseLost):
        a.done("k")
    sa = pa.snapshot()[name]
    assert sa.work_duration.count == 0 and sa.unfinished_work_seconds == 0.0  # control below: b's done counts
    b.done("k")
    assert pb.snapshot()[name].work_duration.count == 1


def test_which_providers(make_queue: Callable[..., Any]) -> None:
    with pytest.raises(TypeError, match="SnapshotMetricsProvider or PrometheusMetricsProvider"):
        make_queue("queue", name=fresh(), metrics_provider=RecordingProvider())
    with pytest.raises(TypeError, match="object"):
        make_queue("queue", name=fresh(), metrics_provider=object())
    assert make_queue("queue", name=fresh(), metrics_provider=NoopMetricsProvider())._state.metrics is None
    snapshot = SnapshotMetricsProvider()
    previous = set_provider(RecordingProvider())
    try:
        assert make_queue("queue", name=fresh())._state.metrics is None  # a push provider process-wide: not used
        set_provider(snapshot)
        name = fresh()
        make_queue("queue", name=name).add("x")  # the process-wide snapshot provider is used
    finally:
        set_provider(previous)
    assert snapshot.snapshot()[name].adds == 1


def test_scrape_survives_an_unreachable_redis(
    make_queue: Callable[..., Any], shell: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = fresh()
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)
    good = make_queue("queue", name=name, metrics_provider=provider)
    good.add("x")
    assert Scrape(registry).value("workqueue_depth", name=name) == 1  # control: a reachable Redis is read
    dead_name = fresh()
    dead = REDIS_SHELLS[shell]("queue", name=dead_name, metrics_provider=provider, url="redis://127.0.0.1:1/0")
    try:
        with caplog.at_level("WARNING", logger="keyqueue.redis"):
            s = Scrape(registry)  # the dead queue's depth read fails: the scrape still answers, for both names
    finally:
        dead.close()
    assert s.value("workqueue_depth", name=dead_name) == 0 and s.value("workqueue_depth", name=name) == 1
    assert any("depth not read" in r.getMessage() and "127.0.0.1:1" in r.getMessage() for r in caplog.records)


def test_scrapes_during_concurrent_work_never_go_backwards(make_queue: Callable[..., Any]) -> None:
    import threading

    name = fresh()
    provider = SnapshotMetricsProvider()
    q = make_queue("queue", name=name, metrics_provider=provider)
    rounds = 300
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(rounds):
                q.add(f"k{i % 7}")
                q.done(q.get(timeout=5))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    last = (0, 0, 0)
    scrapes = 0
    while worker.is_alive() or scrapes == 0:
        s = provider.snapshot()[name]
        now = (s.adds, s.queue_duration.count, s.work_duration.count)
        assert all(a >= b for a, b in zip(now, last, strict=True)), (now, last)
        assert s.depth >= 0 and s.unfinished_work_seconds >= 0
        last, scrapes = now, scrapes + 1
    worker.join()
    assert not errors, errors
    s = provider.snapshot()[name]
    assert (s.adds, s.queue_duration.count, s.work_duration.count, s.depth) == (rounds, rounds, rounds, 0)
    assert scrapes > 1  # control: the scrapes really ran while the work did
