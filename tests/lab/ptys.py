"""Run the lab in a pseudo-terminal of a given size, as a user's terminal would (live view, wrapping)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable

import pytest

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def run_in_pty(argv: list[str], *, columns: int = 80, rows: int = 40, timeout: float = 60.0) -> tuple[int, str]:
    """``python -m keyqueue.lab ARGV`` with its stdin/stdout/stderr on a pty of ``columns`` × ``rows``; returns
    (exit status, the output with terminal escape sequences and carriage returns removed). Reads until the
    child closes the terminal (it exits), so no sleeping is involved; ``timeout`` bounds a silent child."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([sys.executable, "-m", "keyqueue.lab", *argv], stdin=slave, stdout=slave, stderr=slave,
                            env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        status = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return status, _ESCAPE.sub("", b"".join(chunks).decode("utf-8", "replace"))


# ``python -m keyqueue.lab`` with SIGINT raising KeyboardInterrupt, as in a terminal's foreground job: a test run
# started in the background by a non-interactive shell ignores SIGINT, and its children would inherit that.
_AS_A_TERMINAL_JOB = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "runpy.run_module('keyqueue.lab', run_name='__main__', alter_sys=True)")


def interrupt_after(argv: list[str], ready: Callable[[str], bool], timeout: float = 90.0,
                    env: dict[str, str] | None = None,
                    before: Callable[[list[str]], None] | None = None) -> tuple[int, str]:
    """Start the lab in its own session, wait (by reading its output) for a line that says the run is under way,
    call ``before(lines so far)`` if given, send SIGINT to the whole process group (as a terminal's Ctrl-C does),
    return (status, all output). ``env``: variables added to this process's environment."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen([sys.executable, "-c", _AS_A_TERMINAL_JOB, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if ready(line):
                break
        else:
            pytest.fail("the run ended before it was under way:\n" + "".join(seen))
        if before is not None:
            before(seen)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(seen) + rest
