"""examples/: each program runs as the docs say, reconciles every ConfigMap, stays under 60 lines, lints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["threaded_controller.py", "async_controller.py"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_reconciles_every_configmap(name: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                          timeout=90, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for i, name_ in enumerate(["demo-0", "demo-1", "demo-2"]):
        assert f"reconciled default/{name_}: example.com/keys={i + 1}" in lines, proc.stdout
    assert lines[-1] == "all ConfigMaps reconciled"
    assert len([line for line in lines if line.startswith("reconciled")]) == 3  # level-based: no second patch


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_short_and_shown_in_the_docs(name: str) -> None:
    path = ROOT / "examples" / name
    assert len(path.read_text(encoding="utf-8").splitlines()) < 60
    assert any(f"examples/{name}" in page.read_text(encoding="utf-8") for page in (ROOT / "docs").rglob("*.md"))


def test_examples_lint_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "examples"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
