"""Semantics beyond the sequence: depth, bucketing, key lifetimes, providers, in-flight gauges, threads."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from bisect import bisect_left
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import keyqueue
from keyqueue import FakeClock, RealClock
from keyqueue.metrics import (
    MetricsProvider,
    NoopMetricsProvider,
    SnapshotMetricsProvider,
    get_provider,
    recorder_for,
    refresh_in_flight,
    set_provider,
)
from keyqueue.metrics._recorders import BUCKET_BOUNDS_NS, PullRecorder, PushRecorder, bucket_index
from tests.metrics.recording import RecordingProvider


class Key:
    """A hashable key that can be weakly referenced, to see who still holds it."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"Key({self.label})"


@pytest.fixture
def restore_provider() -> Iterator[None]:
    previous = get_provider()
    yield
    set_provider(previous)


# -- depth ---------------------------------------------------------------------------------------------------------


def test_depth_counts_dirty_keys_and_never_goes_negative() -> None:
    provider = SnapshotMetricsProvider()
    recording = RecordingProvider()
    qs: list[keyqueue.Queue[str]] = [
        keyqueue.Queue(name="d", metrics_provider=provider),
        keyqueue.Queue(name="d", metrics_provider=recording),
    ]
    for q in qs:
        q.add("x")
        q.done("x")  # spurious done of a queued key (client-go would push a duplicate: depth -1 later)
        assert q.get(timeout=1) == "x"
        q.add("x")  # re-added while processing: dirty, so depth counts it although len() does not
        assert len(q) == 0
    assert provider.snapshot()["d"].depth == 1  # control: depth is not stuck at zero
    assert recording.series["d"].depth.value == 1
    for q in qs:
        q.done("x")  # back in the queue
        q.done("x")  # spurious: not processing
        q.done("never-added")
        assert q.get(timeout=1) == "x"
        with pytest.raises(TimeoutError):
            q.get(timeout=0)  # no duplicate was handed out
        q.done("x")
        q.done("x")
    assert provider.snapshot()["d"].depth == 0
    assert recording.series["d"].depth.value == 0
    assert recording.series["d"].depth.lowest == 0  # never below zero at any point
    assert recording.series["d"].depth.calls == 4  # control: it did move (2 inc, 2 dec)
    assert recording.series["d"].adds.value == 2


def test_due_delayed_key_counts_in_depth_before_any_get() -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: keyqueue.DelayingQueue[str] = keyqueue.DelayingQueue(name="due", clock=clock, metrics_provider=provider)
    q.add_after("a", 1.0)
    assert provider.snapshot()["due"].depth == 0  # control: not due yet, not dirty
    clock.step(2.0)  # all workers busy elsewhere: nobody calls get()
    s = provider.snapshot()["due"]
    assert (s.depth, s.adds) == (1, 1)  # client-go: added (and counted) at its due time


# -- bucketing -----------------------------------------------------------------------------------------------------

BOUNDARY_VALUES = sorted({max(0, b + e) for b in BUCKET_BOUNDS_NS for e in (-1, 0, 1)} | {0, 1, 2**63, 2**64, 2**80})


@pytest.mark.parametrize("d", BOUNDARY_VALUES)
def test_bucket_index_at_boundaries(d: int) -> None:
    assert bucket_index(d) == bisect_left(BUCKET_BOUNDS_NS, d)


@given(st.integers(min_value=0, max_value=2**70))
def test_bucket_index_matches_float_seconds(d: int) -> None:
    expected = next((i for i, b in enumerate(BUCKET_BOUNDS_NS) if d / 1e9 <= b / 1e9), len(BUCKET_BOUNDS_NS))
    assert bucket_index(d) == expected


@given(st.lists(st.integers(min_value=0, max_value=2**66), max_size=30))
def test_recorder_histogram_is_exact(durations: list[int]) -> None:
    r = PullRecorder(FakeClock(), None)
    t = 0
    for i, d in enumerate(durations):
        r.add(i, t)
        r.get(i, t + d)
        r.done(i, t + d, t + d + d)
        t += d + d
    r.fold()  # the durations are buffered until a read (or FOLD_AT of them)
    expected = [0] * (len(BUCKET_BOUNDS_NS) + 1)
    for d in durations:
        expected[bisect_left(BUCKET_BOUNDS_NS, d)] += 1
    assert r.queue_hist[:-1] == expected == r.work_hist[:-1]
    assert r.queue_hist[-1] == sum(durations) == r.work_hist[-1]


# -- key lifetimes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", ["pull", "push"])
def test_recorder_forgets_keys(make: str) -> None:
    clock = FakeClock()
    r: PullRecorder | PushRecorder = (
        PullRecorder(clock, threading.Lock()) if make == "pull" else PushRecorder(RecordingProvider(), "n", clock, None)
    )
    k = Key("a")
    ref = weakref.ref(k)
    r.add(k, 0)
    del k
    gc.collect()
    assert ref() is not None  # control: dirty, the recorder holds its add time
    r.get(ref(), 10)
    gc.collect()
    assert ref() is None  # handed out: the start time is the core's
    r.done(Key("a"), 10, 20)


def test_queue_with_metrics_keeps_no_key_after_done() -> None:
    provider = SnapshotMetricsProvider()
    q: keyqueue.DelayingQueue[Key] = keyqueue.DelayingQueue(name="life", metrics_provider=provider)
    keys = [Key(str(i)) for i in range(3)]
    refs = [weakref.ref(k) for k in keys]
    for k in keys:
        q.add(k)
    q.add_after(keys[0], 0)
    del keys, k
    for _ in range(3):
        q.done(q.get(timeout=1))
    provider.snapshot()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


# -- providers -----------------------------------------------------------------------------------------------------


def test_noop_and_unnamed_get_no_recorder() -> None:
    lock = threading.Lock()
    clock = RealClock()
    assert recorder_for("", None, clock, lock) is None
    assert recorder_for("", SnapshotMetricsProvider(), clock, lock) is None
    assert recorder_for("named", NoopMetricsProvider(), clock, lock) is None
    assert recorder_for("named", None, clock, lock) is None  # the default global provider is the no-op one
    recording = RecordingProvider()
    assert recorder_for("", recording, clock, lock) is None
    keyqueue.RateLimitingQueue[str](metrics_provider=recording).add_rate_limited("k")
    assert recording.created == [] and recording.series == {}  # an unnamed queue never asks for a metric
    assert isinstance(recorder_for("named", SnapshotMetricsProvider(), clock, lock), PullRecorder)  # control
    assert isinstance(recorder_for("named", RecordingProvider(), clock, lock), PushRecorder)
    assert isinstance(RecordingProvider(), MetricsProvider)
    assert isinstance(NoopMetricsProvider(), MetricsProvider)


def test_bad_provider_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"missing new_depth_metric.*got object"):
        keyqueue.Queue(name="x", metrics_provider=object())
    with pytest.raises(TypeError, match="got int: 5"):
        keyqueue.Queue(metrics_provider=5)  # even unnamed: the mistake shows at once
    with pytest.raises(TypeError, match="got str"):
        set_provider("prometheus")  # type: ignore[arg-type]


def test_set_provider_affects_queues_built_afterwards(restore_provider: None) -> None:
    before: keyqueue.Queue[str] = keyqueue.Queue(name="g")
    provider = SnapshotMetricsProvider()
    previous = set_provider(provider)
    assert isinstance(previous, NoopMetricsProvider)
    assert get_provider() is provider
    after: keyqueue.Queue[str] = keyqueue.Queue(name="g")
    explicit: keyqueue.Queue[str] = keyqueue.Queue(name="g", metrics_provider=NoopMetricsProvider())
    for q in (before, after, explicit):
        q.add("k")
    assert provider.snapshot()["g"].adds == 1  # only `after`
    assert set_provider(None) is provider
    assert isinstance(get_provider(), NoopMetricsProvider)


def test_provider_metric_objects_may_be_prometheus_client_children() -> None:
    """client-go's interfaces fit prometheus_client's own Gauge/Counter/Histogram children."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    reg = CollectorRegistry()
    gauge = Gauge("g", "g", ["name", "m"], registry=reg)
    counter = Counter("c", "c", ["name", "m"], registry=reg)
    hist = Histogram("h", "h", ["name", "m"], registry=reg)

    class ChildProvider:
        def new_depth_metric(self, name: str) -> Gauge:
            return gauge.labels(name, "depth")

        def new_adds_metric(self, name: str) -> Counter:
            return counter.labels(name, "adds")

        def new_latency_metric(self, name: str) -> Histogram:
            return hist.labels(name, "latency")

        def new_work_duration_metric(self, name: str) -> Histogram:
            return hist.labels(name, "work")

        def new_unfinished_work_seconds_metric(self, name: str) -> Gauge:
            return gauge.labels(name, "unfinished")

        def new_longest_running_processor_seconds_metric(self, name: str) -> Gauge:
            return gauge.labels(name, "longest")

        def new_retries_metric(self, name: str) -> Counter:
            return counter.labels(name, "retries")

    clock = FakeClock()
    q: keyqueue.RateLimitingQueue[str] = keyqueue.RateLimitingQueue(
        name="kids", clock=clock, metrics_provider=ChildProvider()
    )
    q.add("k")
    clock.step(0.5)
    q.get()
    q.add_rate_limited("r")
    clock.step(0.25)
    # "r" fell due 5 ms after its add_rate_limited: the step's refresh fires it, as client-go's loop would.
    assert reg.get_sample_value("c_total", {"name": "kids", "m": "adds"}) == 2
    assert reg.get_sample_value("g", {"name": "kids", "m": "depth"}) == 1
    assert reg.get_sample_value("c_total", {"name": "kids", "m": "retries"}) == 1
    assert reg.get_sample_value("h_sum", {"name": "kids", "m": "latency"}) == 0.5
    assert reg.get_sample_value("g", {"name": "kids", "m": "longest"}) == 0.25


# -- in-flight gauges ----------------------------------------------------------------------------------------------


def test_in_flight_gauges_sum_and_max() -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    q: keyqueue.Queue[str] = keyqueue.Queue(name="f", clock=clock, metrics_provider=provider)
    for k in "abc":
        q.add(k)
    q.get()
    clock.step(1.0)
    q.get()
    clock.step(0.5)
    s = provider.snapshot()["f"]
    assert (s.unfinished_work_seconds, s.longest_running_processor_seconds) == (2.0, 1.5)  # 1.5 + 0.5
    q.done("a")
    s = provider.snapshot()["f"]
    assert (s.unfinished_work_seconds, s.longest_running_processor_seconds) == (0.5, 0.5)


def test_refresh_in_flight_for_push_providers_on_a_real_clock() -> None:
    recording = RecordingProvider()
    q: keyqueue.Queue[str] = keyqueue.Queue(name="rt", metrics_provider=recording)
    q.add("k")
    before_get = RealClock().now_ns()
    q.get()
    m = recording.series["rt"]
    assert m.unfinished.calls == 0  # a real clock never jumps: nothing refreshed the gauges by itself
    refresh_in_flight()
    after_refresh = RealClock().now_ns()
    assert m.unfinished.calls == 1 and m.longest.calls == 1
    # Both are the age of the one key in flight, which started after before_get and was measured before
    # after_refresh.
    assert m.unfinished.value == m.longest.value
    assert 0 <= m.longest.value <= (after_refresh - before_get) / 1e9
    q.done("k")
    refresh_in_flight()
    assert (m.unfinished.value, m.longest.value) == (0.0, 0.0)


# -- threads -------------------------------------------------------------------------------------------------------


def test_scrapes_during_concurrent_work_are_consistent() -> None:
    """Producers, workers and a scraper at once: every snapshot is internally consistent and the totals are
    exact at the end."""
    provider = SnapshotMetricsProvider()
    q: keyqueue.Queue[int] = keyqueue.Queue(name="conc", metrics_provider=provider)
    n_producers, per_producer = 3, 2000
    problems: list[str] = []
    stop = threading.Event()

    def produce(base: int) -> None:
        for i in range(per_producer):
            q.add(base + i)

    def work() -> None:
        for key in q:
            del key

    def scrape() -> None:
        while not stop.is_set():
            s = provider.snapshot()["conc"]
            # adds = handed out + still dirty (only distinct keys are added, none is re-added while processing)
            if s.adds != s.queue_duration.count + s.depth:
                problems.append(f"adds {s.adds} != gets {s.queue_duration.count} + depth {s.depth}")
            if s.work_duration.count > s.queue_duration.count or s.depth < 0:
                problems.append(f"impossible snapshot {s}")

    threads = [threading.Thread(target=produce, args=(k * per_producer,)) for k in range(n_producers)]
    workers = [threading.Thread(target=work) for _ in range(2)]
    scraper = threading.Thread(target=scrape)
    for t in [*workers, scraper, *threads]:
        t.start()
    for t in threads:
        t.join(30)
    assert q.shut_down_with_drain(timeout=30)
    for t in workers:
        t.join(30)
    stop.set()
    scraper.join(30)
    assert problems == []
    s = provider.snapshot()["conc"]
    total = n_producers * per_producer
    assert (s.adds, s.depth, s.queue_duration.count, s.work_duration.count) == (total, 0, total, total)


# -- optional dependency -------------------------------------------------------------------------------------------


def test_import_without_prometheus_client() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["prometheus_client"] = None  # as if it were not installed
        import keyqueue, keyqueue.metrics
        p = keyqueue.metrics.SnapshotMetricsProvider()
        q = keyqueue.Queue(name="n", metrics_provider=p)
        q.add("k")
        assert p.snapshot()["n"].adds == 1
        try:
            from keyqueue.metrics import PrometheusMetricsProvider
        except ImportError as exc:
            print("ImportError:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ImportError: keyqueue.metrics.PrometheusMetricsProvider needs prometheus_client" in out.stdout
    assert "keyqueue[metrics]" in out.stdout


def test_unknown_attribute() -> None:
    import keyqueue.metrics as m

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope  # noqa: B018


def test_dead_queue_keeps_its_counts_and_frees_its_keys() -> None:
    provider = SnapshotMetricsProvider()
    q: keyqueue.RateLimitingQueue[Key] = keyqueue.RateLimitingQueue(name="gone", metrics_provider=provider)
    keys = [Key(str(i)) for i in range(3)]
    refs = [weakref.ref(k) for k in keys]
    for k in keys:
        q.add(k)
    q.add_after(keys[0], 0)  # dedup, but a retry
    in_flight = q.get(timeout=1)  # handed out, never done
    before = provider.snapshot()["gone"]
    assert (before.adds, before.depth, before.queues, before.retries) == (3, 2, 1, 1)
    del q, keys, k, in_flight
    gc.collect()
    assert [r() for r in refs] == [None, None, None]  # nothing of the dead queue keeps a key alive
    for _ in range(2):  # first read folds the dead queue into the retired totals, the second reads those
        after = provider.snapshot()["gone"]
        assert (after.adds, after.depth, after.queues, after.retries) == (3, 0, 0, 1)
        assert after.queue_duration.count == 1 and after.unfinished_work_seconds == 0
    # A new queue with the same name continues the counters.
    q2: keyqueue.Queue[str] = keyqueue.Queue(name="gone", metrics_provider=provider)
    q2.add("k")
    assert provider.snapshot()["gone"].adds == 4


def test_slot_reads_the_same_pending_count_before_and_after_the_death_callback() -> None:
    from keyqueue.metrics.snapshot import _Slot

    r = PullRecorder(FakeClock(), None)
    r.add("a", 1)
    r.add("b", 2)
    slot = _Slot(r)
    assert slot.dead_pending() == 2  # the callback has not run yet: read from the (final) dict
    slot._recorder_died(None)
    assert slot.added is None and slot.dead_pending() == 2
    del r
    gc.collect()
    assert slot.ref() is None and slot.dead_pending() == 2  # the real callback ran once more: no change


# -- shutdown freezes the in-flight gauges ------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue", "priority"])
def test_in_flight_gauges_stop_moving_at_shutdown_push_provider(kind: str) -> None:
    clock = FakeClock()
    recording = RecordingProvider()
    cls = keyqueue.PriorityQueue if kind == "priority" else keyqueue.Queue
    q = cls(name="sd", clock=clock, metrics_provider=recording)
    q.add("k")
    q.get()
    clock.step(1.0)  # a clock jump refreshes the gauges (the control: they do move before shutdown)
    m = recording.series["sd"]
    assert (m.unfinished.value, m.longest.value) == (1.0, 1.0)
    calls = m.unfinished.calls
    q.shut_down()
    clock.step(5.0)
    refresh_in_flight()
    assert m.unfinished.calls == calls and m.longest.calls == calls  # client-go: no update after shutdown
    assert (m.unfinished.value, m.longest.value) == (1.0, 1.0)
    q.done("k")
    assert len(m.work.observations) == 1  # work is still observed after shutdown


@pytest.mark.parametrize("kind", ["queue", "priority", "aio"])
def test_in_flight_gauges_freeze_at_shutdown_snapshot_provider(kind: str) -> None:
    clock = FakeClock()
    provider = SnapshotMetricsProvider()
    cls = {"queue": keyqueue.Queue, "priority": keyqueue.PriorityQueue, "aio": keyqueue.aio.Queue}[kind]
    q = cls(name="sz", clock=clock, metrics_provider=provider)
    q.add("a")
    q.add("b")
    assert (asyncio.run(q.get()) if kind == "aio" else q.get()) == "a"
    clock.step(2.0)
    s = provider.snapshot()["sz"]
    assert (s.unfinished_work_seconds, s.longest_running_processor_seconds) == (2.0, 2.0)  # control: it moves
    q.shut_down()
    clock.step(3.0)
    q.done("a")  # done after shutdown does not unfreeze them either
    s = provider.snapshot()["sz"]
    assert (s.unfinished_work_seconds, s.longest_running_processor_seconds) == (2.0, 2.0)
    assert s.work_duration.count == 1
