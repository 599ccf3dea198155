"""keyqueue._signals: handlers that only record, so a signal can never deadlock the main thread."""

from __future__ import annotations

import signal
import threading

from keyqueue._signals import recorded_signals


def test_signals_are_recorded_and_the_previous_handlers_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        assert received == [signal.SIGTERM, signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_arriving_while_the_main_thread_holds_an_event_lock_does_not_deadlock() -> None:
    # The situation that hung `keyqueue-lab apiserver` in rare runs: the handler ran inside Event.wait() while
    # the main thread held the event's lock. A recording handler takes no lock, so this returns at once.
    event = threading.Event()
    with recorded_signals(signal.SIGTERM) as received:
        with event._cond:  # what Event.wait() holds between its internal steps
            signal.raise_signal(signal.SIGTERM)
        assert received == [signal.SIGTERM]
        event.set()  # and the event still works
    assert event.is_set()
