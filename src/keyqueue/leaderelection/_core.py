"""The I/O-free decision core of leader election, shared by the threading and the asyncio elector.

The core never reads a clock and never talks to a server: a shell reads the Lease, hands the result and the time
to :meth:`ElectorCore.plan`, performs the write the core asks for, reports how it went (:meth:`ElectorCore.wrote`,
:meth:`ElectorCore.failed`) and fires the callbacks for the events the core returns. The algorithm is client-go's
``tryAcquireOrRenew``:

* The Lease is read. If its record (holder, duration, acquire/renew times, transitions) differs from the record
  last observed, it is remembered together with the **local** time of the attempt. Other hosts' timestamps are
  never compared with the local clock.
* If another identity holds it and its record was observed less than ``leaseDurationSeconds`` ago (local clock),
  this round gives up. Otherwise (absent, released, expired, or held by this identity) the core asks for a write:
  a create for an absent Lease, else an **update carrying the resourceVersion it read**, so a concurrent writer
  makes it fail with 409 Conflict instead of producing two leaders.
* The record written keeps ``acquireTime`` and ``leaseTransitions`` when this identity already held the Lease,
  else sets ``acquireTime`` to now and adds one transition; ``renewTime`` is always now.
* Leadership is valid until ``renew_deadline`` after the **start** of the last successful attempt (before its
  read). Because ``renew_deadline < lease_duration`` and other replicas only see that write after it started, the
  leader stops (``stopped`` event) before any other replica can consider the Lease expired.
* Release writes ``holderIdentity=""`` and ``leaseDurationSeconds=1`` (client-go's release), so a standby
  acquires at its next attempt.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "API_VERSION",
    "JITTER",
    "ElectionConfig",
    "ElectorCore",
    "LeaseRecord",
    "Write",
    "format_micro_time",
]

API_VERSION: Final = "coordination.k8s.io/v1"
#: Attempts while not leading wait ``retry_period * (1 - JITTER * u)``, ``u`` uniform in [0, 1): standbys do not
#: retry in lockstep, and a released Lease is still noticed within ``retry_period``.
JITTER: Final = 0.2
_NS: Final = 1_000_000_000


def format_micro_time(seconds: float) -> str:
    """RFC 3339 in UTC with microseconds, as ``metav1.MicroTime`` is written (``2026-01-02T03:04:05.123456Z``)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _positive_seconds(arg: str, value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{arg} must be a number of seconds, got {type(value).__name__}: {value!r:.80}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{arg} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _non_empty(arg: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, got {type(value).__name__}: {value!r:.80}")
    if not value:
        raise ValueError(f"{arg} must not be empty")
    return value


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """A checked elector configuration. Use :meth:`check`; the constructor does not validate."""

    name: str
    namespace: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    release_on_cancel: bool

    @classmethod
    def check(
        cls,
        *,
        name: object,
        namespace: object,
        identity: object,
        lease_duration: object,
        renew_deadline: object,
        retry_period: object,
        release_on_cancel: object,
    ) -> ElectionConfig:
        """Validate the arguments of an elector.

        Raises ``TypeError`` for a non-str name/namespace/identity or a non-number duration, and ``ValueError``
        naming the argument for an empty name/namespace/identity, a duration that is not a finite number > 0, or
        durations that violate ``lease_duration > renew_deadline > retry_period`` (without that order a leader
        could still act after another replica has taken the Lease).
        """
        ld = _positive_seconds("lease_duration", lease_duration)
        rd = _positive_seconds("renew_deadline", renew_deadline)
        rp = _positive_seconds("retry_period", retry_period)
        if not ld > rd:
            raise ValueError(f"lease_duration ({ld!r}) must be greater than renew_deadline ({rd!r})")
        if not rd > rp:
            raise ValueError(f"renew_deadline ({rd!r}) must be greater than retry_period ({rp!r})")
        return cls(
            name=_non_empty("name", name),
            namespace=_non_empty("namespace", namespace),
            identity=_non_empty("identity", identity),
            lease_duration=ld,
            renew_deadline=rd,
            retry_period=rp,
            release_on_cancel=bool(release_on_cancel),
        )

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` as written: whole seconds, rounded **up** so that other replicas never
        wait less than ``lease_duration``."""
        return math.ceil(self.lease_duration)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader election fields of a Lease's ``spec`` (times as the MicroTime strings stored)."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        spec["leaseTransitions"] = self.lease_transitions
        return spec


@dataclass(frozen=True, slots=True)
class Write:
    """A write the core asks for: ``create`` (POST) or an update (PUT) of ``body``, whose
    ``metadata.resourceVersion`` is the one read (the precondition)."""

    create: bool
    body: dict[str, Any]
    record: LeaseRecord


# Events a shell turns into callbacks, in order.
STARTED: Final = "started"
STOPPED: Final = "stopped"
NEW_LEADER: Final = "new_leader"
Event = tuple[str, str]  # (kind, identity for NEW_LEADER else "")


class ElectorCore:
    """The state of one elector. Not thread-safe: a shell calls it from one thread (or one task) at a time.

    Times are integer nanoseconds of the shell's monotonic clock (``now_ns``); ``wall`` is the wall-clock time in
    seconds written into ``acquireTime``/``renewTime``.
    """

    def __init__(self, config: ElectionConfig) -> None:
        self.config = config
        self.leading = False
        self.observed: LeaseRecord | None = None
        self.observed_ns = 0
        self.renewed_ns = 0  # start of the last successful attempt (only meaningful while leading)
        self._lease: dict[str, Any] | None = None  # the last Lease object read or written
        self._reported = ""  # the holder last reported through NEW_LEADER

    # -- queries --------------------------------------------------------------------------------------------------

    @property
    def deadline_ns(self) -> int:
        """When the current leadership ends unless renewed (meaningful while :attr:`leading`)."""
        return self.renewed_ns + round(self.config.renew_deadline * _NS)

    def is_leader(self, now_ns: int) -> bool:
        """True while leading and ``now_ns`` is before :attr:`deadline_ns`."""
        return self.leading and now_ns < self.deadline_ns

    def leader(self) -> str:
        """The holder in the last observed record ('' if none or released)."""
        return self.observed.holder_identity if self.observed is not None else ""

    def wait_seconds(self, now_ns: int, u: float) -> float:
        """How long to wait before the next attempt: ``retry_period`` while leading (never past the deadline),
        else the jittered ``retry_period * (1 - JITTER * u)`` for ``u`` in [0, 1)."""
        rp = self.config.retry_period
        if self.leading:
            return max(0.0, min(rp, (self.deadline_ns - now_ns) / _NS))
        return rp * (1.0 - JITTER * u)

    def request_timeout(self, now_ns: int) -> float:
        """A timeout for the requests of one attempt: while leading, the time left before the deadline (at least
        10 ms), so a hung request cannot hold a leader past it; else ``renew_deadline``."""
        if self.leading:
            return max(0.01, (self.deadline_ns - now_ns) / _NS)
        return self.config.renew_deadline

    # -- one attempt ----------------------------------------------------------------------------------------------

    def plan(self, lease: Mapping[str, Any] | None, started_ns: int, wall: float) -> tuple[Write | None, list[Event]]:
        """Decide what to write after reading ``lease`` (``None``: 404, absent) in an attempt that started at
        ``started_ns``. Returns the write (``None``: the Lease is validly held by another; give up this round) and
        the events to fire (a new leader observed)."""
        cfg = self.config
        now = format_micro_time(wall)
        events: list[Event] = []
        if lease is None:
            record = LeaseRecord(cfg.identity, cfg.lease_duration_seconds, now, now, 0)
            body = {"apiVersion": API_VERSION, "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace}, "spec": record.to_spec()}
            return Write(True, body, record), events
        old = LeaseRecord.from_lease(lease)
        self._lease = copy.deepcopy(dict(lease))
        if old != self.observed:
            self.observed = old
            self.observed_ns = started_ns
            events.extend(self._report())
        held_by_other = old.holder_identity and old.holder_identity != cfg.identity
        if held_by_other and started_ns < self.observed_ns + old.lease_duration_seconds * _NS:
            return None, events
        if old.holder_identity == cfg.identity:
            record = LeaseRecord(cfg.identity, cfg.lease_duration_seconds, old.acquire_time, now,
                                 old.lease_transitions)
        else:
            record = LeaseRecord(cfg.identity, cfg.lease_duration_seconds, now, now, old.lease_transitions + 1)
        return Write(False, self._body(record), record), events

    def wrote(self, written: Mapping[str, Any], started_ns: int) -> list[Event]:
        """The write of an attempt that started at ``started_ns`` succeeded; ``written`` is the server's answer.
        Returns ``[STARTED]`` (plus a new leader) if this begins a term, else ``[]``."""
        self._lease = copy.deepcopy(dict(written))
        self.observed = LeaseRecord.from_lease(written)
        self.observed_ns = started_ns
        self.renewed_ns = started_ns
        events = self._report()
        if not self.leading:
            self.leading = True
            events.append((STARTED, ""))
        return events

    def failed(self, now_ns: int) -> list[Event]:
        """An attempt gave up, was refused (409) or failed (server unreachable, 5xx). Returns ``[STOPPED]`` if the
        leader's deadline has passed (it steps down), else ``[]``."""
        return self.check_deadline(now_ns)

    def check_deadline(self, now_ns: int) -> list[Event]:
        """Step down if leading and ``now_ns`` is at or past the deadline: returns ``[STOPPED]``, else ``[]``."""
        if self.leading and now_ns >= self.deadline_ns:
            self.leading = False
            return [(STOPPED, "")]
        return []

    def step_down(self) -> list[Event]:
        """Stop leading now (the elector is stopping): ``[STOPPED]`` if it was leading, else ``[]``."""
        if self.leading:
            self.leading = False
            return [(STOPPED, "")]
        return []

    def release_write(self, wall: float) -> Write | None:
        """The update that releases the Lease (``holderIdentity=""``, ``leaseDurationSeconds=1``), with the
        resourceVersion last read or written, or ``None`` if this identity does not hold it as far as it knows."""
        if self._lease is None or self.observed is None or self.observed.holder_identity != self.config.identity:
            return None
        now = format_micro_time(wall)
        record = LeaseRecord("", 1, now, now, self.observed.lease_transitions)
        return Write(False, self._body(record), record)

    def released(self, written: Mapping[str, Any], now_ns: int) -> None:
        """The release write succeeded."""
        self._lease = copy.deepcopy(dict(written))
        self.observed = LeaseRecord.from_lease(written)
        self.observed_ns = now_ns
        self.leading = False

    # -- helpers --------------------------------------------------------------------------------------------------

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        assert self._lease is not None
        body = copy.deepcopy(self._lease)
        body["apiVersion"], body["kind"] = API_VERSION, "Lease"
        body["spec"] = record.to_spec()
        return body

    def _report(self) -> list[Event]:
        holder = self.leader()
        if holder and holder != self._reported:
            self._reported = holder
            return [(NEW_LEADER, holder)]
        return []
