"""Helpers shared by the lab's subcommands: durations, number formatting, the text stream, ``--json`` output."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "EXIT_INTERRUPTED",
    "MAX_THREADS",
    "add_json_argument",
    "check_size",
    "counted",
    "format_count",
    "format_duration",
    "format_percent",
    "human_stream",
    "install_line",
    "parse_duration",
    "write_json",
]

EXIT_INTERRUPTED = 130
"""The exit status of every subcommand whose run was cut short by Ctrl-C or SIGTERM (after its summary so far)."""

MAX_THREADS = 1024
"""The most threads (workers, producers, connections) one lab option may ask for: far beyond what shows anything
on a few cores, and well below what exhausts a machine's thread limit."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|μs|ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """Parse ``"5ms"``, ``"20us"``/``"20µs"``, ``"10s"``, ``"1.5m"`` or a bare number of seconds (``"0.5"``).

    Returns seconds as a float. Raises ``argparse.ArgumentTypeError`` (a ``ValueError`` subclass is not used so
    that argparse prints the message as is) for anything else, including negative or non-finite values.
    """
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (use a number of seconds or a number with ns, us, ms, s, m or h)"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"not a finite duration: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A compact, Go-like rendering: ``5ms``, ``20µs``, ``1.28s``, ``16m40s``, ``inf``."""
    if seconds != seconds:
        return "nan"
    if math.isinf(seconds):
        return "inf" if seconds > 0 else "-inf"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.4g}ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.4g}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.4g}ms"
    if seconds < 60:
        return f"{seconds:.4g}s"
    minutes, rest = divmod(seconds, 60.0)
    secs = f"{rest:.2f}".rstrip("0").rstrip(".")
    if minutes < 60:
        return f"{int(minutes)}m{secs}s"
    hours, minutes = divmod(minutes, 60.0)
    return f"{int(hours)}h{int(minutes)}m{secs}s"


def format_count(n: float) -> str:
    """``499506`` → ``499,506`` (floats are rounded to an integer first)."""
    return f"{round(n):,}"


def counted(n: float, singular: str, plural: str | None = None) -> str:
    """``1 key``, ``2 keys``, ``1,000 keys`` (``plural`` for words that do not just take an ``s``)."""
    return f"{format_count(n)} {singular if round(n) == 1 else plural or singular + 's'}"


def format_percent(fraction: float, digits: int = 1) -> str:
    """``0.9921`` → ``99.2%``. Rounds down, so that a fraction short of 1 never reads as ``100.0%``
    (``0.99996`` → ``99.99%`` with 2 digits)."""
    scale = 10**digits
    return f"{math.floor(fraction * 100 * scale + 1e-6) / scale:.{digits}f}%"


def install_line(extra: str = "lab") -> str:
    """The exact command that installs keyqueue's ``extra`` into the running interpreter's environment.

    From a source checkout (``pyproject.toml`` two levels above the package, as in this repository's ``src``
    layout) it is an editable install of that checkout; otherwise an install of the published package.
    """
    python = shlex.quote(sys.executable)
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file():
        here = Path(os.getcwd()).resolve()
        where = "." if root == here else str(root)
        return f"{python} -m pip install -e {shlex.quote(f'{where}[{extra}]')}"
    return f"{python} -m pip install {shlex.quote(f'keyqueue[{extra}]')}"


def check_size(option: str, value: object, low: int, high: int) -> None:
    """Raise ``ValueError`` naming ``option`` unless ``value`` is an int within ``low..high``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{option} must be an integer, got {type(value).__name__}: {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{option} must be within {low:,}..{high:,}, got {value:,}")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--json PATH`` option every subcommand has (``-`` writes the summary to stdout)."""
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write a machine-readable summary to PATH ('-' for stdout; the text output then goes to stderr)",
    )


def human_stream(args: argparse.Namespace) -> TextIO:
    """Where a subcommand writes its text: stdout, or stderr when ``--json -`` claims stdout."""
    return sys.stderr if getattr(args, "json", None) == "-" else sys.stdout


def write_json(path: str | None, summary: Mapping[str, Any]) -> None:
    """Write ``summary`` as JSON to ``path`` (``-`` = stdout). Does nothing when ``path`` is ``None``.

    Raises ``OSError`` if the file cannot be written.
    """
    if path is None:
        return
    text = json.dumps(_finite(summary), indent=2, allow_nan=False)
    if path == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def _finite(value: Any) -> Any:
    """JSON has no infinity or NaN: write them as ``null``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
