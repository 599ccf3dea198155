"""What the state machine reports: the outcome of each add, its decision counters, and a snapshot of its sizes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["AddResult", "Counts", "QueueSnapshot", "QueueStats"]


class AddResult(IntEnum):
    """What an add did (returned by ``add``, ``add_after``, ``add_rate_limited``)."""

    DROPPED = 0  #: the queue is shutting down; nothing changed
    DEDUP = 1  #: the key was already dirty (waiting, or being processed and marked); nothing changed
    MARKED = 2  #: the key is being processed; it is now dirty and ``done()`` will queue it again, once
    QUEUED = 3  #: the key joined the waiting keys
    DELAYED = 4  #: a delayed entry was stored, or an existing one moved earlier (or, priority queue, raised)
    DELAY_KEPT = 5  #: an earlier delayed entry of this key already exists; nothing changed
    #: made while this thread was inside one of the queue's own calls (a signal handler or ``__del__`` that
    #: interrupted it): a helper thread applies it as soon as the interrupted call has returned
    DEFERRED = 6

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue's decisions, from a queue built with ``stats=True``.

    ``adds`` counts every add the queue decided on at once (plain adds, and delayed entries when they fell due):
    ``queued`` + ``deduplicated`` + ``marked`` + ``dropped``. ``redelivered``: ``done`` calls that queued a
    re-added key again; ``gets``/``dones``: keys handed out / finished; ``delayed``: delayed adds that stored or
    moved an entry (``DELAYED``) or found an earlier one (``DELAY_KEPT``); ``fired``: delayed entries that fell due
    (each also counted in ``adds``).
    """

    adds: int = 0
    queued: int = 0
    deduplicated: int = 0
    marked: int = 0
    dropped: int = 0
    redelivered: int = 0
    gets: int = 0
    dones: int = 0
    delayed: int = 0
    fired: int = 0


class Counts:
    """The mutable counters behind :class:`QueueStats` (a core built with ``stats=True`` keeps one)."""

    __slots__ = ("adds", "dedup", "delayed", "dones", "dropped", "fired", "gets", "marked", "queued", "redelivered")

    def __init__(self) -> None:
        self.adds = self.queued = self.dedup = self.marked = self.dropped = 0
        self.redelivered = self.gets = self.dones = self.delayed = self.fired = 0

    def add(self, outcome: AddResult) -> None:
        if outcome is AddResult.QUEUED:
            self.queued += 1
        elif outcome is AddResult.DEDUP:
            self.dedup += 1
        elif outcome is AddResult.MARKED:
            self.marked += 1
        elif outcome is AddResult.DROPPED:
            self.dropped += 1
        else:  # DELAYED, DELAY_KEPT: not decided yet
            self.delayed += 1
            return
        self.adds += 1

    def snapshot(self) -> QueueStats:
        return QueueStats(self.adds, self.queued, self.dedup, self.marked, self.dropped,
                          self.redelivered, self.gets, self.dones, self.delayed, self.fired)


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The sizes of a queue's structures at one instant (``snapshot()``, taken under the queue's lock).

    ``dirty``: keys that need work (waiting, or re-added while a worker holds them); ``fifo``: keys waiting to be
    handed out (client-go's ``queue``; a priority queue's ready keys not being processed); ``processing``: keys
    handed out and not yet done; ``delayed``: keys with a pending delayed add. ``held_dirty`` (= ``dirty - fifo``):
    keys that ``done()`` will queue again.
    """

    dirty: int
    fifo: int
    processing: int
    delayed: int
    shutting_down: bool = False

    @property
    def held_dirty(self) -> int:
        """Keys being processed that were added again meanwhile: each is redelivered once at its ``done()``."""
        return self.dirty - self.fifo
