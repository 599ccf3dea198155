from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types

import pytest

from keyqueue.lab import format_duration, parse_duration
from keyqueue.lab.__main__ import main
from keyqueue.lab.commands import COMMANDS, Command, CommandUnavailable, register


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5ms", 0.005), ("20us", 20e-6), ("20µs", 20e-6), ("10s", 10.0), ("0.5", 0.5), ("1.5m", 90.0),
     ("250ns", 250e-9), (" 3 s ", 3.0), ("1e-3", 0.001)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ms", "-5ms", "5 parsecs", "1e999", "nan", "5msx"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.005, "5ms"), (20e-6, "20µs"), (1.28, "1.28s"), (655.36, "10m55.36s"), (1000.0, "16m40s"), (0.0, "0s"),
     (float("inf"), "inf")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("run", "dedup", "race", "backoff", "drain", "apiserver", "pipeline", "load"):
        assert f"  {name}" in out


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_bad_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "--hold", "soon"]) == 2
    assert "not a duration" in capsys.readouterr().err


def test_subcommand_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "--help"]) == 0
    assert "--control" in capsys.readouterr().out


def test_missing_module_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(COMMANDS, "ghost", Command("ghost", "keyqueue.lab._no_such_module", "not there"))
    assert main(["ghost"]) == 2
    err = capsys.readouterr().err
    assert "'ghost'" in err and "keyqueue.lab._no_such_module" in err


def test_missing_dependency_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # A command module that exists but imports a package that is not installed.
    monkeypatch.setitem(sys.modules, "kq_lab_test_missing_dep", None)  # importing it raises ModuleNotFoundError
    module = types.ModuleType("kq_lab_test_wrapper")
    monkeypatch.setitem(sys.modules, "kq_lab_test_wrapper", module)

    def failing_import(name: str, package: str | None = None) -> types.ModuleType:
        raise ModuleNotFoundError("No module named 'kq_lab_test_missing_dep'", name="kq_lab_test_missing_dep")

    monkeypatch.setattr("keyqueue.lab.commands.importlib.import_module", failing_import)
    with pytest.raises(CommandUnavailable, match="needs the Python package 'kq_lab_test_missing_dep'"):
        Command("wrapper", "kq_lab_test_wrapper", "").load()


def test_registered_command_runs_with_its_own_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    module = types.ModuleType("kq_lab_test_extra")

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--port", type=int, default=0)

    def run(args: argparse.Namespace) -> int:
        seen["port"] = args.port
        return 7

    module.add_arguments = add_arguments  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kq_lab_test_extra", module)
    register(Command("extra", "kq_lab_test_extra", "an extension"))
    try:
        assert main(["extra", "--port", "8080"]) == 7
    finally:
        del COMMANDS["extra"]
    assert seen == {"port": 8080}


def test_module_without_entry_points_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kq_lab_test_empty", types.ModuleType("kq_lab_test_empty"))
    with pytest.raises(CommandUnavailable, match="add_arguments"):
        Command("empty", "kq_lab_test_empty", "").load()


def test_python_dash_m_and_json_to_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "keyqueue.lab", "dedup", "--adds-a", "1000", "--json", "-"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # stdout holds only the JSON; the text went to stderr
    assert summary["part_a_len"] == 1
    assert "len(q)" in proc.stderr


def test_options_without_a_command_run_the_firehose(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--duration", "0.2s", "--rate", "1000", "--keys", "2", "--quiet", "--plain"]) == 0
    assert "[STATS] final" in capsys.readouterr().out
