"""The benchmarks must keep running: ``python -m benchmarks --smoke`` end to end, plus the harness's own logic.

No timing is asserted anywhere here (the machine is shared and has 2 cores): only that every row ran or says why
not, and that the table and the JSON report have their structure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks.cases import build_cases
from benchmarks.harness import Case, Check, Context, Measurement, Result, evaluate, format_table
from benchmarks.runner import main, select

ROOT = Path(__file__).resolve().parents[1]

# Rows that need nothing beyond the core and the stdlib: they must always be measured.
ALWAYS = {
    "add.new", "add.dedup", "add.processing", "add.processing_dedup", "cycle", "cycle.newkey", "bulk", "bulk.mem",
    "delay.real", "delay.fake", "ratelimited", "base.loop", "base.set_in", "base.lock", "base.queue",
    "base.simplequeue", "base.deque_lock", "base.naive", "base.asyncio", "scale.flatness", "firehose", "race",
    "race.control",
}
# Rows that depend on modules or packages that may be missing: measured, or skipped with a reason.
OPTIONAL = {"metrics.cycle", "metrics.dedup", "metrics.noop", "aio.cycle", "aio.dedup", "prio.cycle",
            "prio.cycle_priority", "prio.bulk", "base.aiok8s", "pipeline.get_c1", "pipeline.get", "pipeline.get_idle"}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    report, png = out / "bench.json", out / "scaling.png"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", str(report), "--plot", str(png)],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )
    return {"proc": proc, "report": json.loads(report.read_text()) if report.exists() else None, "png": png}


def test_smoke_exits_cleanly_and_writes_json(smoke_run: dict[str, Any]) -> None:
    proc = smoke_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = smoke_run["report"]
    assert report is not None
    assert report["smoke"] is True
    assert report["errors"] == []
    for key in ("hostname", "cpu_model", "cpu_count", "python", "date", "platform"):
        assert report["machine"][key], key
    assert report["machine"]["python"] == ".".join(map(str, sys.version_info[:3]))


def test_every_row_is_measured_or_skipped_with_a_reason(smoke_run: dict[str, Any]) -> None:
    report = smoke_run["report"]
    measured = {r["id"] for r in report["results"]}
    skipped = {s["id"]: s["reason"] for s in report["skipped"]}
    assert measured >= ALWAYS, ALWAYS - measured
    optional = set(OPTIONAL)
    if (ROOT / "benchmarks" / "bench_apiserver.py").exists():
        optional |= {"apiserver.update", "apiserver.patch", "apiserver.write_watch"}
    for rid in optional:
        assert rid in measured or skipped.get(rid), f"{rid} neither measured nor skipped with a reason"
    assert any(r["id"].startswith("scale.1e") for r in report["results"])
    assert set(skipped) & measured == set()


def test_each_result_has_its_statistics(smoke_run: dict[str, Any]) -> None:
    for r in smoke_run["report"]["results"]:
        if r["values"] is not None:  # None only for rows imported as a summary (the API-server script's)
            assert r["repeats"] == len(r["values"]) >= 1, r["id"]
        assert r["repeats"] >= 1, r["id"]
        assert r["min"] <= r["median"] <= r["max"], r["id"]
        assert r["stdev"] >= 0, r["id"]
        assert r["unit"], r["id"]
        for t in r["targets"]:
            assert t["ok"] in (True, False, None)
        assert r["verdict"] in (None, "PASS", "MISS", "n/a"), r["id"]
    by_id = {r["id"]: r for r in smoke_run["report"]["results"]}
    assert by_id["cycle"]["baseline"] == "base.queue"
    cycle, base = by_id["cycle"], by_id["base.queue"]
    assert cycle["ratio_to_baseline"] == pytest.approx(cycle["median"] / base["median"])
    assert by_id["race"]["extra"]["violations"] == 0  # a correctness fact, not a timing
    assert by_id["race.control"]["extra"]["violations"] > 0  # the detector is seen failing


# Every target of the benchmark issue, by the row that carries it: dropping one must fail here, not go unnoticed.
TARGET_ROWS = {
    "add.dedup": 1, "cycle": 2, "bulk": 1, "bulk.mem": 1, "scale.flatness": 1, "firehose": 1, "race": 2,
    "race.control": 1,
}
OPTIONAL_TARGET_ROWS = {"aio.cycle": 1, "metrics.cycle": 1, "metrics.dedup": 1}


def test_every_target_is_judged(smoke_run: dict[str, Any]) -> None:
    by_id = {r["id"]: r for r in smoke_run["report"]["results"]}
    expected = dict(TARGET_ROWS)
    expected.update({rid: n for rid, n in OPTIONAL_TARGET_ROWS.items() if rid in by_id})
    for rid, n in expected.items():
        targets = by_id[rid]["targets"]
        assert len(targets) == n, (rid, targets)
        for t in targets:
            assert t["ok"] in (True, False), (rid, t)  # judged: PASS or MISS, never "n/a" in a full selection
            assert isinstance(t["measured"], float | int), (rid, t)
        assert by_id[rid]["verdict"] in ("PASS", "MISS"), rid
    cycle_refs = {t["ref"] for t in by_id["cycle"]["targets"]}
    assert cycle_refs == {None, "base.queue"}  # ≤ 600 ns, and ≥ 1.5x faster than queue.Queue


def test_table_is_printed(smoke_run: dict[str, Any]) -> None:
    stdout = smoke_run["proc"].stdout
    for column in ("operation", "median", "baseline", "ratio", "target", "verdict"):
        assert column in stdout
    for r in smoke_run["report"]["results"]:
        assert r["name"] in stdout
    assert "targets:" in stdout
    assert "PASS" in stdout or "MISS" in stdout


def test_plot_is_written(smoke_run: dict[str, Any]) -> None:
    pytest.importorskip("matplotlib")
    assert smoke_run["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_selects_matching_rows_and_what_they_compare_with() -> None:
    chosen = {c.id for c in select(build_cases(smoke=True), "^cycle$")}
    assert chosen == {"cycle", "base.queue"}
    chosen = {c.id for c in select(build_cases(smoke=True), "aio.cycle")}
    assert {"aio.cycle", "cycle", "base.queue"} <= chosen
    chosen = {c.id for c in select(build_cases(smoke=True), "^aio.iter$")}
    assert chosen == {"aio.iter", "base.asyncio"}
    assert "bulk" not in chosen


def test_main_in_process_with_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    assert main(["--smoke", "--only", "^base.set_in$", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert [r["id"] for r in data["results"]] == ["base.set_in"]
    assert main(["--smoke", "--only", "no-such-row"]) == 2
    capsys.readouterr()


def _result(cid: str, values: list[float], checks: tuple[Check, ...] = (), baseline: str | None = None) -> Result:
    case = Case(cid, cid, "g", lambda ctx: Measurement("ns/op", values), baseline=baseline, checks=checks)
    return Result(case, Measurement("ns/op", values, extra={"violations": 3}))


def test_evaluate_passes_misses_and_says_na_without_a_reference() -> None:
    rows = {
        "fast": _result("fast", [90.0, 100.0, 110.0], (Check("≤ 100", "le", 100.0),)),
        "slow": _result("slow", [150.0, 160.0], (Check("≤ 100", "le", 100.0),)),
        "rel": _result("rel", [300.0], (Check("≤ 0.5x base", "le", 0.5, ref="base"),), baseline="base"),
        "orphan": _result("orphan", [1.0], (Check("≤ 1x gone", "le", 1.0, ref="gone"),)),
        "field": _result("field", [1.0], (Check("0 violations", "eq", 0, field="violations"),)),
        "base": _result("base", [500.0]),
    }
    evaluate(rows)
    assert rows["fast"].verdict == "PASS"  # median 100 <= 100
    assert rows["slow"].verdict == "MISS"
    assert rows["rel"].verdict == "MISS" and rows["rel"].ratio == pytest.approx(0.6)
    assert rows["orphan"].verdict == "n/a"  # never a pass when the reference row is missing
    assert rows["field"].verdict == "MISS"  # extra["violations"] == 3
    assert rows["base"].verdict == ""
    table = format_table(list(rows.values()), [])
    assert "MISS" in table and "PASS" in table and "0.60x" in table


def test_context_sizes() -> None:
    assert Context(smoke=True).size(1000, 10) == 10
    assert Context(smoke=False).size(1000, 10) == 1000


def test_docs_table_is_generated_from_the_report(smoke_run: dict[str, Any], tmp_path: Path) -> None:
    from benchmarks.docs_table import BEGIN, END, render, replace_between_markers
    from benchmarks.docs_table import main as table_main

    report = smoke_run["report"]
    table = render(report)
    for r in report["results"]:
        if r["targets"]:
            assert f"| {r['name']} |" in table, r["id"]
    assert "--smoke" in table
    readme = tmp_path / "performance.md"
    readme.write_text(f"intro\n{BEGIN}\nold table\n{END}\noutro\n")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    assert table_main([str(path), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text and text.startswith("intro\n") and text.endswith(f"{END}\noutro\n")
    assert render(report) in text
    with pytest.raises(ValueError, match="expected one"):
        replace_between_markers("no markers here", "x")
    readme.write_text(f"{END}\n{BEGIN}\n")  # wrong order: refused, file untouched
    assert table_main([str(path), "--write", str(readme)]) == 2
    assert readme.read_text() == f"{END}\n{BEGIN}\n"


def test_docs_table_takes_rows_from_the_last_report_that_has_them(smoke_run: dict[str, Any]) -> None:
    import copy

    from benchmarks.docs_table import render

    full = smoke_run["report"]
    later = copy.deepcopy(full)
    later["argv"] = ["--only", "^cycle$"]
    later["results"] = [r for r in later["results"] if r["id"] in ("cycle", "base.queue")]
    for r in later["results"]:
        r["median"] = 123456.0  # a value no smoke row has: where it shows, the later report was used
    table = render([full, later])
    (cycle_line,) = [line for line in table.splitlines() if line.startswith(f"| {later['results'][0]['name']} |")]
    assert "123,456" in cycle_line
    dedup = next(r for r in full["results"] if r["id"] == "add.dedup")
    (dedup_line,) = [line for line in table.splitlines() if line.startswith(f"| {dedup['name']} |")]
    assert "123,456" not in dedup_line  # not in the later report: from the full one
    assert "for cycle, base.queue" in table and "for the other rows" in table
