"""Temp dirs that name their owner process, so that the dirs of a process that died (SIGKILL, ``os._exit``) are
removed by the next process that makes one with the same prefix.

A dir is ``<tmp>/<prefix><pid>-<random>``; :func:`owned_tempdir` first removes every ``<prefix><pid>-*`` whose
process no longer exists (a live process's dirs are never touched, whoever owns them).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile

__all__ = ["owned_tempdir", "pid_alive", "stale_tempdirs", "sweep_stale"]


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists (also one of another user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_tempdirs(prefix: str) -> list[str]:
    """The ``<prefix><pid>-*`` dirs in the temp dir whose owner process is gone."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[^/]*$")
    out = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), glob.escape(prefix) + "*")):
        match = pattern.search(path)
        if match and os.path.isdir(path) and not pid_alive(int(match.group(1))):
            out.append(path)
    return out


def sweep_stale(prefix: str) -> int:
    """Remove the stale dirs of ``prefix``; returns how many were removed."""
    removed = 0
    for path in stale_tempdirs(prefix):
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed += 1
    return removed


def owned_tempdir(prefix: str) -> str:
    """Sweep the stale dirs of ``prefix``, then create (mode 0700) and return ``<prefix><this pid>-<random>``."""
    sweep_stale(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
