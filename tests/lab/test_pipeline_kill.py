"""A pipeline killed outright (SIGKILL) leaves nothing behind: its children stop and remove their files."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are found through /proc")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
            found.extend(int(x) for x in fh.read().split())
    return found


@pytest.mark.timeout(120)
def test_a_killed_pipeline_leaves_no_temp_dir(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "keyqueue.lab", "pipeline", "--backend", "memory", "--plain",
                             "--stats-interval", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    assert proc.stdout is not None
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("pipeline: triggers on"):
                break
        else:
            pytest.fail("the pipeline did not start:\n" + "".join(seen))
        assert list(tmp_path.glob("keyqueue-pipeline-*"))
        # Every child, opened as a pidfd before the kill: it becomes readable when that child has exited.
        pidfds = [os.pidfd_open(child) for child in _children(proc.pid)]
        assert pidfds
        proc.kill()
        proc.wait()
        for fd in pidfds:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "a child of the killed pipeline is still running after 60 s"
            os.close(fd)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert not list(tmp_path.glob("keyqueue-pipeline-*"))
