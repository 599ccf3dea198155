"""Queue metrics (placeholder until the metrics issue lands): every queue currently emits nothing."""

from __future__ import annotations

import threading
from typing import Any

from keyqueue._core import MetricsRecorder
from keyqueue.clock import Clock

__all__ = ["recorder_for"]


def recorder_for(name: str, provider: Any, clock: Clock, lock: threading.Lock) -> MetricsRecorder | None:
    """The metrics hooks for a queue called ``name``, or ``None`` when it emits nothing."""
    return None
