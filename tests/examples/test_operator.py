"""examples/greeting_operator.py: the README's operator for a custom resource runs and does what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "greeting_operator.py"


@pytest.mark.parametrize("backend", ["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def test_operator_writes_status_and_manages_its_finalizer(backend: str) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE), backend], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for line in ("reconciled default/alice: generation 1: Hello, Alice!",
                 "reconciled default/bob: generation 1: Hello, Bob!",
                 "reconciled default/bob: generation 2: Hello, Robert!"):
        assert line in lines, proc.stdout + proc.stderr
    assert lines.count("cleaned up default/alice") == 1, proc.stdout + proc.stderr
    assert "events: CleanedUp Greeted Greeted Greeted" in lines, proc.stdout + proc.stderr
    assert lines[-1] == "operator done", proc.stdout + proc.stderr
    # level-based: one status write per generation, none for the finalizer's own changes
    assert len([line for line in lines if line.startswith("reconciled")]) == 3, proc.stdout + proc.stderr


def test_operator_is_shown_in_the_docs() -> None:
    assert "examples/greeting_operator.py" in (ROOT / "docs" / "guide" / "operator.md").read_text(encoding="utf-8")
