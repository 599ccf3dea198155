"""The protocols of the queue's core: :class:`Ordering` (what ``ordering=`` takes), :class:`MetricsRecorder` and
:class:`MetricsLedger` (what a metrics provider's recorder offers). Re-exported by :mod:`keyqueue._core` (and
``keyqueue.Ordering``).

This module is never compiled: mypyc turns a protocol defined in a compiled module into a "trait" that no Python
class may inherit from (``class Fifo(keyqueue.Ordering[str])`` would then raise ``TypeError: interpreted classes
cannot inherit from compiled traits`` when instantiated), and users subclass these.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol, TypeVar

__all__ = ["MetricsLedger", "MetricsRecorder", "Ordering"]

T = TypeVar("T", bound=Hashable)


class MetricsRecorder(Protocol):
    """Per-queue hooks the core calls, with the shell's lock held, when metrics are enabled.

    Timestamps are the queue clock's integer nanoseconds. ``add`` is called only for adds that make a key dirty
    (not for dedup no-ops); for a delayed entry the timestamp is the moment it fell due. What a hook returns is
    ignored (keyqueue's own recorder binds ``add`` to a built-in method that returns a value).
    """

    def add(self, item: Hashable, t_ns: int) -> object: ...

    def get(self, item: Hashable, t_ns: int) -> object: ...

    def done(self, item: Hashable, t_ns: int) -> object: ...

    def retry(self) -> object: ...

    def shut_down(self, t_ns: int) -> object:
        """The queue is shutting down (called once, before the first shutdown takes effect). As in client-go, the
        in-flight gauges (unfinished work, longest-running processor) are no longer updated from here on."""
        ...

    def lost(self, item: Hashable) -> object:
        """The queue dropped ``item`` because it was mutated (its hash changed): forget it (by identity), and
        take it out of depth if it was counted there."""
        ...


class MetricsLedger(Protocol):
    """What a recorder exposes for :meth:`QueueCore.keep_ledger` (``keyqueue.metrics``' own pull recorder): the
    core then keeps the per-key times and buffers the durations itself, with no Python call per event.

    ``added``: key -> time it became dirty (until it is handed out); ``started``: key -> time it was handed out (until
    done). Both must be empty when the ledger is attached: the core then uses them *as* its ``dirty`` and
    ``processing`` containers, so that a metrics event costs no dict operation beyond the plain queue's.
    ``queue_obs`` / ``work_obs``: queue / work durations in ns not yet counted; ``fold()`` counts them into the
    histograms and empties both. The core calls it when ``queue_obs`` holds :data:`LEDGER_FOLD_AT` entries; each
    ``work_obs`` entry follows a hand-out, so it holds at most that many plus the keys in flight at the last fold."""

    added: dict[Any, int]
    started: dict[Any, int]
    queue_obs: list[int]
    work_obs: list[int]

    def fold(self) -> object: ...


class Ordering(Protocol[T]):
    """The order in which waiting keys are handed out: client-go's pluggable ``Queue[T]`` (``Push``, ``Pop``,
    ``Len``, ``Touch``), spelled as :class:`collections.deque` spells the first three, so that the default FIFO
    *is* a deque and costs nothing extra.

    The core calls every method with the queue's lock held, so an ordering needs no locking of its own and must
    not call back into the queue. ``append(key)``: a key became waiting (a new add, or ``done()`` re-queueing a key
    re-added while it was processed); each key is appended at most once until it is popped. ``popleft()``: hand
    out the next key; called only when ``len() > 0``; it must return a key it was given and has not returned yet.
    ``__len__()``: how many keys it holds (``len(q)`` and whether ``get()`` waits). ``touch(key)``, optional: an
    add of a key that is already *waiting* (client-go calls it only then: not for a key being processed), e.g. to
    move it up. An ordering with ``touch`` turns the shells' lock-free dedup path off, since every add of a
    waiting key must reach it under the lock.
    """

    def append(self, item: T, /) -> None: ...

    def popleft(self) -> T: ...

    def __len__(self) -> int: ...
