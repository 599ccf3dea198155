"""Controllers: a reconcile function plus a queue becomes a correct worker pool (controller-runtime's loop).

:class:`Controller` runs worker threads (:mod:`keyqueue.controller.threaded`, which documents the outcome table,
stopping, leader election and metrics); :class:`keyqueue.aio.Controller` runs asyncio tasks
(:mod:`keyqueue.controller.aio`). Both share :mod:`keyqueue.controller.outcomes` (what a reconcile returns or
raises) and :mod:`keyqueue.controller.metrics` (controller-runtime's metrics).
"""

from keyqueue.controller.metrics import RECONCILE_TIME_BUCKETS, ControllerMetrics
from keyqueue.controller.outcomes import ReconcileError, Result, TerminalError, is_terminal
from keyqueue.controller.threaded import Controller

__all__ = [
    "RECONCILE_TIME_BUCKETS",
    "Controller",
    "ControllerMetrics",
    "ReconcileError",
    "Result",
    "TerminalError",
    "is_terminal",
]
