"""Argument checks for the queues' public methods: each raises a ``TypeError`` or ``ValueError`` naming the argument,
before anything changes."""

from __future__ import annotations

__all__ = ["check_delay", "check_hashable", "check_priority", "check_timeout"]


def check_hashable(item: object) -> None:
    """Raise ``TypeError`` naming the type if ``item`` cannot be a queue key."""
    try:
        hash(item)
    except TypeError:
        raise TypeError(f"queue keys must be hashable; got an unhashable {type(item).__name__}: {item!r:.80}") from None


def _as_seconds(value: int | float, name: str) -> float:
    # An int too large for a float (10**400) is a caller's mistake, not "forever": say so, naming the argument.
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} is too large to be a number of seconds (an int of {int(value).bit_length()} bits); "
            "use math.inf for 'never' / 'forever'"
        ) from None


def check_delay(delay: object, name: str = "delay") -> float:
    """``delay`` as float seconds (``<= 0`` means now, ``math.inf`` never). ``TypeError`` for a non-number (``bool``
    included), ``ValueError`` for NaN or an ``int`` too large for a float."""
    if not isinstance(delay, (int, float)) or isinstance(delay, bool):
        raise TypeError(f"{name} must be a number of seconds, got {type(delay).__name__}: {delay!r:.80}")
    if delay != delay:
        raise ValueError(f"{name} must be a number of seconds, got NaN")
    return _as_seconds(delay, name)


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """``timeout`` as float seconds, or ``None`` (wait forever; so does ``math.inf``). ``TypeError`` for a
    non-number, ``ValueError`` for a negative value, NaN or an ``int`` too large for a float."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"{name} must be None or seconds, got {type(timeout).__name__}: {timeout!r:.80}")
    if not timeout >= 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {timeout!r}")
    return _as_seconds(timeout, name)


def check_priority(priority: object) -> int:
    """``priority`` if it is an ``int`` (not a ``bool``; any sign; higher is served first), else ``TypeError``."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}: {priority!r:.80}")
    return priority
