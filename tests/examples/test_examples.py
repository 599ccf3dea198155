"""examples/: each program runs as the docs say, reconciles every ConfigMap, stays under 60 lines, lints."""

from __future__ import annotations

import ast
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


def _discarded_cache_syncs(source: str) -> list[int]:
    """Lines where a ``wait_for_cache_sync`` result is thrown away (a statement of its own, awaited or not)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr):
            value = node.value.value if isinstance(node.value, ast.Await) else node.value
            calls = [c for c in ast.walk(value) if isinstance(c, ast.Call)]
            if any(isinstance(f, ast.Attribute) and f.attr == "wait_for_cache_sync"
                   for c in calls for f in (c.func, *c.args)):
                lines.append(node.lineno)
    return lines


def test_the_checker_finds_a_discarded_cache_sync() -> None:
    assert _discarded_cache_syncs("informer.wait_for_cache_sync(30)\n") == [1]
    assert _discarded_cache_syncs("async def f():\n    await asyncio.to_thread(i.wait_for_cache_sync, 30)\n") == [2]
    assert _discarded_cache_syncs("if not informer.wait_for_cache_sync(30):\n    raise SystemExit(1)\n") == []


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_no_example_runs_on_a_cache_that_did_not_sync(path: Path) -> None:
    """A copy of an example that ignores ``wait_for_cache_sync``'s result would reconcile on an empty cache."""
    assert _discarded_cache_syncs(path.read_text(encoding="utf-8")) == []
