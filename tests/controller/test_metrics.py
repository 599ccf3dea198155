"""Controller metrics under controller-runtime's names, read back through prometheus_client."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from keyqueue import Controller, FakeClock, PriorityQueue, ReconcileError, Result, TerminalError
from keyqueue.controller import RECONCILE_TIME_BUCKETS


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_outcomes_are_counted() -> None:
    reg = CollectorRegistry()
    actions = {"ok": None, "ra": Result(requeue_after=1), "err": ReconcileError("x"), "bug": KeyError("y"),
               "term": TerminalError("z")}

    def reconcile(key: str) -> Result | None:
        a = actions[key]
        if isinstance(a, Exception):
            raise a
        return a

    q: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    c = Controller(reconcile, q, name="ctl", registry=reg)
    for key in actions:
        q.add(key)
    while len(q):
        c.process_next(timeout=0)
    ctl = {"controller": "ctl"}
    assert value(reg, "controller_runtime_reconcile_total", result="success", **ctl) == 1
    assert value(reg, "controller_runtime_reconcile_total", result="requeue_after", **ctl) == 1
    assert value(reg, "controller_runtime_reconcile_total", result="error", **ctl) == 3
    assert value(reg, "controller_runtime_reconcile_total", result="requeue", **ctl) == 0
    assert value(reg, "controller_runtime_reconcile_errors_total", **ctl) == 3
    assert value(reg, "controller_runtime_terminal_reconcile_errors_total", **ctl) == 1
    assert value(reg, "controller_runtime_reconcile_panics_total", **ctl) == 1  # only the KeyError
    assert value(reg, "controller_runtime_reconcile_time_seconds_count", **ctl) == 5
    assert value(reg, "controller_runtime_reconcile_time_seconds_bucket", le="+Inf", **ctl) == 5


def test_exposition_names_types_buckets_and_no_created() -> None:
    reg = CollectorRegistry()
    c: Controller[str] = Controller(lambda key: None, name="ctl", workers=3, registry=reg)
    c.start()
    try:
        text = generate_latest(reg).decode()
    finally:
        assert c.stop(timeout=5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {name: f.type for name, f in families.items()} == {
        "controller_runtime_reconcile": "counter",
        "controller_runtime_reconcile_errors": "counter",
        "controller_runtime_terminal_reconcile_errors": "counter",
        "controller_runtime_reconcile_panics": "counter",
        "controller_runtime_reconcile_time_seconds": "histogram",
        "controller_runtime_active_workers": "gauge",
        "controller_runtime_max_concurrent_reconciles": "gauge",
    }
    assert "_created" not in text
    # initialised at start: every series exists with 0
    results = {s.labels["result"]: s.value for s in families["controller_runtime_reconcile"].samples}
    assert results == {"error": 0, "requeue_after": 0, "requeue": 0, "success": 0}
    assert value(reg, "controller_runtime_max_concurrent_reconciles", controller="ctl") == 3
    les = [s.labels["le"] for s in families["controller_runtime_reconcile_time_seconds"].samples
           if s.name.endswith("_bucket")]
    assert [float(le) for le in les[:-1]] == list(RECONCILE_TIME_BUCKETS)
    assert les[0] == "0.005" and "1" in les and "60" in les and les[-1] == "+Inf"


def test_active_workers_gauge() -> None:
    reg = CollectorRegistry()
    inside = threading.Event()
    release = threading.Event()

    def reconcile(key: str) -> None:
        inside.set()
        assert release.wait(5)

    c = Controller(reconcile, name="ctl", workers=2, registry=reg)
    with c:
        c.queue.add("a")
        assert inside.wait(5)
        assert value(reg, "controller_runtime_active_workers", controller="ctl") == 1
        release.set()
    assert value(reg, "controller_runtime_active_workers", controller="ctl") == 0


def test_no_registry_records_nothing() -> None:
    c: Controller[str] = Controller(lambda key: None)
    assert c.metrics is None


def test_two_controllers_share_a_registry() -> None:
    reg = CollectorRegistry()
    a: Controller[str] = Controller(lambda key: None, name="a", registry=reg)
    b: Controller[str] = Controller(lambda key: None, name="b", registry=reg)
    for c in (a, b):
        c.queue.add("k")
        c.process_next(timeout=0)
    assert value(reg, "controller_runtime_reconcile_total", controller="a", result="success") == 1
    assert value(reg, "controller_runtime_reconcile_total", controller="b", result="success") == 1


@pytest.mark.parametrize("seconds", [0.0, 0.005, 0.0051, 59.0, 61.0])
def test_histogram_bucketing(seconds: float) -> None:
    from keyqueue.controller import ControllerMetrics

    m = ControllerMetrics("x")
    m.reconciled("success", seconds, False, False, False)
    v = m.read()
    expected = [1 if seconds <= b else 0 for b in RECONCILE_TIME_BUCKETS]
    assert v["time_buckets"] == expected
    assert v["time_count"] == 1
