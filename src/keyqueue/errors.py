"""Exceptions raised by keyqueue's queues (both shells)."""

from __future__ import annotations

__all__ = ["KeyMutatedError", "ShutDown"]


class ShutDown(Exception):
    """Raised by ``get()`` once the queue is shutting down **and** has nothing left to hand out.

    After ``shut_down()``, ``get()`` keeps returning the keys that were already queued; only when the FIFO is
    empty does it raise this. Every ``get()`` blocked at the moment of shutdown is woken and raises it (or takes a
    remaining key).
    """


class KeyMutatedError(RuntimeError):
    """A key's hash changed while the queue held it (a mutable object used as a key and changed after ``add``).

    The queue finds its keys by hash, so it cannot track such a key any more: it drops it, forgetting it
    everywhere (also in the metrics), and raises this error, naming the key (:attr:`key`), where it notices:
    in ``get()`` for a key that was waiting or delayed, in ``done()`` for a key that was being processed. Every
    other key keeps flowing. Use immutable keys (``str``, tuples of them, frozen dataclasses).

    Two mutations cannot be detected, because they look exactly like correct use. A key mutated so that its new
    hash still reaches its old slot is found there by identity and simply goes on as what it is now. A key mutated
    so that it becomes *equal to another key the queue holds* (waiting, processing or delayed) is, from then on,
    indistinguishable from that key: an ``add`` of it is an add of that other key (``DEDUP`` or ``MARKED``), a
    ``done`` of it may finish that other key, and no error is raised. Only keys that cannot change rule it out.
    """

    def __init__(self, key: object, where: str) -> None:
        super().__init__(
            f"queue key {key!r:.120} ({type(key).__name__}) was mutated while {where}: its hash changed, so the "
            "queue cannot track it and dropped it; queue keys must not change (use immutable keys)"
        )
        #: The mutated key, as it is now.
        self.key = key
