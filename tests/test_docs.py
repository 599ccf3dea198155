"""The docs: every complete program they show runs, every name they show imports, every link in the README leads to
a file, and the README stays short. (`mkdocs build --strict`, which fails on broken links and references, runs in
scripts/test.sh.)"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"', re.M)

# Programs the docs include that tests/examples runs with its own checks of their output.
# The Widget operators run against a real cluster; their tests (included too) run them against the test API server.
RUN_BY_TESTS_EXAMPLES = {"examples/threaded_controller.py", "examples/async_controller.py",
                         "examples/greeting_operator.py", "examples/widget_operator.py",
                         "examples/widget_operator_aio.py"}


def _snippets() -> set[str]:
    return {m for page in PAGES for m in SNIPPET.findall(page.read_text(encoding="utf-8"))}


def _inline_blocks() -> list[tuple[Path, str]]:
    return [(page, block) for page in PAGES for block in FENCE.findall(page.read_text(encoding="utf-8"))
            if not SNIPPET.search(block)]


def test_complete_programs_in_the_docs_live_in_examples() -> None:
    """A complete program is included from examples/ (so that it runs below), never written inline."""
    inline = [str(page.relative_to(ROOT)) for page, block in _inline_blocks() if "__main__" in block]
    assert inline == []
    assert all(path.startswith("examples/") or path == "CHANGELOG.md" for path in _snippets())


PROGRAMS = sorted(p for p in _snippets() if p.endswith(".py") and p not in RUN_BY_TESTS_EXAMPLES)


def test_every_included_program_is_run_somewhere() -> None:
    assert _snippets() >= RUN_BY_TESTS_EXAMPLES
    assert PROGRAMS  # the guide's leader election, Redis and testing programs


def _plugin_args() -> list[str]:
    """The test programs use keyqueue's pytest plugin: loaded by pytest itself when the package is installed with
    its entry point, else named with ``-p`` (naming it as well would register it twice)."""
    installed = importlib.metadata.entry_points(group="pytest11", name="keyqueue")
    return [] if installed else ["-p", "keyqueue.testing.plugin"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_an_included_program_runs(program: str) -> None:
    path = ROOT / program
    argv = ([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), str(path)]
            if path.name.startswith("test_") else [sys.executable, str(path)])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


TESTING_GUIDE = DOCS / "guide" / "testing.md"
TESTING_GUIDE_BLOCKS = [block for page, block in _inline_blocks() if page == TESTING_GUIDE]


def test_the_testing_guide_has_inline_examples() -> None:
    assert len(TESTING_GUIDE_BLOCKS) >= 2  # eventually, and the queue with a fake clock


@pytest.mark.parametrize("number", range(len(TESTING_GUIDE_BLOCKS)))
def test_the_testing_guides_inline_examples_run(number: int) -> None:
    """The testing guide promises that every example on it runs: the programs it includes (run above), and these."""
    block = TESTING_GUIDE_BLOCKS[number]
    exec(compile(block, f"{TESTING_GUIDE}:block{number}", "exec"), {"__name__": "docs_example"})


def _shown_names() -> set[str]:
    names = set()
    for page in PAGES:
        names.update(re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M))
    for _, block in _inline_blocks():
        for module, imported in re.findall(r"^\s*from (keyqueue[\w.]*) import ([\w, ]+)$", block, re.M):
            names.update(f"{module}.{name.strip()}" for name in imported.split(","))
        names.update(re.findall(r"^\s*import (keyqueue[\w.]*)$", block, re.M))
    return names


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_every_name_the_docs_show_imports() -> None:
    names = _shown_names()
    assert {"keyqueue.Queue", "keyqueue.aio.Controller", "keyqueue.apiserver.TestAPIServer"} <= names
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name}: {exc}")
    assert missing == []


def test_the_readme_is_short_and_its_links_lead_to_files() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert links
    assert [link for link in links if not link.startswith("http") and not (ROOT / link).exists()] == []
