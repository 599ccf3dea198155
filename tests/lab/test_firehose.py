from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keyqueue.lab.__main__ import main
from keyqueue.lab.firehose_log import EventLog

Lab = Callable[..., tuple[int, dict[str, Any]]]


def test_many_adds_on_few_keys_are_absorbed(lab: Lab) -> None:
    status, s = lab("run", "--duration", "1s", "--rate", "20000", "--keys", "4", "--workers", "2",
                    "--work", "2ms", "--quiet", "--plain", "--seed", "1")
    assert status == 0
    assert s["absorbed"] > 0.9
    assert s["violations"] == 0
    assert s["enqueued"] > 0 and s["delivered_rate"] > 0
    # The counters are the queue's: every evaluated add is exactly one of its four outcomes...
    st = s["stats"]
    assert st["adds"] == st["queued"] + st["deduplicated"] + st["marked"] + st["dropped"]
    assert s["adds_total"] == st["adds"] >= s["enqueued"]
    # ...every hand-out was finished, and each redelivery came from an add that marked a held key.
    assert s["processed"] == st["gets"] == st["dones"]
    assert st["redelivered"] <= s["marked"]
    assert s["rate_limited"] <= s["processed"]
    for key in ("requested_rate", "delivered_rate", "duration_s", "enqueued", "adds_total", "deduplicated",
                "marked", "processed", "rate_limited", "absorbed"):
        assert key in s


def _events(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if f"key={key} " in line]


def _trio_with_next_seq(lines: list[str]) -> bool:
    """Get seq=N … REQUEUE-WHILE-PROCESSING … DEDUP … Done seq=N … REDELIVERY … Get seq=N+1."""
    for i, line in enumerate(lines):
        m = re.search(r"Get seq=(\d+)$", line)
        if not m:
            continue
        seq = int(m.group(1))
        rest = lines[i + 1:]
        try:
            requeue = next(j for j, x in enumerate(rest) if x.startswith("[REQUEUE-WHILE-PROCESSING]"))
            dedup = next(j for j, x in enumerate(rest) if x.startswith("[DEDUP]") and j > requeue)
            done = next(j for j, x in enumerate(rest) if f"Done seq={seq} " in x)
            redelivery = next(j for j, x in enumerate(rest) if x.startswith("[REDELIVERY]"))
            again = next(j for j, x in enumerate(rest) if x.endswith(f"Get seq={seq + 1}"))
        except StopIteration:
            continue
        if requeue < dedup < done < redelivery < again and not any(
            "Get seq=" in x for x in rest[:done]
        ):
            return True
    return False


def test_slow_motion_shows_requeue_dedup_redelivery(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    # Faster than the watchable default (2 adds/s, 2.5 s hold) to keep the test short; the same scene.
    status, s = lab("run", "--slow-motion", "--rate", "12", "--hold", "400ms", "--duration", "1.2s", "--fail", "0",
                    "--plain")
    out = capsys.readouterr().out
    assert status == 0
    assert s["slow_motion"] is True and s["slow_key"] == "default/obj-0"
    assert _trio_with_next_seq(_events(out, "default/obj-0")), out
    assert "[STATS]" in out


def test_default_log_follows_chosen_keys(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = lab("run", "--duration", "1s", "--rate", "5000", "--keys", "4", "--workers", "2", "--work", "2ms",
                    "--fail", "0", "--follow-every", "0", "--plain")
    out = capsys.readouterr().out
    assert status == 0
    assert _events(out, "default/obj-0") and _events(out, "default/obj-1")
    assert not _events(out, "default/obj-2")  # not followed
    assert _trio_with_next_seq(_events(out, "default/obj-0"))
    assert re.search(r"\[DEDUP\] key=default/obj-0 … \d+ more adds", out)  # runs of no-ops are folded


def test_quiet_prints_only_stats(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = lab("run", "--duration", "0.3s", "--rate", "2000", "--keys", "4", "--quiet", "--plain")
    out = capsys.readouterr().out
    assert status == 0
    assert "[STATS] final" in out
    assert not any(tag in out for tag in ("[ENQUEUE]", "[DEDUP]", "[WORKER-", "[REDELIVERY]"))


def test_run_plot(tmp_path: Path, lab: Lab) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    status, s = lab("run", "--duration", "0.5s", "--rate", "2000", "--keys", "4", "--quiet", "--plain",
                    "--plot", str(png))
    assert status == 0
    assert len(s["timeline"]) >= 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_run_options_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fail", "1.5", "--plain"]) == 2
    assert "fail" in capsys.readouterr().out


def test_event_log_formats_a_cycle_in_emission_order() -> None:
    from keyqueue import AddResult

    lines: list[str] = []
    log = EventLog(lines.append, mode="all")
    log.start()
    k = "default/obj-0"
    for event in [("get", k, 1, 68), ("add", k, AddResult.MARKED), ("add", k, AddResult.DEDUP),
                  ("rl", k, 1, 3, 0.02, " = max(per-key 20ms, bucket(10/s) 0s)"), ("done", k, 1, 68, False, True, 0),
                  ("get", k, 2, 69),
                  ("done", k, 2, 69, True, False, 3)]:
        log.emit(event)
    log.close()
    text = "\n".join(lines).splitlines()
    assert text == [
        "[WORKER-1] key=default/obj-0 Get seq=68",
        "[ENQUEUE] key=default/obj-0 (generator)",
        "[REQUEUE-WHILE-PROCESSING] key=default/obj-0 WORKER-1 holds it — marked dirty; done() will queue it "
        "once more",
        "[ENQUEUE] key=default/obj-0 (generator)",
        "[DEDUP] key=default/obj-0 already marked for redelivery — the add is a no-op",
        "[RATELIMIT] key=default/obj-0 attempt=3 backoff=20ms = max(per-key 20ms, bucket(10/s) 0s)",
        "[WORKER-1] key=default/obj-0 Done seq=68 result=ERR → AddRateLimited",
        "[REDELIVERY] key=default/obj-0 was added while WORKER-1 held it → done() put it back in the FIFO (once)",
        "[WORKER-2] key=default/obj-0 Get seq=69",
        "[WORKER-2] key=default/obj-0 Done seq=69 result=OK → Forget (backoff reset: 3 failures forgotten)",
    ]


def test_metrics_agree_with_the_queue_counters() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from keyqueue.lab.firehose import FirehoseConfig, run_firehose
    from keyqueue.metrics import PrometheusMetricsProvider

    provider = PrometheusMetricsProvider(prometheus_client.CollectorRegistry())
    config = FirehoseConfig(rate=5000, keys=4, workers=2, work=0.001, duration=0.3, log="none")
    result = run_firehose(config, metrics_provider=provider)
    adds = provider.registry.get_sample_value("workqueue_adds_total", {"name": "lab"})
    # client-go's adds counter counts adds that made a key dirty: the queue's QUEUED + MARKED decisions.
    assert adds == result.stats.queued + result.stats.marked


def test_metrics_port_option(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("prometheus_client")
    status, _ = lab("run", "--duration", "0.2s", "--rate", "1000", "--keys", "2", "--quiet", "--plain",
                    "--metrics-port", "0")
    assert status == 0
    assert "metrics (name 'lab') are served at http://127.0.0.1:" in capsys.readouterr().out


def test_event_log_add_that_marks_a_key_before_its_get_event() -> None:
    # A worker emits its Get after get() returned, so a generator add can mark the key in between: the log must
    # not name the previous holder, and later no-op adds are still "already marked" (not blamed on a retry).
    from keyqueue import AddResult

    lines: list[str] = []
    log = EventLog(lines.append, mode="all")
    log.start()
    k = "default/obj-0"
    for event in [("get", k, 1, 1), ("done", k, 1, 1, True, False, 0), ("add", k, AddResult.QUEUED),
                  ("add", k, AddResult.MARKED), ("get", k, 2, 2), ("add", k, AddResult.DEDUP),
                  ("done", k, 2, 2, True, True, 0)]:
        log.emit(event)
    log.close()
    text = "\n".join(lines).splitlines()
    assert text[3:] == [
        "[ENQUEUE] key=default/obj-0 (generator)",
        "[REQUEUE-WHILE-PROCESSING] key=default/obj-0 a worker (its Get follows) holds it — marked dirty; done() "
        "will queue it once more",
        "[WORKER-2] key=default/obj-0 Get seq=2",
        "[ENQUEUE] key=default/obj-0 (generator)",
        "[DEDUP] key=default/obj-0 already marked for redelivery — the add is a no-op",
        "[WORKER-2] key=default/obj-0 Done seq=2 result=OK → Forget",
        "[REDELIVERY] key=default/obj-0 was added while WORKER-2 held it → done() put it back in the FIFO (once)",
    ]


class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_view_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["run", "--duration", "0.3s", "--rate", "2000", "--keys", "4", "--quiet"]) == 0
    out = tty.getvalue()
    # The live view: a progress bar through the duration and the current counters, redrawn in place.
    assert "firehose" in out and "━" in out and "/ 300ms" in out
    for label in ("enqueued", "adds-total", "deduplicated", "marked", "processed", "rate-limited",
                  "absorbed", "queue.Len"):
        assert label in out
    assert "\x1b[" in out  # terminal control sequences: it really is the live view, not plain lines
    assert "[STATS] final" in out


def test_plain_output_on_a_tty_with_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["run", "--duration", "0.2s", "--rate", "1000", "--keys", "2", "--quiet", "--plain"]) == 0
    out = tty.getvalue()
    assert "[STATS] final" in out and "\x1b[" not in out
