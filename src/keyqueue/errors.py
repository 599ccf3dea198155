"""Exceptions raised by keyqueue's queues (both shells)."""

from __future__ import annotations

__all__ = ["ShutDown"]


class ShutDown(Exception):
    """Raised by ``get()`` once the queue is shutting down **and** has nothing left to hand out.

    After ``shut_down()``, ``get()`` keeps returning the keys that were already queued; only when the FIFO is
    empty does it raise this. Every ``get()`` blocked at the moment of shutdown is woken and raises it (or takes a
    remaining key).
    """
