"""The hand-off probe of the pipeline's stage table (keyqueue.lab.handoff): its arithmetic and its clocks."""

from __future__ import annotations

import threading

import pytest

from keyqueue.lab.handoff import HandoffProbe, HandoffSample


def test_sample_splits_the_gap() -> None:
    s = HandoffSample.of(1_000, (100, 200, 5_000), (400, 250, 5_600), (0, 10, 7), (30, 60, 9))
    assert (s.gap, s.loop, s.informer) == (1_000, 300, 50)
    assert s.others == 600 - 300 - 50  # the process's CPU meanwhile, less the two watched threads
    assert s.idle == 1_000 - 600  # nobody of this process on a core
    assert (s.runqueue, s.slices) == (50, 2)


def test_sample_with_unknown_parts() -> None:
    s = HandoffSample.of(1_000, (-1, 200, 5_000), (-1, 260, 5_100), None, None)
    assert s.loop == -1 and s.informer == 60 and s.others == 40
    assert s.runqueue == -1 and s.slices == -1


def test_cpu_clocks_of_a_watched_thread_advance_only_while_it_runs() -> None:
    probe = HandoffProbe()
    assert probe.cpu()[:2] == (-1, -1)  # nothing watched yet
    started, spin, stop = threading.Event(), threading.Event(), threading.Event()
    ident: list[int] = []

    def body() -> None:
        ident.append(threading.get_ident())
        started.set()
        spin.wait()
        while not stop.is_set():  # on a core until told to stop
            sum(range(100))

    t = threading.Thread(target=body, daemon=True)
    t.start()
    started.wait(10)
    probe.watch_loop_thread(ident[0])
    probe.watch_informer_thread(threading.get_ident())
    assert probe.informer_watched
    blocked0 = probe.cpu()[0]
    blocked1 = probe.cpu()[0]
    assert blocked1 - blocked0 < 1_000_000  # blocked in Event.wait: (almost) no CPU between two reads
    spin.set()
    before = probe.cpu()
    for _ in range(200):
        if probe.cpu()[0] - before[0] > 2_000_000:
            break
        threading.Event().wait(0.005)
    after = probe.cpu()
    stop.set()
    t.join(10)
    assert after[0] - before[0] > 2_000_000  # the spinning thread's clock moved
    assert after[2] - before[2] > 2_000_000  # and the process's
    # Once the kernel has reaped the thread its clock is gone: -1, never an exception (join can return first).
    last = probe.cpu()[0]
    assert last == -1 or last >= after[0]


@pytest.mark.skipif(not HandoffProbe().linux, reason="needs /proc/thread-self/schedstat (Linux)")
def test_sched_counts_the_times_a_thread_was_put_on_a_core() -> None:
    probe = HandoffProbe()
    results: list[tuple[int, int, int] | None] = []
    go, woken = threading.Event(), threading.Event()

    def body() -> None:
        results.append(probe.sched())
        for _ in range(3):  # block three times: each wake-up puts the thread on a core again
            go.wait()
            go.clear()
            woken.set()
        results.append(probe.sched())

    t = threading.Thread(target=body, daemon=True)
    t.start()
    for _ in range(3):
        woken.clear()
        go.set()
        assert woken.wait(10)
    t.join(10)
    first, last = results
    assert first is not None and last is not None
    assert last[2] - first[2] >= 1  # put on a core at least once more (three times unless it never blocked)
    assert last[0] >= first[0] and last[1] >= first[1]
    probe.close()
    assert probe.sched() is None  # closed: no file is read any more
    probe.close()  # idempotent
