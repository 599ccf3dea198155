"""``keyqueue-lab crash``: worker processes share a Redis queue; one is SIGKILLed in the middle of a key.

The timeline shows the kill, the dead worker's lease running out, and the key handed to another worker (the
redelivery). The final check: every key was processed after its last add, so the crash lost nothing. The Redis is
``--redis-url`` (default ``$KEYQUEUE_REDIS_URL``) or a fresh :class:`~keyqueue.redis.RedisServer`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from keyqueue.lab.common import add_json_argument, format_duration, human_stream, parse_duration, write_json

__all__ = ["add_arguments", "run", "run_crash"]

# One worker process: prints one JSON event per line (ready, got, done, reclaimed) and works until stdin closes.
_WORKER = r"""
import json, logging, sys, threading, time
from keyqueue.redis import Queue
name, url, wid, lease, work = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
out = threading.Lock()
def emit(**event):
    event["t"] = time.monotonic(); event["worker"] = wid
    with out:
        print(json.dumps(event), flush=True)
class Reclaims(logging.Handler):
    def emit(self, record):
        if "ran out" in record.getMessage():
            emit(event="reclaimed", message=record.getMessage())
logging.getLogger("keyqueue.redis").addHandler(Reclaims())
logging.getLogger("keyqueue.redis").propagate = False
q = Queue(name, url=url, lease=lease)
stop = threading.Event()
def work_loop():
    while not stop.is_set():
        try:
            key = q.get(timeout=0.2)
        except TimeoutError:
            continue
        emit(event="got", key=key, token=q.fencing_token(key))
        time.sleep(work)
        q.done(key)
        emit(event="done", key=key)
threads = [threading.Thread(target=work_loop, daemon=True) for _ in range(2)]
for t in threads: t.start()
emit(event="ready")
sys.stdin.read()
stop.set()
for t in threads: t.join()
q.close()
"""


def run_crash(url: str, *, workers: int = 3, keys: int = 12, rounds: int = 3, lease: float = 2.0,
              work: float = 0.05, write: Any = print) -> dict[str, Any]:
    """Run the scenario against ``url``; ``write`` gets the timeline lines. Returns the summary (``ok`` is the
    final check: the killed key was handed out again and every key was processed after its last add)."""
    from keyqueue.redis import Queue

    if workers < 2:
        raise ValueError(f"crash needs at least 2 worker processes, got {workers}")
    name = f"crash-{uuid.uuid4().hex[:8]}"
    q = Queue(name, url=url)
    events: list[dict[str, Any]] = []
    lock = threading.Lock()
    clock = {"t0": time.monotonic()}
    procs: dict[str, subprocess.Popen[str]] = {}
    readers: list[threading.Thread] = []
    ready = threading.Semaphore(0)
    first_got: dict[str, threading.Event] = {}

    def show(event: dict[str, Any]) -> None:
        t = event["t"] - clock["t0"]
        kind = event["event"]
        who = f"worker-{event['worker']}"
        if kind == "got":
            write(f"t={t:6.3f}s  {who} got {event['key']} (lease token {event['token']})")
        elif kind == "done":
            write(f"t={t:6.3f}s  {who} done {event['key']}")
        elif kind == "killed":
            write(f"t={t:6.3f}s  {who} SIGKILLed while holding {event['key']}")
        elif kind == "reclaimed":
            write(f"t={t:6.3f}s  {who}: {event['message']}")
        elif kind == "add":
            write(f"t={t:6.3f}s  producer added round {event['round']} of {keys} keys")

    def read(wid: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "ready":
                ready.release()
                continue
            with lock:
                events.append(event)
            if event["event"] == "got":
                first_got[wid].set()
            show(event)

    try:
        for i in range(1, workers + 1):
            wid = str(i)
            first_got[wid] = threading.Event()
            procs[wid] = subprocess.Popen(
                [sys.executable, "-c", _WORKER, name, url, wid, repr(lease), repr(work)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            reader = threading.Thread(target=read, args=(wid, procs[wid]), daemon=True)
            reader.start()
            readers.append(reader)
        for _ in procs:
            if not ready.acquire(timeout=30):
                raise RuntimeError("a worker process did not start")
        clock["t0"] = time.monotonic()  # the timeline starts when every worker is ready
        last_add: dict[str, float] = {}
        victim = "1"
        killed: dict[str, Any] | None = None
        for r in range(rounds):
            for k in range(keys):
                key = f"obj-{k}"
                last_add[key] = time.monotonic()
                q.add(key)
            with lock:
                events.append({"event": "add", "round": r + 1, "t": time.monotonic(), "worker": "-"})
            show(events[-1])
            if r == 0:
                if not first_got[victim].wait(30):
                    raise RuntimeError("the victim worker got no key")
                proc = procs[victim]
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                with lock:
                    mine = [e for e in events if e["worker"] == victim and e["event"] in ("got", "done")]
                held = {e["key"] for e in mine if e["event"] == "got"} - {e["key"] for e in mine
                                                                        if e["event"] == "done"}
                killed = {"event": "killed", "worker": victim, "t": time.monotonic(),
                          "key": ", ".join(sorted(held)) or "(nothing)", "keys": sorted(held)}
                with lock:
                    events.append(killed)
                show(killed)
        deadline = time.monotonic() + lease * 3 + 30
        while True:  # until everything was processed (the dead worker's keys come back after its lease)
            state = q.inspect()
            if state["dirty"] == 0 and state["processing"] == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the queue did not drain: {state}")
            time.sleep(0.05)
        state = q.inspect()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.close()
        for proc in procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in readers:
            reader.join(5)
        q.delete()
        q.close()
    assert killed is not None
    last_start: dict[str, float] = {}
    for e in events:
        if e["event"] == "got":
            last_start[e["key"]] = max(e["t"], last_start.get(e["key"], 0.0))
    late = sorted(k for k, t in last_add.items() if last_start.get(k, 0.0) < t)
    redelivered = [k for k in killed["keys"]
                   if any(e["event"] == "got" and e["key"] == k and e["t"] > killed["t"] for e in events)]
    ok = not late and len(redelivered) == len(killed["keys"])
    write(f"leases that ran out: {state['expired']}; killed worker's keys handed out again: "
          f"{', '.join(redelivered) or '(none)'}")
    write("final check: every key was processed after its last add" if not late
          else f"final check FAILED: not processed after their last add: {', '.join(late)}")
    return {"queue": name, "workers": workers, "keys": keys, "rounds": rounds, "lease_s": lease,
            "killed_keys": killed["keys"], "redelivered": redelivered, "expired": state["expired"],
            "not_processed_after_last_add": late, "ok": ok}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=3, help="worker processes, 2 threads each (default 3)")
    parser.add_argument("--keys", type=int, default=12, help="distinct keys (default 12)")
    parser.add_argument("--rounds", type=int, default=3, help="times every key is added (default 3)")
    parser.add_argument("--lease", type=parse_duration, default=2.0, help="lease length (default 2s)")
    parser.add_argument("--work", type=parse_duration, default=0.05, help="time a worker holds a key (default 50ms)")
    parser.add_argument("--redis-url", default=os.environ.get("KEYQUEUE_REDIS_URL"),
                        help="an existing Redis (default $KEYQUEUE_REDIS_URL, else a fresh redis-server)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit status 0 when the final check held, 1 otherwise, 2 for bad options."""
    out = human_stream(args)

    def write(line: str) -> None:
        print(line, file=out, flush=True)

    logging.getLogger("keyqueue.redis").setLevel(logging.ERROR)  # the timeline reports reclaims itself
    from keyqueue.redis import RedisServer

    server = None if args.redis_url else RedisServer().start()
    url = args.redis_url or (server.url if server is not None else "")
    try:
        write(f"crash: {args.workers} worker processes on Redis {url}, {args.keys} keys × {args.rounds} rounds, "
              f"lease {format_duration(args.lease)}; worker-1 is SIGKILLed while it holds a key")
        try:
            summary = run_crash(url, workers=args.workers, keys=args.keys, rounds=args.rounds, lease=args.lease,
                                work=args.work, write=write)
        except ValueError as exc:
            write(f"crash: {exc}")
            return 2
    finally:
        if server is not None:
            server.stop()
    write_json(args.json, summary)
    return 0 if summary["ok"] else 1
