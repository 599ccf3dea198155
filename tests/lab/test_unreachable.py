"""``pipeline --kubeconfig`` with a cluster that does not answer: one line at once, quiet retries, a clean end."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from keyqueue.apiserver.testserver import kubeconfig_text
from keyqueue.lab.common import EXIT_INTERRUPTED

from .ptys import interrupt_after


@pytest.fixture
def dead_kubeconfig(tmp_path: Path) -> tuple[Path, str]:
    """A kubeconfig whose server is a loopback port nobody listens on, and that URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    path = tmp_path / "dead.yaml"
    path.write_text(kubeconfig_text(url), encoding="utf-8")
    return path, url


def test_an_unreachable_cluster_is_said_once_and_fails_at_the_deadline(dead_kubeconfig: tuple[Path, str]) -> None:
    path, url = dead_kubeconfig
    proc = subprocess.run([sys.executable, "-m", "keyqueue.lab", "pipeline", "--kubeconfig", str(path),
                           "--connect-timeout", "1s", "--plain"],
                          capture_output=True, text=True, timeout=60, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    lines = out.splitlines()
    assert lines[0] == f"pipeline: cannot reach {url} (connection refused); trying again quietly for up to 1s " \
                       "(Ctrl-C to stop)", out
    assert lines[1:] == [f"pipeline: could not start: cannot reach {url} (connection refused) within 1s"], out


def test_ctrl_c_while_the_cluster_does_not_answer(dead_kubeconfig: tuple[Path, str]) -> None:
    path, url = dead_kubeconfig
    status, out = interrupt_after(["pipeline", "--kubeconfig", str(path), "--plain"],
                                  lambda line: line.startswith("pipeline: cannot reach"), timeout=30)
    assert status == EXIT_INTERRUPTED, out
    assert f"SIGINT: stopped before {url} answered" in out and "Traceback" not in out


@pytest.mark.parametrize("content", [None, "clusters: [\n"])
def test_a_kubeconfig_that_cannot_be_read_is_one_line(tmp_path: Path, content: str | None,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from keyqueue.lab.__main__ import main

    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["pipeline", "--kubeconfig", str(path), "--plain"]) == 2
    captured = capsys.readouterr()
    text = (captured.out + captured.err).strip()
    assert text.startswith(f"pipeline: --kubeconfig {path}:") and "Traceback" not in text
    assert len(text.splitlines()) == 1, text
