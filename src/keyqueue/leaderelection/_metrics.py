"""``leader_election_master_status{name}`` (client-go's gauge: 1 while leading, else 0) for prometheus_client."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["export_metrics"]


class _Elector(Protocol):
    name: str

    def is_leader(self) -> bool: ...


class _Collector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._electors: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, elector: _Elector) -> None:
        with self._lock:
            self._electors.add(elector)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            electors = list(self._electors)
        gauge = GaugeMetricFamily(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
            "master. 'name' is the string used to identify the lease.",
            labels=["name"],
        )
        status: dict[str, int] = {}
        for e in electors:  # several electors of one name in one process: 1 if any leads
            status[e.name] = max(status.get(e.name, 0), int(e.is_leader()))
        for name, value in sorted(status.items()):
            gauge.add_metric([name], value)
        yield gauge


_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[Any, _Collector] = weakref.WeakKeyDictionary()


def export_metrics(elector: _Elector, registry: Any) -> None:
    """Export ``leader_election_master_status{name=<lease name>}`` of ``elector`` (threads or asyncio) in
    ``registry`` (a ``prometheus_client.CollectorRegistry``); the value is read at scrape time from
    ``is_leader()``. The elector is held weakly. Needs ``prometheus_client`` (the ``metrics`` extra)."""
    with _lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = _Collector()
            registry.register(collector)
    collector.add(elector)
