"""``keyqueue-lab race --backend redis``: a multi-process same-key race over a Redis queue, with a detector that
does not trust the queue.

Worker *processes* (each with its own handle and worker threads) take keys and hold each one for a while with a
GIL-releasing sleep; producer threads add keys as fast as they can. The detector is the kernel: a worker starting
a key creates ``<dir>/<key>`` with ``O_CREAT | O_EXCL`` and removes it when it stops, so a second worker starting
the same key while the first holds it finds the file there: a violation, whichever process either runs in.

With :class:`keyqueue.redis.Queue` the count must be 0. The control is a plain Redis list (``RPUSH`` / ``BLPOP``:
no dirty set, no processing set, no ``done``): it must report violations, or the zero proves nothing. The final
check: every key was started after its last add (nothing lost), as seen by ``time.monotonic`` (one clock for all
processes of a host).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from keyqueue.lab.common import write_json

__all__ = ["RedisRaceResult", "run_redis_race"]


@dataclass(frozen=True, slots=True)
class RedisRaceResult:
    control: bool
    processes: int
    workers: int
    producers: int
    adds: int
    keys: int
    starts: int  #: keys started by workers (all processes)
    violations: int  #: starts of a key another worker (any process) was holding
    lost: int  #: keys whose last start came before their last add (or that were never started)
    seconds: float

    @property
    def as_expected(self) -> bool:
        """keyqueue: no violation and nothing lost; control: at least one violation."""
        return self.violations > 0 if self.control else self.violations == 0 and self.lost == 0

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "as_expected": self.as_expected}


def _worker_process(url: str, name: str, control: bool, workers: int, hold: float, marker_dir: str) -> None:
    """One worker process (``python -m keyqueue.lab.race_redis worker ...``): says ``ready`` on stdout, works until
    its stdin closes, then prints its counts as one JSON line."""
    import redis

    from keyqueue.redis import Queue

    starts = 0
    violations = 0
    last_start: dict[str, float] = {}
    lock = threading.Lock()
    queue = None if control else Queue(name, url=url, lease=60.0)
    plain = redis.Redis.from_url(url, decode_responses=True) if control else None
    list_key = f"kq-race-control:{{{name}}}"

    def hold_key(key: str) -> None:
        nonlocal starts, violations
        now = time.monotonic()
        path = os.path.join(marker_dir, key)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            mine = False
        else:
            os.close(fd)
            mine = True
        time.sleep(hold)  # releases the GIL: other threads and processes run meanwhile
        if mine:
            os.unlink(path)
        with lock:
            starts += 1
            violations += not mine
            if now > last_start.get(key, 0.0):
                last_start[key] = now

    def work() -> None:
        while not stop.is_set():
            if queue is not None:
                try:
                    key = queue.get(timeout=0.2)
                except TimeoutError:
                    continue
                try:
                    hold_key(key)
                finally:
                    queue.done(key)
            else:
                assert plain is not None
                popped = plain.blpop([list_key], timeout=0.2)
                if popped is not None:
                    hold_key(str(popped[1]))

    stop = threading.Event()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    stop.set()
    for t in threads:
        t.join()
    if queue is not None:
        queue.close()
    print(json.dumps([starts, violations, last_start]), flush=True)


def _spawn_worker(url: str, name: str, control: bool, workers: int, hold: float,
                  marker_dir: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "keyqueue.lab.race_redis", "worker", url, name, "1" if control else "0", str(workers),
            repr(hold), marker_dir]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def run_redis_race(
    url: str,
    *,
    processes: int = 4,
    workers: int = 4,
    producers: int = 8,
    adds: int = 320_000,
    keys: int = 64,
    hold: float = 100e-6,
    control: bool = False,
    batch: int = 200,
    timeout: float = 600.0,
) -> RedisRaceResult:
    """Run the race against the Redis at ``url`` (see the module docstring) and return the counts. Each producer
    sends its adds in pipelined batches of ``batch`` (:meth:`keyqueue.redis.Queue.add_many`). The queue's (or
    control list's) state is deleted afterwards. Raises ``TimeoutError`` if the workers do not finish the work
    within ``timeout`` seconds after the producers stopped."""
    import redis

    from keyqueue.redis import Queue

    for what, value in (("processes", processes), ("workers", workers), ("producers", producers), ("keys", keys),
                        ("batch", batch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    name = f"race-{uuid.uuid4().hex[:8]}"
    marker_dir = tempfile.mkdtemp(prefix="keyqueue-race-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    procs: list[subprocess.Popen[str]] = []
    handle = Queue(name, url=url)
    plain = redis.Redis.from_url(url, decode_responses=True)
    list_key = f"kq-race-control:{{{name}}}"
    last_add: dict[str, float] = {}
    add_lock = threading.Lock()
    results: list[Any] = []
    try:
        procs = [_spawn_worker(url, name, control, workers, hold, marker_dir) for _ in range(processes)]
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a race worker process did not start")
        per_producer = [adds // producers + (1 if i < adds % producers else 0) for i in range(producers)]
        started = time.monotonic()

        def produce(pid: int, n: int) -> None:
            # Adds go in pipelined batches (add_many; RPUSH of many values for the control). Each key's add time is
            # taken before its batch is sent: a worker's start must come after it.
            local: dict[str, float] = {}
            q = Queue(name, url=url) if not control else None
            rng = random.Random(pid)  # keys in a random order: neighbours in a batch collide as often as by chance
            for first in range(0, n, batch):
                batch_keys = [f"k{rng.randrange(keys)}" for _ in range(min(batch, n - first))]
                sent = time.monotonic()
                for key in batch_keys:
                    local[key] = sent
                if q is not None:
                    q.add_many(batch_keys)
                else:
                    plain.rpush(list_key, *batch_keys)
            if q is not None:
                q.close()
            with add_lock:
                for k, t in local.items():
                    last_add[k] = max(t, last_add.get(k, 0.0))

        threads = [threading.Thread(target=produce, args=(i, n)) for i, n in enumerate(per_producer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + timeout
        while True:  # wait until the workers have taken and finished everything
            if control:
                busy = plain.llen(list_key) > 0
            else:
                state = handle.inspect()
                busy = state["dirty"] > 0 or state["processing"] > 0
            if not busy:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers did not finish within {timeout} s")
            time.sleep(0.01)
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()  # stop
        for p in procs:
            assert p.stdout is not None
            results.append(json.loads(p.stdout.readline()))
            p.wait(30)
        seconds = time.monotonic() - started
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        handle.delete()
        handle.close()
        plain.delete(list_key)
        plain.close()
        shutil.rmtree(marker_dir, ignore_errors=True)
    starts = sum(r[0] for r in results)
    violations = sum(r[1] for r in results)
    last_start: dict[str, float] = {}
    for r in results:
        for k, t in r[2].items():
            last_start[k] = max(t, last_start.get(k, 0.0))
    lost = sum(1 for k, t in last_add.items() if last_start.get(k, 0.0) < t)
    return RedisRaceResult(control, processes, workers, producers, adds, keys, starts, violations, lost, seconds)


def run_from_args(args: Any, out: Any) -> int:
    """``keyqueue-lab race --backend redis``: exit status 0 when the expected outcome held, 1 if not, 2 for bad
    options. ``--workers`` is the total over the ``--processes`` worker processes."""
    from keyqueue.redis import RedisServer

    if args.processes < 1 or args.workers < args.processes:
        print(f"race: need --processes >= 1 and --workers >= --processes, got {args.processes}, {args.workers}",
              file=out)
        return 2
    url = args.redis_url or os.environ.get("KEYQUEUE_REDIS_URL")
    server = None if url else RedisServer().start()
    url = url or (server.url if server is not None else "")
    per = args.workers // args.processes
    what = "control: a plain Redis list" if args.control else "keyqueue.redis.Queue"
    print(f"race on Redis {url} ({what}): {args.processes} processes × {per} workers, {args.producers} producers, "
          f"{args.adds:,} adds onto {args.keys} keys, hold {args.hold * 1e6:g} µs (sleep)", file=out, flush=True)
    try:
        result = run_redis_race(url, processes=args.processes, workers=per, producers=args.producers, adds=args.adds,
                                keys=args.keys, hold=args.hold, control=args.control)
    except ValueError as exc:
        print(f"race: {exc}", file=out)
        return 2
    finally:
        if server is not None:
            server.stop()
    print(f"started {result.starts:,} keys in {result.seconds:.1f} s; same-key violations: {result.violations:,}; "
          f"keys not processed after their last add: {result.lost}", file=out)
    if result.control:
        verdict = ("as expected: the detector catches a plain list handing one key to two workers" if result.as_expected
                   else "NOT as expected: the control showed no violation, so the detector proves nothing")
    else:
        verdict = ("as expected: no key was ever at two workers at once, nothing was lost" if result.as_expected
                   else "NOT as expected")
    print(verdict, file=out)
    write_json(args.json, result.summary())
    return 0 if result.as_expected else 1


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"] or len(sys.argv) != 8:
        raise SystemExit("usage: python -m keyqueue.lab.race_redis worker URL NAME CONTROL WORKERS HOLD DIR")
    _worker_process(sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
