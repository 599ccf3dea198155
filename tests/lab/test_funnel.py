"""The funnel drawn live, the glossary, the RATELIMIT line's two parts, a watchable slow motion."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keyqueue import FakeClock, PriorityQueue, RateLimitingQueue
from keyqueue import aio as kq_aio
from keyqueue._core import QueueSnapshot
from keyqueue.lab.__main__ import main
from keyqueue.lab.common import parse_duration
from keyqueue.lab.explain import GLOSSARY, lookup

from .ptys import run_in_pty

Lab = Callable[..., tuple[int, dict[str, Any]]]
LAB_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "lab.md").read_text(encoding="utf-8")


def test_snapshot_of_the_threading_shell() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=FakeClock())
    assert q.snapshot() == QueueSnapshot(0, 0, 0, 0)
    q.add("a")
    q.add("b")
    assert q.get() == "a"
    q.add("a")  # held and re-added
    q.add_after("c", 10.0)
    snap = q.snapshot()
    assert (snap.dirty, snap.fifo, snap.processing, snap.delayed, snap.held_dirty) == (2, 1, 1, 1, 1)
    assert snap.fifo == len(q)
    q.shut_down()
    assert q.snapshot() == QueueSnapshot(2, 1, 1, 0, True)  # shutdown drops delayed entries, keeps the rest


def test_snapshot_of_the_asyncio_shell() -> None:
    async def scene() -> QueueSnapshot:
        q: kq_aio.RateLimitingQueue[str] = kq_aio.RateLimitingQueue(clock=FakeClock())
        q.add("a")
        q.add("b")
        assert await q.get() == "a"
        q.add("a")
        q.add_after("c", 5.0)
        return q.snapshot()

    assert asyncio.run(scene()) == QueueSnapshot(2, 1, 1, 1)


def test_snapshot_of_a_priority_queue_counts_ready_keys() -> None:
    q: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    q.add("a")
    q.add("b", priority=3)
    q.add("c", after=10.0)
    assert q.get() == "b"
    assert q.snapshot() == QueueSnapshot(1, 1, 1, 1)


def test_run_prints_the_funnel_and_records_its_sizes(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    status, summary = lab("run", "--duration", "1.3", "--rate", "5000", "--keys", "5", "--workers", "3", "--quiet",
                          "--plain")
    out = capsys.readouterr().out
    assert status == 0
    line = re.search(r"\[FUNNEL\] in=([\d,]+)/s → dirty=(\d+) fifo=(\d+) processing=(\d+) delayed=(\d+) → "
                     r"out=([\d,]+)/s \| absorbed-now=[\d.]+%", out)
    assert line is not None, out
    assert int(line.group(1).replace(",", "")) > 1000  # ~5,000 adds/s entering
    for sample in summary["timeline"]:
        assert sample["fifo"] <= sample["dirty"] <= 5 and sample["processing"] <= 3 and sample["delayed"] <= 5


def test_live_view_draws_the_funnel_in_a_terminal() -> None:
    status, out = run_in_pty(["run", "--duration", "1.2", "--rate", "5000", "--keys", "5", "--workers", "3"],
                             columns=100)
    assert status == 0, out
    for part in ("the funnel, over the last second", "generator add()", "absorbed", "DIRTY set", "FIFO",
                 "waiting (queue.Len)", "PROCESSING", "held of 3 workers", "DELAYED", "handed out"):
        assert part in out, (part, out)
    assert re.search(r"add\(\)\s+[\d,]+/s in", out)


def test_every_counter_the_lab_prints_is_in_the_glossary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--duration", "1.1", "--rate", "2000", "--keys", "3", "--quiet", "--plain"]) == 0
    out = capsys.readouterr().out
    printed = set(re.findall(r"([A-Za-z][\w.-]*)=", "\n".join(
        line for line in out.splitlines() if line.startswith(("[STATS]", "[FUNNEL]")))))
    printed -= {"in", "out", "t"}  # the funnel's arrows (adds/s, hand-outs/s) and the time label
    assert {"enqueued", "adds-total", "deduplicated", "marked", "processed", "rate-limited", "absorbed", "absorbed-now",
            "queue.Len", "dirty", "fifo", "processing", "delayed"} <= printed
    for name in [*printed, "adds/s", "hand-outs/s"]:
        assert lookup(name) is not None, name
        assert f"| `{lookup(name).name}` |" in LAB_PAGE, name  # type: ignore[union-attr]


def test_readme_glossary_is_the_explain_glossary() -> None:
    for term in GLOSSARY:
        assert f"| `{term.name}` | {term.meaning} | {term.prometheus} |" in LAB_PAGE, term.name


def test_explain_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert "workqueue_adds_total counts only the adds that made a key dirty" in " ".join(out.split())
    assert all(term.name in out for term in GLOSSARY)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert main(["explain", "deduplicated", "len"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deduplicated\n") and "queue.Len" in out and "workqueue_depth" in out
    assert main(["explain", "nonsense"]) == 2
    assert "no entry 'nonsense'" in capsys.readouterr().out
    assert main(["run", "--help"]) == 0
    assert "keyqueue-lab explain" in " ".join(capsys.readouterr().out.split())


def _seconds(text: str) -> float:
    """``5ms``, ``59.84s``, ``1m21.92s`` (format_duration's renderings) → seconds."""
    match = re.fullmatch(r"(?:(\d+)m(?=\d))?(.+)", text)
    assert match is not None
    return int(match.group(1) or 0) * 60 + parse_duration(match.group(2))


def test_ratelimit_line_shows_both_parts_of_the_max(capsys: pytest.CaptureFixture[str]) -> None:
    # Every reconcile fails: the shared bucket (10/s, burst 100) is empty within the first ~0.1 s, after which its
    # wait outgrows the per-key backoff of the followed keys.
    assert main(["run", "--duration", "1.5", "--rate", "5000", "--keys", "20", "--fail", "1", "--seed", "1",
                 "--follow-every", "0", "--plain"]) == 0
    out = capsys.readouterr().out
    lines = re.findall(r"\[RATELIMIT\] key=\S+ attempt=\d+ backoff=(\S+) = max\(per-key (\S+), bucket\(10/s\) "
                       r"(\S+)\)", out)
    assert lines, out
    for total, per_key, bucket in lines:
        assert _seconds(total) == pytest.approx(max(_seconds(per_key), _seconds(bucket)),
                                                      rel=1e-3, abs=1e-5)
    assert any(_seconds(bucket) > _seconds(per_key) for _, per_key, bucket in lines)
    assert any(_seconds(per_key) >= _seconds(bucket) for _, per_key, bucket in lines)


def test_slow_motion_is_watchable_and_wraps_between_words_at_80_columns() -> None:
    status, out = run_in_pty(["run", "--slow-motion", "--duration", "3", "--plain"], columns=80)
    assert status == 0, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert any(line.startswith("    ") for line in lines)  # long lines were wrapped, continuations indented
    text = " ".join(line.strip() for line in lines)
    assert "[REQUEUE-WHILE-PROCESSING] key=default/obj-0" in text and "[REDELIVERY] key=default/obj-0" in text
    assert "done() will queue it once more" in text  # a wrapped sentence reads whole again: no word was cut
    # The defaults' pace: 2 adds/s for 3 s, then the 2.5 s hold drains. The old pace (20 adds/s, 300 ms hold)
    # printed ~60 event lines a second; at most 10 per second of the run are allowed here.
    events = [line for line in lines if line.startswith("[") and not line.startswith(("[STATS]", "[FUNNEL]"))]
    assert 10 <= len(events) <= 10 * (3 + 2.5), len(events)
