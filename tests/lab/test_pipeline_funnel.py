"""The pipeline as a newcomer reads it: a default load with hot keys, log lines in the order things happen, a
short stage table of durations that cannot be negative."""

from __future__ import annotations

import collections
import re
import subprocess
import sys

import pytest

from keyqueue.lab.__main__ import main
from keyqueue.lab.load import trigger_name


def test_the_default_load_has_hot_keys(recorded: tuple[str, list[str]]) -> None:
    url, paths = recorded
    assert main(["load", "--url", url, "--requests", "200", "--concurrency", "2"]) == 0
    counts = collections.Counter(paths)
    assert len(paths) == 200 and len(counts) == 20  # every name is written...
    assert sum(n for _, n in counts.most_common(3)) >= 0.8 * 200  # ...and 3 of them get most of the writes


def test_trigger_names() -> None:
    assert [trigger_name(i, 20) for i in range(3)] == ["obj-0", "obj-1", "obj-2"]  # round robin
    names = [trigger_name(i, 20, 3) for i in range(100)]
    assert set(names) == {f"obj-{n}" for n in range(20)}
    assert sum(name in ("obj-0", "obj-1", "obj-2") for name in names) >= 80


@pytest.mark.timeout(120)
def test_each_key_is_logged_enqueued_before_a_worker_gets_it() -> None:
    proc = subprocess.run([sys.executable, "-m", "keyqueue.lab", "pipeline", "--backend", "memory", "--requests",
                           "200", "--log-lines", "-1", "--plain", "--stats-interval", "0"],
                          capture_output=True, text=True, timeout=100, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    enqueued: collections.Counter[str] = collections.Counter()
    got: collections.Counter[str] = collections.Counter()
    for line in proc.stdout.splitlines():
        if match := re.match(r"\[ENQUEUE\] key=(\S+)", line):
            enqueued[match.group(1)] += 1
        elif match := re.match(r"\[WORKER-\d+\] key=(\S+) Get", line):
            got[match.group(1)] += 1
            assert got[match.group(1)] <= enqueued[match.group(1)], line  # a hand-out needs an add before it
    assert got and sum(got.values()) <= sum(enqueued.values())


@pytest.mark.timeout(120)
def test_the_default_table_is_short_and_never_negative() -> None:
    argv = [sys.executable, "-m", "keyqueue.lab", "pipeline", "--backend", "memory", "--requests", "100",
            "--plain", "--stats-interval", "0", "--log-lines", "0"]
    short = subprocess.run(argv, capture_output=True, text=True, timeout=100, check=False)
    full = subprocess.run([*argv, "--verbose"], capture_output=True, text=True, timeout=100, check=False)
    assert short.returncode == 0 and full.returncode == 0, short.stdout + full.stdout

    def rows(out: str) -> list[list[str]]:
        table = out.split("-" * 100 + "\n", 1)[1].split("\n\n", 1)[0]
        return [re.split(r"\s{2,}", line.strip()) for line in table.splitlines() if not line.startswith("(")]

    short_rows, full_rows = rows(short.stdout), rows(full.stdout)
    assert len(short_rows) <= 12 < len(full_rows)
    assert "trigger loop thread on a core meanwhile" in full.stdout
    assert "trigger loop thread on a core meanwhile" not in short.stdout and "--verbose" in short.stdout
    for row in short_rows:  # the medians ("-": no sample): durations from one moment to a later one
        assert not re.match(r"-\d", row[1]), row
