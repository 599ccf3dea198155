"""Measurement machinery: timing through :mod:`timeit`, results, target checks, the table and the JSON report.

Why :mod:`timeit` and not pyperf or pytest-benchmark (see also ``benchmarks/README.md``):

* The operations that matter most here cost 40–1,000 ns. ``timeit.Timer`` compiles the statement *into* its timing
  loop (``for _i in _it: <stmt>``), so the only harness cost per operation is one iteration of a C-level loop
  (about 5 ns on this machine class; measured and reported as the ``base.loop`` row). pytest-benchmark calls a
  Python function per iteration (~40–60 ns on CPython 3.11), which would double the figure for a 50 ns dedup add.
* pyperf would give the same inlined loop plus worker processes, but its runner owns ``sys.argv`` and spawns ~20
  processes per benchmark; one side-by-side run of ~40 rows would take many minutes, and the brief asks for one
  process that runs every row and every baseline under the same conditions.
* From :mod:`timeit` we use the well-kept parts: ``Timer`` (garbage collector off while timing,
  ``time.perf_counter``), ``Timer.autorange`` to calibrate the loop count (and as warm-up), ``Timer.repeat`` for
  the repeats. We report the median of the repeats (robust to a neighbour stealing a core), plus min and stdev.

Stateful batch operations (adding 1,000,000 new keys, draining a delayed queue) cannot run the same statement twice
on the same state, so they use ``Timer.repeat(number=1)`` with a setup that builds fresh state for every repeat
(the setup runs inside ``Timer`` before its clock starts) and divide by the batch size.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Case",
    "Check",
    "Context",
    "Measurement",
    "Result",
    "Skip",
    "evaluate",
    "format_table",
    "machine_info",
    "time_batch",
    "time_inline",
    "write_json",
]

Op = Literal["le", "lt", "ge", "gt", "eq"]
_OPS: dict[Op, Callable[[float, float], bool]] = {
    "le": lambda a, b: a <= b,
    "lt": lambda a, b: a < b,
    "ge": lambda a, b: a >= b,
    "gt": lambda a, b: a > b,
    "eq": lambda a, b: a == b,
}


@dataclass(frozen=True)
class Check:
    """One target. Compares ``value`` (the row's median, or ``extra[field]``), or ``value / ref's median`` when
    ``ref`` names another row, against ``limit`` with ``op``. ``text`` is what the table prints."""

    text: str
    op: Op
    limit: float
    ref: str | None = None
    field: str | None = None


@dataclass
class Measurement:
    """What a case measured: one value per repeat, in ``unit``."""

    unit: str
    values: list[float]
    loops: int = 1  # statement executions per repeat
    ops: int = 1  # operations per repeat (the divisor that turned seconds into ``unit``)
    higher_is_better: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # Set when the samples are not available, only their summary (a row imported from another script): keys
    # "median", "min", "max", "n" and optionally "stdev"; ``values`` then holds just the median.
    summary: dict[str, float] | None = None


@dataclass
class Skip:
    """A case that could not run here (an optional module not there yet, a package that does not install)."""

    reason: str


@dataclass
class Context:
    """Sizes and repeat counts for one run; ``results`` holds the rows measured so far (derived rows read it).

    Per-operation rows run in ``rounds`` interleaved passes (every such row once per pass, ``repeats`` repeats
    each), so a row and its baseline are measured under the same background load; their values are pooled.
    """

    smoke: bool
    rounds: int = 3
    results: dict[str, Result] = field(default_factory=dict)
    current: str = ""  # id of the case being run (the key for the calibration cache)
    loops: dict[str, int] = field(default_factory=dict)  # calibrated loop counts, per case id
    # What timeit reads: wall time (time.perf_counter, timeit's default) or, with --timer cpu, this thread's CPU
    # time (time.thread_time), which leaves out the time this process waits for a core while others run.
    timer: Callable[[], float] = time.perf_counter

    def size(self, full: int, smoke: int) -> int:
        return smoke if self.smoke else full

    @property
    def repeats(self) -> int:
        """Repeats of a per-operation (inline) measurement, per round."""
        return 2 if self.smoke else 3

    @property
    def batch_repeats(self) -> int:
        """Repeats of a batch measurement (fresh state each time)."""
        return 2 if self.smoke else 5


Runner = Callable[[Context], "Measurement | Skip"]


@dataclass(frozen=True)
class Case:
    """A row of the table: how to measure it and what to compare it with."""

    id: str
    name: str
    group: str
    run: Runner
    baseline: str | None = None  # id of the row the ratio column divides by
    checks: tuple[Check, ...] = ()
    reference: str = ""  # client-go's figure from benchmarks/REFERENCE.md (not measured in this run)
    needs: tuple[str, ...] = ()  # rows that must run too when selected with --only
    interleave: bool = False  # a cheap per-operation row: run once per round, values pooled


@dataclass
class Result:
    case: Case
    m: Measurement
    median: float = 0.0
    min: float = 0.0
    max: float = 0.0
    stdev: float = 0.0
    ratio: float | None = None
    outcomes: list[tuple[Check, bool | None, float | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        vals = self.m.values
        summary = self.m.summary
        if summary is not None:
            self.median, self.min, self.max = summary["median"], summary["min"], summary["max"]
            self.stdev = summary.get("stdev", 0.0)
            return
        self.median = statistics.median(vals)
        self.min = min(vals)
        self.max = max(vals)
        self.stdev = statistics.stdev(vals) if len(vals) > 1 else 0.0

    @property
    def repeats(self) -> int:
        return int(self.m.summary["n"]) if self.m.summary is not None else len(self.m.values)

    @property
    def best(self) -> float:
        """The best repeat: the minimum, or the maximum for a higher-is-better unit (throughput)."""
        return self.max if self.m.higher_is_better else self.min

    @property
    def verdict(self) -> str:
        oks = [ok for _, ok, _ in self.outcomes]
        if not oks:
            return ""
        if any(ok is False for ok in oks):
            return "MISS"
        if any(ok is None for ok in oks):
            return "n/a"
        return "PASS"

    def to_json(self) -> dict[str, Any]:
        c = self.case
        return {
            "id": c.id,
            "name": c.name,
            "group": c.group,
            "unit": self.m.unit,
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "stdev": self.stdev,
            "repeats": self.repeats,
            "values": self.m.values if self.m.summary is None else None,
            "loops_per_repeat": self.m.loops,
            "ops_per_repeat": self.m.ops,
            "higher_is_better": self.m.higher_is_better,
            "baseline": c.baseline,
            "ratio_to_baseline": self.ratio,
            "targets": [
                {"text": chk.text, "ref": chk.ref, "field": chk.field, "measured": measured, "ok": ok}
                for chk, ok, measured in self.outcomes
            ],
            "verdict": self.verdict or None,
            "client_go_reference": c.reference or None,
            "note": self.m.note or None,
            "extra": self.m.extra,
        }


# -- timing --------------------------------------------------------------------------------------------------------


def time_inline(
    ctx: Context,
    stmt: str,
    setup: str = "pass",
    globals: Mapping[str, Any] | None = None,
    ops_per_stmt: int = 1,
) -> Measurement:
    """ns per operation of a statement that can run any number of times on the same state.

    Full mode: the first time a case runs, ``Timer.autorange`` calibrates (a loop count giving >= 0.2 s per
    repeat) and warms up; later rounds reuse that count after a short warm-up. Then ``ctx.repeats`` repeats.
    Smoke mode: a short warm-up and a fixed small loop count.
    """
    timer = timeit.Timer(stmt, setup, timer=ctx.timer, globals=dict(globals or {}))
    if ctx.smoke:
        timer.timeit(200)
        loops = 2000
    elif ctx.current in ctx.loops:
        loops = ctx.loops[ctx.current]
        timer.timeit(max(1, loops // 10))
    else:
        loops, _ = timer.autorange()
        ctx.loops[ctx.current] = loops
    raw = timer.repeat(repeat=ctx.repeats, number=loops)
    per_op = [t / (loops * ops_per_stmt) * 1e9 for t in raw]
    return Measurement("ns/op", per_op, loops=loops, ops=loops * ops_per_stmt)


def time_batch(
    ctx: Context,
    stmt: str,
    setup: str,
    globals: Mapping[str, Any],
    ops: int,
    unit: str = "ns/key",
    warmup: bool = True,
    repeats: int | None = None,
) -> Measurement:
    """ns per operation of a batch statement that needs fresh state each time (``setup`` builds it, untimed).

    Each repeat (``ctx.batch_repeats`` unless given) is one ``Timer.timeit(number=1)``; one extra unrecorded
    repeat warms up unless ``warmup=False``.
    """
    timer = timeit.Timer(stmt, setup, timer=ctx.timer, globals=dict(globals))
    if warmup:
        timer.timeit(1)
    raw = timer.repeat(repeat=repeats or ctx.batch_repeats, number=1)
    return Measurement(unit, [t / ops * 1e9 for t in raw], loops=1, ops=ops)


# -- evaluation ----------------------------------------------------------------------------------------------------


def evaluate(results: Mapping[str, Result]) -> None:
    """Fill in every row's ratio to its baseline and the outcome of each of its targets.

    A target whose reference row is missing (skipped, or not selected) evaluates to ``None`` ("n/a"), never to a
    pass.
    """
    for r in results.values():
        c = r.case
        base = results.get(c.baseline) if c.baseline else None
        r.ratio = r.median / base.median if base is not None and base.median else None
        r.outcomes = []
        for chk in c.checks:
            if chk.field is not None:
                raw = r.m.extra.get(chk.field)
                value = float(raw) if isinstance(raw, (int, float)) else None
            else:
                value = r.median
            if value is not None and chk.ref is not None:
                ref = results.get(chk.ref)
                value = value / ref.median if ref is not None and ref.median else None
            ok = None if value is None else _OPS[chk.op](value, chk.limit)
            r.outcomes.append((chk, ok, value))


# -- output --------------------------------------------------------------------------------------------------------


def fmt_number(value: float, unit: str) -> str:
    """The number part of :func:`fmt_value`: ``1,234``, ``48.2``, ``2.41 M``, ``1.93``."""
    if math.isnan(value):
        return "nan"
    if unit == "adds/s":
        return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value:,.0f}"
    if unit in ("s", "x", "ms"):
        return f"{value:.2f}"
    if abs(value) < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def fmt_value(value: float, unit: str) -> str:
    """``1,234 ns/op``, ``48.2 ns/op``, ``2.41 M adds/s``, ``1.93 s``."""
    return f"{fmt_number(value, unit)} {unit}"


_COLUMNS = ("operation", "median", "best", "±sd", "baseline", "ratio", "target", "verdict", "client-go (ref)")
_LEFT = (0, 4, 6, 7, 8)


def format_table(results: Sequence[Result], skipped: Sequence[tuple[Case, str]]) -> str:
    """The plain-text table, grouped as the cases are, then the skipped rows with their reasons."""
    by_id = {r.case.id: r for r in results}
    rows: list[tuple[str, ...]] = []
    groups: list[str] = []
    for r in results:
        c = r.case
        if c.group not in groups:
            groups.append(c.group)
            rows.append((f"[{c.group}]",) + ("",) * (len(_COLUMNS) - 1))
        sd = f"{100 * r.stdev / r.median:.0f}%" if r.median and r.stdev else "-"
        base = by_id.get(c.baseline) if c.baseline else None
        base_txt = f"{base.case.id} {fmt_number(base.median, base.m.unit)}" if base is not None else ""
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        target = "; ".join(chk.text for chk in c.checks)
        best = fmt_number(r.best, r.m.unit) if r.repeats > 1 else "-"
        rows.append((f"  {c.name}", fmt_value(r.median, r.m.unit), best, sd, base_txt, ratio, target, r.verdict,
                     c.reference))
    widths = [max(len(col), *(len(row[i]) for row in rows)) if rows else len(col) for i, col in enumerate(_COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.ljust(w) if i in _LEFT else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )
        return "  ".join(padded).rstrip()

    out = [line(_COLUMNS), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    notes = [f"  {r.case.id}: {r.m.note}" for r in results if r.m.note]
    if notes:
        out.append("")
        out.append("notes:")
        out += notes
    if skipped:
        out.append("")
        out.append("skipped:")
        out += [f"  {c.id}: {c.name} — {reason}" for c, reason in skipped]
    return "\n".join(out)


def format_targets(results: Sequence[Result]) -> str:
    """One line per target: the measured number (or ratio), the target, PASS/MISS/n/a."""
    out = []
    for r in results:
        for chk, ok, measured in r.outcomes:
            verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
            if measured is None:
                got = "not measured"
            elif chk.ref is not None:
                got = f"{measured:.2f}x of {chk.ref}"
            elif chk.field is not None:
                got = f"{chk.field} = " + (f"{int(measured):,}" if measured == int(measured) else f"{measured:.2f}")
            else:
                got = fmt_value(measured, r.m.unit)
            out.append(f"  {verdict:4}  {r.case.name}: {got}  (target: {chk.text})")
    return "\n".join(out)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info() -> dict[str, Any]:
    """Where and when the numbers were taken."""
    try:
        load: list[float] | None = list(os.getloadavg())
    except OSError:
        load = None
    try:
        import keyqueue

        kq_version = keyqueue.__version__
        kq_path: str | None = os.path.dirname(keyqueue.__file__ or "")
    except (ImportError, AttributeError):
        kq_version = "unknown"
        kq_path = None
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_build": " ".join(platform.python_build()),
        "keyqueue_version": kq_version,
        "keyqueue_path": kq_path,  # which source tree was measured
        "git_commit": _git_commit(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": load,
        "switch_interval_s": sys.getswitchinterval(),
    }


def write_json(path: str, payload: Mapping[str, Any]) -> None:
    """Write the report (``-`` for stdout)."""
    text = json.dumps(payload, indent=2, sort_keys=False, default=str)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(path).write_text(text + "\n")
