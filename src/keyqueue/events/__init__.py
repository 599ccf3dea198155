"""Kubernetes Events for controllers: client-go's ``EventRecorder`` with its aggregation of repeated events.

* :class:`EventBroadcaster` — one sender thread writing Events through the official ``kubernetes`` client (needs
  ``pip install 'keyqueue[apiserver]'``, which brings it); :meth:`EventBroadcaster.recorder_for` is
  controller-runtime's ``GetEventRecorderFor``.
* :class:`EventRecorder` — ``event(obj, type, reason, message)`` / ``eventf``: non-blocking, bounded buffer.
* :mod:`keyqueue.events.correlator` — the I/O-free aggregation (core ``count``, ``events.k8s.io`` ``series``).
"""

from .correlator import CorrelateResult, EventCorrelator, SeriesCorrelator
from .recorder import EVENT_TYPES, MAX_QUEUED_EVENTS, EventBroadcaster, EventRecorder, object_reference

__all__ = [
    "EVENT_TYPES",
    "MAX_QUEUED_EVENTS",
    "CorrelateResult",
    "EventBroadcaster",
    "EventCorrelator",
    "EventRecorder",
    "SeriesCorrelator",
    "object_reference",
]
