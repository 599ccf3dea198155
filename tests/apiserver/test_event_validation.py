"""Event validation beyond metadata, for core ``v1`` (kube's legacy rules) and ``events.k8s.io/v1`` (strict rules
on create, immutability on update), with kube's 422 causes."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer

from .conftest import raw_request


def _new(ns: str, **extra: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/op",
        "reportingInstance": "op-1", "action": "Sync", "reason": "Synced", "type": "Normal", "note": "ok",
        "regarding": {"kind": "ConfigMap", "apiVersion": "v1", "name": "cm", "namespace": ns},
    }
    body.update(extra)
    return {k: v for k, v in body.items() if v is not None}


def _causes(server: TestAPIServer, path: str, body: dict[str, Any], method: str = "POST") -> list[tuple[str, str]]:
    code, status = raw_request(server, path, method, body)
    assert code == 422 and status["reason"] == "Invalid", status
    return [(c["field"], c["message"]) for c in status["details"]["causes"]]


NEW = "/apis/events.k8s.io/v1/namespaces/{ns}/events"
CORE = "/api/v1/namespaces/{ns}/events"


@pytest.mark.parametrize(("extra", "cause"), [
    ({"eventTime": None}, ("eventTime", "Required value")),
    ({"type": "Info"}, ("type", 'Invalid value: "": has invalid value: Info')),
    ({"reason": "R" * 129}, ("reason", 'Invalid value: "": can have at most 128 characters')),
    ({"action": None}, ("action", "Required value")),
    ({"note": "n" * 1025}, ("message", 'Invalid value: "": can have at most 1024 characters')),
    ({"reportingInstance": "i" * 129}, ("reportingInstance", 'Invalid value: "": can have at most 128 characters')),
    ({"reportingController": None}, ("reportingController", "Required value")),
    ({"reportingController": "-op"}, ("reportingController", 'Invalid value: "-op": name part must consist of '
                                      "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                      "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                                      "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")),
    ({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}},
     ("series.count", 'Invalid value: "": should be at least 2')),
    ({"series": {"count": 2}}, ("series.lastObservedTime", "Required value")),
    ({"deprecatedCount": 3}, ("count", 'Invalid value: "": needs to be unset')),
    ({"deprecatedSource": {"component": "x"}}, ("source", 'Invalid value: "": needs to be unset')),
    # with eventTime set, kube checks only that an object without namespace has its events in default/kube-system
    ({"regarding": {"kind": "Namespace", "name": "n"}},
     ("involvedObject.namespace", 'Invalid value: "": does not match event.namespace')),
])
def test_events_k8s_io_create_rules(server: TestAPIServer, ns: str, extra: dict[str, Any],
                                    cause: tuple[str, str]) -> None:
    assert cause in _causes(server, NEW.format(ns=ns), _new(ns, **extra))


def test_core_v1_keeps_the_legacy_rules(server: TestAPIServer, ns: str) -> None:
    legacy = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "l.1"}, "reason": "R", "message": "m",
              "involvedObject": {"kind": "ConfigMap", "name": "cm", "namespace": ns}, "count": 4}
    code, created = raw_request(server, CORE.format(ns=ns), "POST", legacy)  # no type, no eventTime: accepted
    assert code == 201, created
    wrong = {**legacy, "metadata": {"name": "l.2"}, "involvedObject": {"kind": "ConfigMap", "name": "cm",
                                                                      "namespace": "other"}}
    assert _causes(server, CORE.format(ns=ns), wrong) == [
        ("involvedObject.namespace", 'Invalid value: "other": does not match event.namespace')]
    # with eventTime set an Event must say who reported it (the core field name)
    timed = {**legacy, "metadata": {"name": "l.3"}, "eventTime": "2026-01-01T00:00:00.000000Z"}
    assert _causes(server, CORE.format(ns=ns), timed) == [
        ("reportingComponent", "Required value"), ("reportingInstance", "Required value"),
        ("action", "Required value")]
    # a cluster-scoped object's events live in "default"
    code, _ = raw_request(server, CORE.format(ns="default"), "POST", {
        **legacy, "metadata": {"name": "l.4"}, "involvedObject": {"kind": "Namespace", "name": ns}})
    assert code == 201
    raw_request(server, CORE.format(ns="default") + "/l.4", "DELETE")


def test_events_k8s_io_updates_keep_the_description(server: TestAPIServer, ns: str) -> None:
    path = NEW.format(ns=ns)
    code, created = raw_request(server, path, "POST", _new(ns))
    assert code == 201, created
    series = {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}
    code, updated = raw_request(server, path + "/e.1", "PUT", {**created, **series})
    assert code == 200 and updated["series"]["count"] == 2, updated
    assert _causes(server, path + "/e.1", {**updated, "reason": "Other"}, "PUT") == [
        ("reason", 'Invalid value: "Other": field is immutable')]
    assert _causes(server, path + "/e.1", {**updated, "series": {"count": 1, "lastObservedTime":
                                                                  "2026-01-01T00:02:00.000000Z"}}, "PUT") == [
        ("series.count", 'Invalid value: "": should be at least 2')]
