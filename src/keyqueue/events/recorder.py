"""Recording Kubernetes Events from a controller: client-go's ``EventBroadcaster`` and ``EventRecorder``.

``EventRecorder.event(obj, type, reason, message)`` never blocks and never does I/O: it stamps the event, puts it
in the broadcaster's bounded buffer (1,000 events, client-go's ``maxQueuedEvents``) and returns; when the buffer
is full the event is dropped and counted (:attr:`EventBroadcaster.dropped`), as client-go's broadcaster drops
events when its channel is full.  One sender thread per broadcaster takes the events in order, runs them through
the correlator of its API (:mod:`keyqueue.events.correlator`: client-go's spam filter, similar-event aggregation
and repeat counting for core ``v1``; isomorphic series for ``events.k8s.io/v1``) and writes them through the
official ``kubernetes`` client: a create, or a patch of the Event it repeats.

Failures, as client-go's ``recordToSink``: an error answer from the server (an ``ApiException`` with a status:
invalid, forbidden, a 5xx too, as client-go treats every ``StatusError``) is logged and not retried
(:attr:`EventBroadcaster.failed`); a patch of an Event that is gone (404) becomes a create; an unreachable server
is retried up to 12 tries, ``retry_interval`` (10 s) apart on the broadcaster's clock, then the event is given up
(counted in ``failed``).

Shutdown: :meth:`EventBroadcaster.close` stops accepting events (later ones are dropped and counted), lets the
sender write every event buffered before it, then (``events.k8s.io/v1``) writes each open series' latest count
once, all within ``timeout``; what is still buffered at the deadline is dropped and counted in ``dropped``, and an
event waiting for a retry is given up.  :meth:`EventBroadcaster.flush` waits until everything recorded before it
has been written (or given up), for tests.

controller-runtime's ``mgr.GetEventRecorderFor(name)`` is :meth:`EventBroadcaster.recorder_for`: one broadcaster
(one sender thread, one correlator) per process, one recorder per controller, named after it.  ``event`` may be
called from any thread and from coroutines (it does not block), so the threaded and the asyncio
:class:`~keyqueue.Controller` use it the same way.
"""

from __future__ import annotations

import collections
import copy
import json
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from keyqueue.clock import Clock, RealClock

from .correlator import FINISH_TIME, REFRESH_TIME, EventCorrelator, SeriesCorrelator

__all__ = ["EVENT_TYPES", "MAX_QUEUED_EVENTS", "EventBroadcaster", "EventRecorder", "object_reference"]

log = logging.getLogger("keyqueue.events")

#: The event types Kubernetes accepts (``corev1.EventTypeNormal``, ``EventTypeWarning``).
EVENT_TYPES: Final = ("Normal", "Warning")
#: client-go's ``maxQueuedEvents``: the broadcaster's buffer.
MAX_QUEUED_EVENTS: Final = 1000
#: client-go's ``maxTriesPerEvent`` and ``defaultSleepDuration``.
MAX_TRIES: Final = 12
RETRY_INTERVAL: Final = 10.0
_REF_FIELDS: Final = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
EventAPI = Literal["v1", "events.k8s.io/v1"]


def _get(obj: Any, *names: str) -> Any:
    """A field of a dict or of an official-client model (snake_case attribute)."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def object_reference(obj: Any, field_path: str = "") -> dict[str, str]:
    """An ``ObjectReference`` (kind, namespace, name, uid, apiVersion, resourceVersion, fieldPath) to ``obj``: a
    JSON dict as the informer hands out, an official-client model (``V1ConfigMap``, ...) as ``read_*`` returns it,
    or a reference dict.  Raises ``ValueError`` naming the field when ``kind``, ``apiVersion`` or ``name`` is
    missing (list items of the official client have no kind: take the object from the informer or a ``read_*``
    call, or pass a reference) and ``TypeError`` for an object that is neither a mapping nor a model."""
    if obj is None or isinstance(obj, (str, bytes, int, float)):
        raise TypeError(f"obj must be a Kubernetes object (dict or client model), got {type(obj).__name__}: "
                        f"{obj!r:.80}")
    meta = _get(obj, "metadata")
    src = meta if meta is not None else obj  # a reference has its name at the top
    ref = {
        "kind": _get(obj, "kind"),
        "namespace": _get(src, "namespace"),
        "name": _get(src, "name"),
        "uid": _get(src, "uid"),
        "apiVersion": _get(obj, "apiVersion", "api_version"),
        "resourceVersion": _get(src, "resourceVersion", "resource_version"),
        "fieldPath": field_path or _get(obj, "fieldPath", "field_path"),
    }
    for required in ("kind", "apiVersion", "name"):
        if not ref[required] or not isinstance(ref[required], str):
            raise ValueError(f"obj has no {required} (got {ref[required]!r}); an Event needs kind, apiVersion and "
                             f"name of the object it is about")
    return {k: str(ref[k]) for k in _REF_FIELDS if ref[k]}


def _time(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(ts_ns: int) -> str:
    seconds, ns = divmod(ts_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ns // 1000:06d}Z"


@dataclass(frozen=True, slots=True)
class _Recorded:
    event: dict[str, Any]
    observed: str  # MicroTime of the occurrence (series)


class _Rejected(Exception):
    """The server answered with an error status (not retried)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status


class _Unreachable(Exception):
    """The request did not get an answer (retried)."""


class EventBroadcaster:
    """The sender of the Events its recorders record (see the module docstring).

    ``api_client``: a ``kubernetes.client.ApiClient`` (its configuration is used; the broadcaster makes its own
    client, closed by :meth:`close`).  ``api``: ``"v1"`` (core Events with ``count``, what ``kubectl describe``
    shows; client-go's ``tools/record``, controller-runtime's default) or ``"events.k8s.io/v1"`` (``series``;
    client-go's ``tools/events``).  ``clock``: where the correlator's windows, the series timers and the retry
    interval run (a :class:`~keyqueue.FakeClock` in tests; timestamps in the Events are wall-clock times).
    ``max_queued``, ``max_tries``, ``retry_interval``: client-go's 1,000, 12 and 10 s by default.
    ``correlator``: a configured :class:`~keyqueue.events.correlator.EventCorrelator` (core ``v1`` only).

    Counters (read any time): :attr:`recorded` (accepted into the buffer), :attr:`dropped` (buffer full or closed),
    :attr:`filtered` (spam filter), :attr:`written` (creates and patches that succeeded), :attr:`failed`.
    Usable as a context manager (``close()`` at exit).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        api: EventAPI = "v1",
        clock: Clock | None = None,
        max_queued: int = MAX_QUEUED_EVENTS,
        max_tries: int = MAX_TRIES,
        retry_interval: float = RETRY_INTERVAL,
        correlator: EventCorrelator | None = None,
    ) -> None:
        if api not in ("v1", "events.k8s.io/v1"):
            raise ValueError(f'api must be "v1" or "events.k8s.io/v1", got {api!r}')
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must be a keyqueue Clock, got {type(clock).__name__}: {clock!r:.80}")
        for label, value in (("max_queued", max_queued), ("max_tries", max_tries)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {type(value).__name__}: {value!r}")
        if (not isinstance(retry_interval, (int, float)) or isinstance(retry_interval, bool)
                or not 0 <= retry_interval < float("inf")):
            raise ValueError(f"retry_interval must be a finite number >= 0, got {retry_interval!r}")
        if correlator is not None and api != "v1":
            raise ValueError("a correlator applies to core v1 Events only (api='v1')")
        from kubernetes import client

        self.api: EventAPI = api
        self._clock: Clock = clock if clock is not None else RealClock()
        self._max_queued, self._max_tries, self._retry_ns = max_queued, max_tries, int(retry_interval * 1e9)
        conf = copy.deepcopy(api_client.configuration)
        conf.retries = False  # retries are ours (client-go's), not urllib3's
        self._client: Any = client.ApiClient(conf)
        self._client.default_headers.update(getattr(api_client, "default_headers", {}) or {})
        self._client.user_agent = "keyqueue-events"
        self._core = client.CoreV1Api(self._client)
        self._events = client.EventsV1Api(self._client)
        self._api_exception: type[Exception] = client.ApiException
        self._correlator = correlator if correlator is not None else EventCorrelator(self._clock)
        self._series = SeriesCorrelator(self._clock)
        self._cond = threading.Condition()
        self._buffer: collections.deque[_Recorded] = collections.deque()
        self._closing = False
        self._abandon = False
        self._accepted = 0  # events taken into the buffer, ever
        self._settled = 0  # events taken out and fully handled
        self.recorded = self.dropped = self.filtered = self.written = self.failed = 0
        self._clock.subscribe(self._wake)
        self._thread = threading.Thread(target=self._run, name="keyqueue-events", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public
    def recorder_for(self, component: str, host: str = "") -> EventRecorder:
        """A recorder whose Events come from ``component`` (controller-runtime's ``GetEventRecorderFor(name)``;
        core Events: ``source.component`` and ``reportingComponent``; ``events.k8s.io``:
        ``reportingController``, with ``reportingInstance`` ``<component>-<host>``, ``host`` defaulting to this
        machine's hostname there, and omitted from core Events unless given)."""
        if not isinstance(component, str) or not component:
            raise ValueError(f"component must be a non-empty str, got {type(component).__name__}: {component!r}")
        if not isinstance(host, str):
            raise TypeError(f"host must be a str, got {type(host).__name__}: {host!r}")
        return EventRecorder(self, component, host)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every event recorded before this call has been written or given up; ``False`` if
        ``timeout`` (real seconds) passed first.  Series counts that client-go writes only on refresh/finish are
        not forced out (they are by :meth:`close`)."""
        with self._cond:
            target = self._accepted
            return self._cond.wait_for(lambda: self._settled >= target or not self._thread.is_alive(), timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Stop accepting events, write what is buffered (and, for ``events.k8s.io/v1``, each open series' latest
        count), then stop the sender and close the client; at most ``timeout`` seconds.  Returns ``True`` if all
        of it was written in time; otherwise the rest is dropped (counted in :attr:`dropped`).  Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._cond:
                self._abandon = True
                self._cond.notify_all()
            self._thread.join(5.0)
        with self._cond:
            clean = not self._buffer and not self._abandon
            self.dropped += len(self._buffer)
            self._buffer.clear()
        self._client.close()
        return clean

    def __enter__(self) -> EventBroadcaster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ recording (any thread)
    def _submit(self, event: dict[str, Any], observed: str) -> bool:
        with self._cond:
            if self._closing or len(self._buffer) >= self._max_queued:
                self.dropped += 1
                return False
            self._buffer.append(_Recorded(event, observed))
            self._accepted += 1
            self.recorded += 1
            self._cond.notify_all()
            return True

    def _wake(self) -> None:  # the clock jumped (FakeClock.step): timers and retries re-check
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------ the sender thread
    def _run(self) -> None:
        now = self._clock.now_ns()
        next_finish = now + int(FINISH_TIME * 1e9)
        next_refresh = now + int(REFRESH_TIME * 1e9)
        series = self.api != "v1"
        while True:
            with self._cond:
                while not self._buffer and not self._closing:
                    now = self._clock.now_ns()
                    if series and now >= min(next_finish, next_refresh):
                        break
                    self._cond.wait(self._clock.real_wait(min(next_finish, next_refresh)) if series else None)
                if self._abandon or (self._closing and not self._buffer):
                    break
                item = self._buffer.popleft() if self._buffer else None
            if item is not None:
                try:
                    self._handle(item)
                except Exception:  # never let the sender die: log and go on
                    log.exception("events: recording %s failed", item.event.get("metadata", {}).get("name"))
                    self.failed += 1
                with self._cond:
                    self._settled += 1
                    self._cond.notify_all()
                continue
            now = self._clock.now_ns()
            if now >= next_refresh:
                for event in self._series.open_series():
                    self._write_series(event)
                next_refresh = now + int(REFRESH_TIME * 1e9)
            if now >= next_finish:
                for event in self._series.finish():
                    self._write_series(event)
                next_finish = now + int(FINISH_TIME * 1e9)
        if series and not self._abandon:
            for event in self._series.open_series():
                self._write_series(event)
        with self._cond:
            self._cond.notify_all()

    def _handle(self, item: _Recorded) -> None:
        if self.api == "v1":
            result = self._correlator.correlate(item.event)
            if result.skip:
                self.filtered += 1
                return
            written = self._write(result.event, result.patch, self._core)
            if written is not None:
                self._correlator.update_state(written)
            return
        event = self._series.observe(item.event, item.observed)
        if event is not None:
            self._write_series(event)

    def _write_series(self, event: dict[str, Any]) -> None:
        patch = {"series": event["series"]} if event.get("series") else None
        written = self._write(event, patch, self._events)
        if written is not None:
            self._series.update_state(written)

    def _write(self, event: dict[str, Any], patch: dict[str, Any] | None, api: Any) -> dict[str, Any] | None:
        """Create ``event`` or apply ``patch`` to it, retrying an unreachable server; the server's copy, or
        ``None`` if given up."""
        meta = event["metadata"]
        for attempt in range(1, self._max_tries + 1):
            try:
                if patch is not None:
                    try:
                        written = self._call(api.patch_namespaced_event, meta["name"], meta["namespace"], patch)
                    except _Rejected as exc:
                        if exc.status != 404:
                            raise
                        patch = None  # the Event is gone: create it again (client-go does the same)
                if patch is None:
                    body = copy.deepcopy(event)
                    body["metadata"].pop("resourceVersion", None)
                    written = self._call(api.create_namespaced_event, meta["namespace"], body)
                self.written += 1
                return written
            except _Rejected as exc:
                log.error("events: server rejected event %s/%s (will not retry): %s", meta.get("namespace"),
                          meta.get("name"), exc)
                self.failed += 1
                return None
            except _Unreachable as exc:
                if attempt == self._max_tries or not self._retry_wait():
                    log.error("events: unable to write event %s/%s (tried %d times, giving up): %s",
                              meta.get("namespace"), meta.get("name"), attempt, exc)
                    self.failed += 1
                    return None
                log.warning("events: unable to write event %s/%s (will retry): %s", meta.get("namespace"),
                            meta.get("name"), exc)
        return None  # pragma: no cover (the loop returns)

    def _retry_wait(self) -> bool:
        """Wait ``retry_interval`` on the clock; ``False`` if closing interrupts it."""
        deadline = self._clock.now_ns() + self._retry_ns
        with self._cond:
            while self._clock.now_ns() < deadline:
                if self._closing:
                    return False
                self._cond.wait(self._clock.real_wait(deadline))
            return not self._closing

    def _call(self, fn: Any, *args: Any) -> dict[str, Any]:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=(5.0, 30.0))
            data: dict[str, Any] = json.loads(resp.data)
            return data
        except self._api_exception as exc:
            status = int(getattr(exc, "status", 0) or 0)
            if status == 0:  # no answer (the client raises ApiException(status=0) for some transport errors)
                raise _Unreachable(f"{getattr(exc, 'reason', '')}") from None
            body = getattr(exc, "body", "") or ""
            try:
                reason = json.loads(body).get("message", body)
            except (ValueError, AttributeError):
                reason = str(body)[:200]
            raise _Rejected(status, str(reason)) from None
        except (_Rejected, _Unreachable):
            raise
        except Exception as exc:  # urllib3 connection errors, timeouts
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from None


class EventRecorder:
    """Records Events from one component (see the module docstring); made by :meth:`EventBroadcaster.recorder_for`.

    Thread-safe and non-blocking: safe from worker threads, the asyncio loop and signal-free callbacks alike.
    """

    def __init__(self, broadcaster: EventBroadcaster, component: str, host: str = "") -> None:
        self.broadcaster = broadcaster
        self.component = component
        self.host = host

    def event(
        self,
        obj: Any,
        type: str,
        reason: str,
        message: str,
        *,
        action: str | None = None,
        related: Any = None,
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        """Record an Event about ``obj`` (see :func:`object_reference`): ``type`` ``"Normal"`` or ``"Warning"``,
        a CamelCase ``reason`` and a human ``message``.  ``action`` (``events.k8s.io/v1``: what was done; default:
        ``reason``), ``related`` (a second object, ``events.k8s.io/v1``) and ``annotations`` (core: the Event's own
        annotations, as client-go's ``AnnotatedEventf``) are optional.

        Returns ``True`` once buffered, ``False`` if dropped (buffer full, broadcaster closed); never blocks and
        never raises for a server problem.  Raises ``ValueError``/``TypeError`` for a bad type, reason, message
        or object (nothing is recorded then).
        """
        if type not in EVENT_TYPES:
            raise ValueError(f'type must be "Normal" or "Warning", got {type!r}')
        for label, value in (("reason", reason), ("message", message)):
            if not isinstance(value, str):
                raise TypeError(f"{label} must be a str, got {value.__class__.__name__}: {value!r:.80}")
        if not reason:
            raise ValueError("reason must be a non-empty str")
        ref = object_reference(obj)
        now_ns = time.time_ns()
        namespace = ref.get("namespace") or "default"
        meta: dict[str, Any] = {"name": f"{ref['name']}.{now_ns:x}", "namespace": namespace}
        if annotations:
            meta["annotations"] = {str(k): str(v) for k, v in annotations.items()}
        observed = _micro_time(now_ns)
        if self.broadcaster.api == "v1":
            stamp = _time(now_ns / 1e9)
            source = {"component": self.component, **({"host": self.host} if self.host else {})}
            event: dict[str, Any] = {
                "metadata": meta, "involvedObject": ref, "reason": reason, "message": message,
                "source": source, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "type": type,
                "reportingComponent": self.component, "reportingInstance": self.host,
            }
            if not self.host:
                del event["reportingInstance"]
        else:
            event = {
                "metadata": meta, "eventTime": observed, "reportingController": self.component,
                "reportingInstance": f"{self.component}-{self.host or socket.gethostname()}",
                "action": action if action is not None else reason, "reason": reason, "regarding": ref,
                "note": message, "type": type,
            }
            if related is not None:
                event["related"] = object_reference(related)
        return self.broadcaster._submit(event, observed)

    def eventf(self, obj: Any, type: str, reason: str, fmt: str, *args: Any, **kwargs: Any) -> bool:
        """:meth:`event` with ``message = fmt % args`` (client-go's ``Eventf``); keyword arguments go to
        :meth:`event`."""
        return self.event(obj, type, reason, fmt % args if args else fmt, **kwargs)
