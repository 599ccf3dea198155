"""The Prometheus exposition: client-go's names, types, help, label, buckets; no *_created; registries; /metrics."""

from __future__ import annotations

import gc
import math
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

import keyqueue
from keyqueue import AddResult, FakeClock, ItemExponentialFailureRateLimiter
from keyqueue.metrics import BUCKETS, PrometheusMetricsProvider, serve
from keyqueue.metrics.prometheus import HELP
from tests.metrics.prom import Scrape

# What client-go's standard adapter exposes: family (TYPE line) -> type.
FAMILIES = {
    "workqueue_depth": "gauge",
    "workqueue_adds_total": "counter",
    "workqueue_queue_duration_seconds": "histogram",
    "workqueue_work_duration_seconds": "histogram",
    "workqueue_unfinished_work_seconds": "gauge",
    "workqueue_longest_running_processor_seconds": "gauge",
    "workqueue_retries_total": "counter",
}
LE = ["1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10", "+Inf"]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def provider(registry: CollectorRegistry) -> PrometheusMetricsProvider:
    return PrometheusMetricsProvider(registry)


def expected_sample_names() -> set[str]:
    names: set[str] = set()
    for family, kind in FAMILIES.items():
        if kind == "histogram":
            names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
        else:
            names.add(family)
    return names


def test_names_types_help_label_buckets(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    q: keyqueue.Queue[str] = keyqueue.Queue(name="controller-a", metrics_provider=provider)
    q.add("k")
    s = Scrape(registry)
    # TYPE and HELP lines exactly as a Go process writes them (family names keep their _total suffix).
    for family, kind in FAMILIES.items():
        assert f"# TYPE {family} {kind}\n" in s.text
        assert f"# HELP {family} {HELP[family]}\n" in s.text
    assert HELP["workqueue_depth"] == "Current depth of workqueue"
    assert HELP["workqueue_adds_total"] == "Total number of adds handled by workqueue"
    assert HELP["workqueue_retries_total"] == "Total number of retries handled by workqueue"
    # Parsed: the sample names are exactly client-go's, every sample carries name="controller-a" (and le for
    # buckets), nothing else.
    assert s.names() == expected_sample_names()
    for sample in s.samples():
        extra = {"le"} if sample.name.endswith("_bucket") else set()
        assert set(sample.labels) == {"name"} | extra
        assert sample.labels["name"] == "controller-a"
    parsed_types = {f.name: f.type for f in s.families.values()}
    assert parsed_types == {
        "workqueue_depth": "gauge",
        "workqueue_adds": "counter",  # the parser drops _total from a counter family's name
        "workqueue_queue_duration_seconds": "histogram",
        "workqueue_work_duration_seconds": "histogram",
        "workqueue_unfinished_work_seconds": "gauge",
        "workqueue_longest_running_processor_seconds": "gauge",
        "workqueue_retries": "counter",
    }
    for family in ("workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"):
        les = [smp.labels["le"] for smp in s.families[family].samples if smp.name.endswith("_bucket")]
        assert les == LE  # Go's formatting ("1", "10"), ten buckets plus +Inf
        assert [float(le) for le in les[:-1]] == [1e-8 * 10**i for i in range(10)] == list(BUCKETS)
        assert math.isinf(float(les[-1]))


def test_no_created_series_with_control(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    q: keyqueue.Queue[str] = keyqueue.Queue(name="c", metrics_provider=provider)
    q.add("k")
    q.done(q.get())
    assert not [n for n in Scrape(registry).names() if n.endswith("_created")]
    # Control: prometheus_client's own counter in the same registry does export *_created, so the check above
    # would have seen ours.
    Counter("control_events", "a plain prometheus_client counter", registry=registry).inc()
    assert "control_events_created" in Scrape(registry).names()


def test_no_created_series_in_the_openmetrics_exposition_with_control(
    registry: CollectorRegistry, provider: PrometheusMetricsProvider
) -> None:
    """A scraper that asks for OpenMetrics (Prometheus does, by default) gets that format from ``serve()``; it has
    no ``_created`` samples of ours either, and the same names, types and buckets."""
    from prometheus_client.openmetrics import exposition, parser

    generate_openmetrics: Any = exposition.generate_latest  # untyped in prometheus_client
    parse_openmetrics: Any = parser.text_string_to_metric_families

    q: keyqueue.Queue[str] = keyqueue.Queue(name="om", metrics_provider=provider)
    q.add("k")
    q.done(q.get())
    families = {f.name: f for f in parse_openmetrics(generate_openmetrics(registry).decode())}
    samples = {smp.name for f in families.values() for smp in f.samples}
    assert samples == expected_sample_names()  # exactly client-go's sample names, no *_created
    assert {name: f.type for name, f in families.items()} == {
        "workqueue_depth": "gauge",
        "workqueue_adds": "counter",
        "workqueue_queue_duration_seconds": "histogram",
        "workqueue_work_duration_seconds": "histogram",
        "workqueue_unfinished_work_seconds": "gauge",
        "workqueue_longest_running_processor_seconds": "gauge",
        "workqueue_retries": "counter",
    }
    les = [smp.labels["le"] for smp in families["workqueue_work_duration_seconds"].samples if "le" in smp.labels]
    assert [float(le) for le in les] == [*BUCKETS, math.inf]
    # Control: OpenMetrics does carry _created for prometheus_client's own counters.
    Counter("control_events", "a plain prometheus_client counter", registry=registry).inc()
    names = {smp.name for f in parse_openmetrics(generate_openmetrics(registry).decode()) for smp in f.samples}
    assert "control_events_created" in names


def test_unnamed_queue_exports_nothing(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    q: keyqueue.RateLimitingQueue[str] = keyqueue.RateLimitingQueue(metrics_provider=provider)
    assert q._core.metrics is None  # no recorder at all: the core's hot path is one `is not None` check
    q.add("k")
    q.add_rate_limited("r")
    q.done(q.get())
    assert Scrape(registry).text == ""
    assert provider.snapshot() == {}
    # Control: a named queue on the same provider shows up at once.
    keyqueue.Queue[str](name="named", metrics_provider=provider).add("k")
    assert Scrape(registry).value("workqueue_adds_total", name="named") == 1


@pytest.mark.parametrize("kind", ["queue", "delaying", "ratelimiting"])
def test_unnamed_queue_exports_nothing_in_either_shell(
    make_queue: Callable[..., Any], kind: str, registry: CollectorRegistry, provider: PrometheusMetricsProvider
) -> None:
    q = make_queue(kind, metrics_provider=provider)
    q.add("k")
    if kind != "queue":
        q.add_after("d", 0)
    q.done(q.get(timeout=5))
    assert Scrape(registry).text == "" and provider.snapshot() == {}
    named = make_queue(kind, name=f"named-{kind}", metrics_provider=provider)  # control: same shell, named
    named.add("k")
    assert Scrape(registry).value("workqueue_adds_total", name=f"named-{kind}") == 1


def test_retries(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    clock = FakeClock()
    q: keyqueue.RateLimitingQueue[str] = keyqueue.RateLimitingQueue(
        ItemExponentialFailureRateLimiter(0.001, 1.0), name="r", clock=clock, metrics_provider=provider
    )

    def retries() -> float:
        return Scrape(registry).value("workqueue_retries_total", name="r")

    q.add("plain")
    assert retries() == 0  # control: a plain add is not a retry
    q.add_after("a", 1.0)
    q.add_after("a", 0.5)  # moves the entry earlier: still an accepted add_after
    assert q.add_after("a", 5.0) is AddResult.DELAY_KEPT  # a later entry is ignored, but counted like client-go
    q.add_after("b", 0)  # no delay: added now, and counted (client-go counts before the delay check)
    q.add_rate_limited("c")
    assert retries() == 5
    s = Scrape(registry)
    assert s.value("workqueue_depth", name="r") == 2  # plain, b; a and c are delayed
    assert s.value("workqueue_adds_total", name="r") == 2
    clock.step(1.0)
    assert len(q) == 4  # a and c fell due
    assert Scrape(registry).value("workqueue_adds_total", name="r") == 4
    q.shut_down()
    q.add_after("d", 1.0)
    q.add_rate_limited("e")
    assert retries() == 5  # dropped after shutdown: not counted


def test_delayed_key_queue_duration_starts_when_due(
    registry: CollectorRegistry, provider: PrometheusMetricsProvider
) -> None:
    clock = FakeClock()
    q: keyqueue.DelayingQueue[str] = keyqueue.DelayingQueue(name="d", clock=clock, metrics_provider=provider)
    q.add_after("k", 0.5)
    clock.step(2.0)
    assert q.get(timeout=5) == "k"
    # Due at 0.5 s, handed out at 2.0 s: it waited 1.5 s in the queue (the 0.5 s delay is not queue time).
    assert Scrape(registry).value("workqueue_queue_duration_seconds_sum", name="d") == 1.5


def test_two_providers_two_registries_are_independent() -> None:
    reg1, reg2 = CollectorRegistry(), CollectorRegistry()
    p1, p2 = PrometheusMetricsProvider(reg1), PrometheusMetricsProvider(reg2)
    q1: keyqueue.Queue[str] = keyqueue.Queue(name="same", metrics_provider=p1)
    q2: keyqueue.Queue[str] = keyqueue.Queue(name="same", metrics_provider=p2)
    q1.add("a")
    q1.add("b")
    q2.add("a")
    assert Scrape(reg1).value("workqueue_adds_total", name="same") == 2
    assert Scrape(reg2).value("workqueue_adds_total", name="same") == 1
    q2.done(q2.get())
    assert Scrape(reg1).value("workqueue_work_duration_seconds_count", name="same") == 0
    assert Scrape(reg2).value("workqueue_work_duration_seconds_count", name="same") == 1


def test_several_names_one_provider(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    a: keyqueue.Queue[str] = keyqueue.Queue(name="a", metrics_provider=provider)
    b: keyqueue.DelayingQueue[str] = keyqueue.DelayingQueue(name="b", metrics_provider=provider)
    a.add("x")
    b.add("x")
    b.add("y")
    s = Scrape(registry)
    assert s.value("workqueue_depth", name="a") == 1
    assert s.value("workqueue_depth", name="b") == 2
    assert [smp.labels["name"] for smp in s.families["workqueue_depth"].samples] == ["a", "b"]


def test_same_name_twice_shares_the_series_and_survives_the_queue(
    registry: CollectorRegistry, provider: PrometheusMetricsProvider
) -> None:
    clock = FakeClock()
    q1: keyqueue.Queue[str] = keyqueue.Queue(name="dup", clock=clock, metrics_provider=provider)
    q2: keyqueue.Queue[str] = keyqueue.Queue(name="dup", clock=clock, metrics_provider=provider)
    q1.add("a")
    q2.add("a")
    q2.add("b")
    assert q1.get() == "a" and q2.get() == "a"
    clock.step(0.25)
    s = Scrape(registry)
    assert s.value("workqueue_adds_total", name="dup") == 3
    assert s.value("workqueue_depth", name="dup") == 1
    assert s.value("workqueue_unfinished_work_seconds", name="dup") == 0.5  # two keys, 0.25 s each
    assert s.value("workqueue_longest_running_processor_seconds", name="dup") == 0.25
    q1.done("a")
    # The first queue goes away: its counters stay (a counter never goes backwards); its depth and in-flight
    # keys no longer count.
    del q1
    gc.collect()
    assert [m.queues for m in provider.snapshot().values()] == [1]
    s = Scrape(registry)
    assert s.value("workqueue_adds_total", name="dup") == 3
    assert s.value("workqueue_work_duration_seconds_count", name="dup") == 1
    assert s.value("workqueue_depth", name="dup") == 1  # q2's "b"
    assert s.value("workqueue_unfinished_work_seconds", name="dup") == 0.25  # q2's "a" only
    q2.done("a")
    assert Scrape(registry).value("workqueue_work_duration_seconds_count", name="dup") == 2


def test_second_provider_on_one_registry_is_refused(registry: CollectorRegistry) -> None:
    first = PrometheusMetricsProvider(registry)
    with pytest.raises(ValueError, match="already has workqueue_"):
        PrometheusMetricsProvider(registry)
    first.unregister()
    first.unregister()  # idempotent
    PrometheusMetricsProvider(registry)  # the names are free again


def test_registry_type_checked() -> None:
    with pytest.raises(TypeError, match="CollectorRegistry, got dict"):
        PrometheusMetricsProvider({})  # type: ignore[arg-type]


def test_default_registry_is_the_global_one() -> None:
    from prometheus_client import REGISTRY

    provider = PrometheusMetricsProvider()
    try:
        assert provider.registry is REGISTRY
        keyqueue.Queue[str](name="kq-test-global", metrics_provider=provider).add("k")
        assert Scrape(REGISTRY).value("workqueue_adds_total", name="kq-test-global") == 1
    finally:
        provider.unregister()


def test_serve_metrics_over_http(registry: CollectorRegistry, provider: PrometheusMetricsProvider) -> None:
    q: keyqueue.Queue[str] = keyqueue.Queue(name="http", metrics_provider=provider)
    q.add("k")
    with serve(port=0, addr="127.0.0.1", registry=registry) as srv:
        assert srv.port > 0 and srv.url == f"http://127.0.0.1:{srv.port}/metrics"
        with urllib.request.urlopen(srv.url, timeout=5) as resp:
            assert resp.status == 200
            body = resp.read().decode()
    assert 'workqueue_depth{name="http"} 1.0' in body
    assert not srv.thread.is_alive()  # close() (the with block) stopped it


def test_serve_rejects_bad_port() -> None:
    with pytest.raises(ValueError, match="port must be an int"):
        serve(port=-1)
    with pytest.raises(ValueError, match="port must be an int"):
        serve(port="9100")  # type: ignore[arg-type]


def test_serve_rejects_a_bad_addr_or_registry_before_starting(provider: PrometheusMetricsProvider) -> None:
    threads = set(threading.enumerate())
    with pytest.raises(TypeError, match="addr must be a str, got int"):
        serve(0, addr=127)  # type: ignore[arg-type]
    # The easy mistake: the provider instead of its registry (would otherwise answer every scrape with a 500).
    with pytest.raises(TypeError, match=r"CollectorRegistry \(pass provider.registry\), got PrometheusMetrics"):
        serve(0, registry=provider)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CollectorRegistry, got dict"):
        serve(0, registry={})  # type: ignore[arg-type]
    assert set(threading.enumerate()) == threads  # no serving thread was started
    with serve(0, registry=provider.registry) as srv:  # control: the right argument serves
        assert srv.thread.is_alive()


# -- dropping a finished queue's series ----------------------------------------------------------


def test_forget_drops_the_series_of_finished_queues() -> None:
    reg = CollectorRegistry()
    provider = PrometheusMetricsProvider(reg)
    names = [f"tenant-{i}" for i in range(200)]
    for name in names:
        q: keyqueue.Queue[str] = keyqueue.Queue(name=name, metrics_provider=provider)
        q.add("k")
        q.done(q.get())
        q.shut_down()
    del q
    gc.collect()
    # The control: a dead queue's counts are kept (counters never go backwards), 31 samples per name.
    before = Scrape(reg)
    assert len([s for s in before.samples() if s.labels.get("name", "").startswith("tenant-")]) == 31 * len(names)
    assert before.value("workqueue_adds_total", name="tenant-7") == 1
    for name in names[:-1]:
        assert provider.forget(name) is True
    assert provider.forget(names[0]) is False  # already gone
    after = Scrape(reg)
    assert {s.labels["name"] for s in after.samples()} == {names[-1]}
    assert provider.names() == [names[-1]] and list(provider.snapshot()) == [names[-1]]
    # A queue built later with a forgotten name starts from zero.
    again: keyqueue.Queue[str] = keyqueue.Queue(name="tenant-7", metrics_provider=provider)
    again.add("x")
    assert Scrape(reg).value("workqueue_adds_total", name="tenant-7") == 1
    with pytest.raises(TypeError, match="name"):
        provider.forget(7)  # type: ignore[arg-type]
