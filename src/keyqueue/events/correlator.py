"""client-go's event aggregation, I/O-free: what to write for each recorded event, decided on an injectable clock.

Two correlators, one per Event API:

* :class:`EventCorrelator` — core ``v1`` Events, as ``k8s.io/client-go/tools/record`` (``events_cache.go``) does it,
  in its order:

  1. **spam filter**: a token bucket per (source, involved object) — burst 25, refilled at 1 per 300 s; an event
     without a token is dropped (``skip``);
  2. **similar-event aggregation**: events that differ only in their message, from one source about one object
     with one type and reason, are counted per distinct message over a 600 s window (reset when 600 s pass without
     one); from the 10th distinct message on, the event is replaced by one whose message is
     ``"(combined from similar events): " + message``, itself counted as below;
  3. **repeat counting**: an event identical in (source, involved object incl. ``fieldPath``, type, reason,
     message) to one already written becomes a strategic-merge patch of that Event: ``count`` + 1,
     ``lastTimestamp``, ``message`` (client-go keeps no time limit here: the LRU of 4,096 keys is the only limit).

* :class:`SeriesCorrelator` — ``events.k8s.io/v1`` Events, as ``k8s.io/client-go/tools/events`` does it: events
  with the same (action, reason, reportingController, regarding, related) are *isomorphic*.  The first one is
  created; the second turns it into a ``series`` (``count: 2``, ``lastObservedTime``) and is written as a patch;
  later ones only update the cached series.  Every 30 min each open series is written again (refresh), and a
  series not observed for 6 min is written one last time and forgotten (finish); a single event older than 6 min
  is forgotten.

Both take and return Event objects as JSON dicts.  Windows run on the :class:`~keyqueue.clock.Clock` given (a
:class:`~keyqueue.FakeClock` in tests); the timestamps written in the Events are wall-clock times supplied by the
caller (:class:`~keyqueue.events.EventRecorder` stamps each event when it is recorded).  Not thread-safe: one
sender thread owns a correlator.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from keyqueue.clock import Clock

__all__ = [
    "AGGREGATE_MAX_EVENTS",
    "AGGREGATE_WINDOW",
    "COMBINED_PREFIX",
    "FINISH_TIME",
    "LRU_SIZE",
    "REFRESH_TIME",
    "SPAM_BURST",
    "SPAM_QPS",
    "CorrelateResult",
    "EventCorrelator",
    "SeriesCorrelator",
]

#: client-go's ``maxLruCacheEntries``: each cache of a correlator keeps at most this many keys.
LRU_SIZE: Final = 4096
#: ``defaultAggregateMaxEvents``: distinct messages of similar events before they are combined.
AGGREGATE_MAX_EVENTS: Final = 10
#: ``defaultAggregateIntervalInSeconds``: a similar-event group is reset after this long without an event.
AGGREGATE_WINDOW: Final = 600.0
#: ``defaultSpamBurst`` and ``defaultSpamQPS``: per source and object, 25 events at once, then one per 5 min.
SPAM_BURST: Final = 25
SPAM_QPS: Final = 1.0 / 300.0
#: ``EventAggregatorByReasonMessageFunc``'s prefix.
COMBINED_PREFIX: Final = "(combined from similar events): "
#: ``tools/events``: a series not observed for this long is finished; every open series is rewritten this often.
FINISH_TIME: Final = 6 * 60.0
REFRESH_TIME: Final = 30 * 60.0

_K = TypeVar("_K")
_V = TypeVar("_V")


class _LRU(Generic[_K, _V]):
    """groupcache's ``lru.Cache``: a get refreshes a key, an add beyond ``capacity`` evicts the oldest."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[_K, _V] = OrderedDict()

    def get(self, key: _K) -> _V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def add(self, key: _K, value: _V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class _TokenBucket:
    """``flowcontrol.NewTokenBucketPassiveRateLimiter``: ``try_accept`` takes a token if one is there (never goes
    into debt, unlike :class:`keyqueue.ratelimit.BucketRateLimiter`, which reserves one)."""

    __slots__ = ("_burst", "_last_ns", "_qps", "_tokens")

    def __init__(self, qps: float, burst: int, now_ns: int) -> None:
        self._qps, self._burst = qps, float(burst)
        self._tokens = float(burst)
        self._last_ns = now_ns

    def try_accept(self, now_ns: int) -> bool:
        if now_ns > self._last_ns:
            self._tokens = min(self._burst, self._tokens + (now_ns - self._last_ns) / 1e9 * self._qps)
            self._last_ns = now_ns
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(frozen=True, slots=True)
class CorrelateResult:
    """What to do with one core Event: ``skip`` (spam-filtered), else write ``event`` — created if ``patch`` is
    ``None``, else ``patch`` (a strategic-merge patch) applied to the existing Event ``event["metadata"]["name"]``
    (created after all if that Event is gone)."""

    event: dict[str, Any]
    patch: dict[str, Any] | None = None
    skip: bool = False


@dataclass(slots=True)
class _Aggregate:
    messages: set[str]
    last_ns: int


@dataclass(slots=True)
class _Observed:
    count: int
    first_timestamp: str
    name: str
    resource_version: str


def _ref(event: Mapping[str, Any]) -> Mapping[str, Any]:
    ref: Mapping[str, Any] = event.get("involvedObject") or {}
    return ref


def _source(event: Mapping[str, Any]) -> tuple[str, str]:
    source: Mapping[str, Any] = event.get("source") or {}
    return str(source.get("component", "")), str(source.get("host", ""))


def _spam_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    ref = _ref(event)
    return (*_source(event), *(str(ref.get(f, "")) for f in ("kind", "namespace", "name", "uid", "apiVersion")))


def _aggregate_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    return (*_spam_key(event), str(event.get("type", "")), str(event.get("reason", "")),
            str(event.get("reportingComponent", "")), str(event.get("reportingInstance", "")))


def event_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    """client-go's ``getEventKey``: what makes two core Events the same event (their timestamps aside)."""
    ref = _ref(event)
    return (*_source(event), *(str(ref.get(f, "")) for f in ("kind", "namespace", "name", "fieldPath", "uid",
                                                             "apiVersion")),
            str(event.get("type", "")), str(event.get("reason", "")), str(event.get("message", "")))


class EventCorrelator:
    """Filters, aggregates and counts core ``v1`` Events (see the module docstring); the limits are client-go's
    defaults unless given."""

    def __init__(
        self,
        clock: Clock,
        *,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
        max_events: int = AGGREGATE_MAX_EVENTS,
        window: float = AGGREGATE_WINDOW,
        lru_size: int = LRU_SIZE,
    ) -> None:
        if not isinstance(clock, Clock):
            raise TypeError(f"clock must be a keyqueue Clock, got {type(clock).__name__}: {clock!r:.80}")
        for label, value in (("spam_burst", spam_burst), ("max_events", max_events), ("lru_size", lru_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {type(value).__name__}: {value!r}")
        for label, number in (("spam_qps", spam_qps), ("window", window)):
            if not isinstance(number, (int, float)) or isinstance(number, bool) or not number > 0:
                raise ValueError(f"{label} must be a positive number, got {type(number).__name__}: {number!r}")
        self._clock = clock
        self._burst, self._qps = spam_burst, float(spam_qps)
        self._max_events, self._window_ns = max_events, int(window * 1e9)
        self._spam: _LRU[tuple[str, ...], _TokenBucket] = _LRU(lru_size)
        self._aggregates: _LRU[tuple[str, ...], _Aggregate] = _LRU(lru_size)
        self._observed: _LRU[tuple[str, ...], _Observed] = _LRU(lru_size)

    def correlate(self, event: Mapping[str, Any]) -> CorrelateResult:
        """Decide what to write for ``event`` (a core Event as recorded, ``count`` 1).  ``event`` is not changed."""
        now = self._clock.now_ns()
        spam_key = _spam_key(event)
        bucket = self._spam.get(spam_key)
        if bucket is None:
            bucket = _TokenBucket(self._qps, self._burst, now)
        allowed = bucket.try_accept(now)
        self._spam.add(spam_key, bucket)
        if not allowed:
            return CorrelateResult(dict(event), skip=True)
        aggregated, key = self._aggregate(event, now)
        return self._observe(aggregated, key)

    def _aggregate(self, event: Mapping[str, Any], now: int) -> tuple[dict[str, Any], tuple[str, ...]]:
        group = _aggregate_key(event)
        record = self._aggregates.get(group)
        if record is None or now - record.last_ns > self._window_ns:
            record = _Aggregate(set(), now)
        record.messages.add(str(event.get("message", "")))
        record.last_ns = now
        self._aggregates.add(group, record)
        if len(record.messages) < self._max_events:
            return copy.deepcopy(dict(event)), event_key(event)
        record.messages.pop()  # as client-go: the set does not grow beyond the limit
        meta = event.get("metadata") or {}
        ref = _ref(event)
        stamp = str(event.get("lastTimestamp", ""))
        # client-go names it <object>.<now in hex ns>: the name the recorder gave this event (stamped now)
        combined: dict[str, Any] = {
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
            "involvedObject": copy.deepcopy(dict(ref)),
            "reason": event.get("reason", ""),
            "message": COMBINED_PREFIX + str(event.get("message", "")),
            "source": copy.deepcopy(dict(event.get("source") or {})),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": event.get("type", ""),
        }
        return combined, group

    def _observe(self, event: dict[str, Any], key: tuple[str, ...]) -> CorrelateResult:
        last = self._observed.get(key)
        patch = None
        if last is not None and last.count > 0:
            event["metadata"]["name"] = last.name
            if last.resource_version:
                event["metadata"]["resourceVersion"] = last.resource_version
            event["firstTimestamp"] = last.first_timestamp
            event["count"] = last.count + 1
            patch = {"count": event["count"], "lastTimestamp": event.get("lastTimestamp", ""),
                     "message": event.get("message", "")}
        self._observed.add(key, _Observed(int(event.get("count") or 1), str(event.get("firstTimestamp", "")),
                                          event["metadata"]["name"],
                                          str(event["metadata"].get("resourceVersion", ""))))
        return CorrelateResult(event, patch)

    def update_state(self, written: Mapping[str, Any]) -> None:
        """Remember the server's copy of an Event just written (its name, resourceVersion, count, first time),
        under the key :meth:`correlate` used for it (the combined message's key for an aggregate)."""
        meta = written.get("metadata") or {}
        key = event_key(written)
        message = str(written.get("message", ""))
        if message.startswith(COMBINED_PREFIX):
            key = _aggregate_key(written)
        self._observed.add(key, _Observed(int(written.get("count") or 1), str(written.get("firstTimestamp", "")),
                                          str(meta.get("name", "")), str(meta.get("resourceVersion", ""))))


def series_key(event: Mapping[str, Any]) -> str:
    """``tools/events``' ``getKey``: (action, reason, reportingController, regarding, related) of an
    ``events.k8s.io/v1`` Event; equal keys = isomorphic events."""
    return json.dumps([event.get("action", ""), event.get("reason", ""), event.get("reportingController", ""),
                       event.get("regarding") or {}, event.get("related") or {}], sort_keys=True)


@dataclass(slots=True)
class _Cached:
    event: dict[str, Any]
    observed_ns: int  # when it (or its series) was last observed, on the correlator's clock


class SeriesCorrelator:
    """Isomorphic ``events.k8s.io/v1`` Events become a ``series`` (see the module docstring)."""

    def __init__(self, clock: Clock, *, finish_time: float = FINISH_TIME) -> None:
        if not isinstance(clock, Clock):
            raise TypeError(f"clock must be a keyqueue Clock, got {type(clock).__name__}: {clock!r:.80}")
        self._clock = clock
        self._finish_ns = int(finish_time * 1e9)
        self._cache: dict[str, _Cached] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def observe(self, event: Mapping[str, Any], observed_time: str) -> dict[str, Any] | None:
        """``event`` happened (``observed_time``: its MicroTime).  Returns the Event to write — the event itself
        (create) or its isomorphic predecessor with ``series.count`` 2 (write as a patch of the series) — or
        ``None`` when only the cached series count moved (written on refresh or finish)."""
        now = self._clock.now_ns()
        key = series_key(event)
        cached = self._cache.get(key)
        if cached is None:
            self._cache[key] = _Cached(copy.deepcopy(dict(event)), now)
            return copy.deepcopy(dict(event))
        cached.observed_ns = now
        series = cached.event.get("series")
        if series:
            series["count"] += 1
            series["lastObservedTime"] = observed_time
            return None
        cached.event["series"] = {"count": 2, "lastObservedTime": observed_time}
        return copy.deepcopy(cached.event)

    def update_state(self, written: Mapping[str, Any]) -> None:
        """Take the server's name and resourceVersion of a just-written Event into its cached copy."""
        cached = self._cache.get(series_key(written))
        if cached is not None:
            meta = written.get("metadata") or {}
            cached.event["metadata"]["name"] = meta.get("name", cached.event["metadata"].get("name"))
            cached.event["metadata"]["resourceVersion"] = meta.get("resourceVersion", "")

    def open_series(self) -> Iterator[dict[str, Any]]:
        """Copies of the cached Events that are a series (what a refresh rewrites)."""
        for cached in list(self._cache.values()):
            if cached.event.get("series"):
                yield copy.deepcopy(cached.event)

    def finish(self) -> list[dict[str, Any]]:
        """Forget what was last observed more than the finish time ago; returns the series among them, to be
        written one last time."""
        now = self._clock.now_ns()
        done = []
        for key, cached in list(self._cache.items()):
            if now - cached.observed_ns > self._finish_ns:
                del self._cache[key]
                if cached.event.get("series"):
                    done.append(cached.event)
        return done
