"""Where a woken worker's wait goes: which threads ran while it waited, and how often the scheduler ran it.

The pipeline (:mod:`keyqueue.lab.pipeline`) times each key from the informer handler's ``add`` to a worker's
``get`` returning it. For an add that finds a worker free for it (blocked in ``get``, with no earlier key already
waiting for it), that gap is the time the add's wake-up (``Condition.notify``) takes to become the worker's next
bytecode. In CPython it has three parts: the
kernel waking the worker thread, the worker waiting for the GIL while other threads of the process run Python
code, and the worker waiting for a free core while other processes have both. :class:`HandoffProbe` tells them
apart without tracing, from clocks the kernel keeps anyway:

* the CPU clock of each watched thread (the trigger server's loop, the informer) and of the whole process
  (``CLOCK_PROCESS_CPUTIME_ID``), read at the add and again when ``get`` returns: how long each ran meanwhile (a
  thread that runs Python code holds the GIL; a few µs of it may be system calls made without it);
* the worker thread's own scheduler counters (``/proc/thread-self/schedstat``: time on a core, time runnable but
  waiting for a core, times put on a core), read when it enters ``get`` and when ``get`` returns. A worker blocked
  in ``get`` is put on a core once when notified; every further time counts a wake-up that found the GIL taken
  and slept again on the GIL's condition.

The clocks cost ~1 µs per read. Linux only for the scheduler counters (elsewhere :meth:`HandoffProbe.sched`
returns ``None`` and those columns stay empty).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Final

__all__ = ["CpuSnapshot", "HandoffProbe", "HandoffSample", "SchedSnapshot"]

_UNKNOWN: Final = -1

#: (trigger loop thread CPU ns, informer thread CPU ns, process CPU ns); -1 for a thread not known yet
CpuSnapshot = tuple[int, int, int]
#: this thread's (ns on a core, ns runnable waiting for a core, times put on a core)
SchedSnapshot = tuple[int, int, int]


@dataclass(frozen=True)
class HandoffSample:
    """One add → ``get`` gap of a worker that was free for the key, split up (ns; ``slices`` is a count, -1 when
    unknown)."""

    gap: int  #: from the add to ``get`` returning the key in the worker
    loop: int  #: the trigger server's loop thread was on a core for this long meanwhile (-1: unknown)
    informer: int  #: the informer thread (which made the add) was on a core for this long meanwhile
    others: int  #: every other thread of the process (the woken worker included), on a core meanwhile
    idle: int  #: no thread of this process was on a core: ``gap`` minus the process's CPU time meanwhile
    runqueue: int  #: the worker was runnable but waiting for a core (other processes had both), during its get
    slices: int  #: times the worker was put on a core during its get (1: notified once and ran)

    @classmethod
    def of(cls, gap: int, cpu0: CpuSnapshot, cpu1: CpuSnapshot, sched0: SchedSnapshot | None,
           sched1: SchedSnapshot | None) -> HandoffSample:
        loop = cpu1[0] - cpu0[0] if cpu0[0] != _UNKNOWN and cpu1[0] != _UNKNOWN else _UNKNOWN
        informer = cpu1[1] - cpu0[1] if cpu0[1] != _UNKNOWN and cpu1[1] != _UNKNOWN else _UNKNOWN
        process = cpu1[2] - cpu0[2]
        others = process - max(0, loop) - max(0, informer)
        if sched0 is not None and sched1 is not None:
            runqueue, slices = sched1[1] - sched0[1], sched1[2] - sched0[2]
        else:
            runqueue = slices = _UNKNOWN
        return cls(gap, loop, informer, others, gap - process, runqueue, slices)


def _read(clock: int | None) -> int:
    if clock is None:
        return _UNKNOWN
    try:
        return time.clock_gettime_ns(clock)
    except OSError:  # the thread has ended (EINVAL)
        return _UNKNOWN


class HandoffProbe:
    """The clocks of :mod:`keyqueue.lab.handoff` for one pipeline. Thread-safe; :meth:`close` releases the
    per-thread files (call it once the threads reading them are done)."""

    def __init__(self) -> None:
        self._loop_clock: int | None = None
        self._informer_clock: int | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._fds: list[int] = []
        self._closed = False
        self.linux = os.path.exists("/proc/thread-self/schedstat")

    def watch_loop_thread(self, ident: int) -> None:
        """Watch the CPU clock of the thread ``ident`` (``threading.get_ident()``) as the trigger loop's."""
        self._loop_clock = time.pthread_getcpuclockid(ident)

    def watch_informer_thread(self, ident: int) -> None:
        """Watch the CPU clock of the thread ``ident`` as the informer's."""
        self._informer_clock = time.pthread_getcpuclockid(ident)

    @property
    def informer_watched(self) -> bool:
        return self._informer_clock is not None

    def cpu(self) -> CpuSnapshot:
        """The watched threads' and the process's CPU time now, in ns (-1 for a thread not watched yet or that
        has ended)."""
        return _read(self._loop_clock), _read(self._informer_clock), time.process_time_ns()

    def sched(self) -> SchedSnapshot | None:
        """The calling thread's scheduler counters now (``None`` where the kernel does not provide them, or after
        :meth:`close`)."""
        if not self.linux or self._closed:
            return None
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None:
            with self._lock:
                if self._closed:
                    return None
                fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
                self._fds.append(fd)
            self._local.fd = fd
        try:
            fields = os.pread(fd, 128, 0).split()
            return int(fields[0]), int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):  # closed meanwhile, or an unexpected format
            return None

    def close(self) -> None:
        """Close the per-thread files; later :meth:`sched` calls return ``None``. Idempotent."""
        with self._lock:
            self._closed = True
            fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
