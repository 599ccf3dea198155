"""keyqueue._procs.die_with_parent: a test server's process gets SIGTERM when the process that started it dies, and
starting it runs no Python code in a forked child (which is what let gRPC's fork handlers abort etcd's start)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from keyqueue._procs import die_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A parent that starts `sleep 600` the way keyqueue starts etcd and redis-server, prints the sleeper's pid, then
# waits to be killed. With wrap=False it starts it plainly: the control, whose sleeper must outlive it.
_PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from keyqueue._procs import die_with_parent
    argv, preexec = (die_with_parent(["sleep", "600"]) if sys.argv[1] == "wrap" else (["sleep", "600"], None))
    child = subprocess.Popen(argv, preexec_fn=preexec)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has died
    except FileNotFoundError:
        return False


def _sleeper_after_parent_killed(mode: str, wait_s: float) -> tuple[int, bool]:
    """Start the parent, SIGKILL it, and say whether its sleeper is still alive after waiting up to ``wait_s`` for
    it to exit. The kernel sends the parent-death signal while the parent exits, so it has been sent when
    ``wait()`` returns; the sleeper's exit follows as soon as it is scheduled."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, mode], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + wait_s
    while _alive(pid) and time.monotonic() < deadline:  # bounded wait for an event (the sleeper's exit)
        time.sleep(0.01)
    return pid, _alive(pid)


def test_the_child_dies_with_its_parent() -> None:
    pid, alive = _sleeper_after_parent_killed("wrap", wait_s=10.0)
    assert not alive, f"sleep {pid} outlived the parent that started it"


def test_control_a_plain_child_outlives_its_parent() -> None:
    pid, alive = _sleeper_after_parent_killed("plain", wait_s=0.5)
    try:
        assert alive, "the control's sleeper died: the test above could not tell die_with_parent from doing nothing"
    finally:
        if alive:
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is not installed")
def test_with_setpriv_no_python_code_runs_in_the_forked_child() -> None:
    argv, preexec = die_with_parent(["etcd", "--name", "x"])
    assert preexec is None  # so Popen may vfork: no fork handlers, no Python between fork and exec
    assert argv[-4:] == ["sh", "etcd", "--name", "x"] and "--pdeathsig" in argv


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is not installed")
def test_a_child_whose_parent_is_gone_before_the_signal_is_set_does_not_run(tmp_path: Path) -> None:
    """The race setpriv alone leaves open (the parent dies between the fork and the prctl, and no signal ever
    comes): the wrapped command runs only if the process that asked for it is still its parent. Here a middleman
    process starts it, which is what the child of a dead parent sees too (its parent is no longer the asker)."""
    marker = tmp_path / "ran"
    argv, _ = die_with_parent(["touch", str(marker)])
    via_middleman = subprocess.run([sys.executable, "-c", "import subprocess, sys; "
                                    "sys.exit(subprocess.run(sys.argv[1:]).returncode)", *argv], check=False)
    assert via_middleman.returncode == 1 and not marker.exists()
    direct = subprocess.run(argv, check=False)  # the control: started by the asker itself, it runs
    assert direct.returncode == 0 and marker.exists()


def test_outside_the_main_thread_nothing_is_added() -> None:
    import threading

    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(die_with_parent(["true"])))
    t.start()
    t.join()
    assert out == [(["true"], None)]  # the signal would follow that thread's exit, not the process's


_ATFORK = textwrap.dedent("""
    import os, subprocess, sys
    from keyqueue._procs import die_with_parent
    os.register_at_fork(after_in_child=lambda: os.write(1, b"fork handler ran in the child\\n"))
    argv, preexec = die_with_parent(["true"])
    if sys.argv[1] == "control":
        preexec = lambda: None  # what die_with_parent_hook's preexec_fn implies: fork(), handlers and all
    subprocess.run(argv, preexec_fn=preexec, start_new_session=True, check=True)
""")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is not installed")
@pytest.mark.parametrize("mode", ["wrap", "control"])
def test_no_fork_handler_runs_in_the_child(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", _ATFORK, mode], capture_output=True, text=True, check=True).stdout
    assert ("fork handler ran in the child" in out) == (mode == "control"), out
