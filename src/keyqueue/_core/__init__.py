"""The queue's state machine and what it reports: no locks, no I/O, no waiting (the shells add those).

* :mod:`~keyqueue._core.machine`: :class:`QueueCore` (client-go's rules) and :class:`PriorityCore`
  (controller-runtime's priority queue) over the four states of a key;
* :mod:`~keyqueue._core.ordering`: the order in which waiting keys are handed out;
* :mod:`~keyqueue._core.delays`: pending delayed adds;
* :mod:`~keyqueue._core.outcomes`: :class:`AddResult`, :class:`QueueStats`, :class:`QueueSnapshot`;
* :mod:`~keyqueue._core.checks`: the argument checks of the public methods.
"""

from keyqueue._core.checks import check_delay, check_hashable, check_priority, check_timeout
from keyqueue._core.machine import EMPTY, MetricsRecorder, PriorityCore, QueueCore
from keyqueue._core.ordering import Ordering, PriorityOrdering, check_ordering
from keyqueue._core.outcomes import AddResult, QueueSnapshot, QueueStats

__all__ = [
    "EMPTY",
    "AddResult",
    "MetricsRecorder",
    "Ordering",
    "PriorityCore",
    "PriorityOrdering",
    "QueueCore",
    "QueueSnapshot",
    "QueueStats",
    "check_delay",
    "check_hashable",
    "check_ordering",
    "check_priority",
    "check_timeout",
]
