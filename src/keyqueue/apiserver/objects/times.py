"""Times as kube writes them (RFC 3339 in UTC, ``metav1.Time`` and ``MicroTime``) and ages as kubectl shows them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

__all__ = ["age", "format_time", "normalize_time", "parse_time"]


def format_time(ts: float) -> str:
    """RFC 3339 in UTC with second precision, like ``metav1.Time``."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_RFC3339: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")


def normalize_time(value: str, micro: bool) -> str | None:
    """An RFC 3339 time as kube writes it back: UTC, ``Z``, with six fraction digits for a ``MicroTime``
    (``micro``) and none for a ``Time``; ``None`` if malformed."""
    if not _RFC3339.fullmatch(value):
        return None
    match = re.search(r"\.(\d+)", value)
    head = value[: match.start()] + value[match.end():] if match else value
    try:
        parsed = datetime.fromisoformat(head.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None
    if not micro:
        return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.") + (match.group(1)[:6] if match else "").ljust(6, "0") + "Z"


def parse_time(value: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``Time`` or ``MicroTime``), or ``None`` if malformed."""
    if not _RFC3339.fullmatch(value):
        return None
    head, frac = value, ""
    match = re.search(r"\.(\d+)", value)
    if match:
        frac = match.group(1)[:6]
        head = value[: match.start()] + value[match.end():]
    try:
        parsed = datetime.fromisoformat(head.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() + (int(frac.ljust(6, "0")) / 1e6 if frac else 0.0)


def age(seconds: float) -> str:
    """A short human duration, following the rules kubectl's AGE column uses."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y" if days % 365 == 0 else f"{years}y{days % 365}d"
    return f"{years}y"
