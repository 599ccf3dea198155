"""Rows for the Redis-backed queue (keyqueue.redis), against the physical limit measured in the same run.

The limit is one Redis round trip from this process (``PING``): every keyqueue operation is one script in one round
trip, so ``add``, ``get``/``done`` and a dedup ``add`` should each cost about one ``PING`` (target ≤ 1.3x). The
baseline is the obvious Redis work queue (``benchmarks.naive``-style, on Redis: a list plus a set, several round
trips per operation and no atomicity across them). Throughput runs 1, 2 and 4 worker processes, each cycling its
own keys (add + get + done) for a fixed time. The server is ``$KEYQUEUE_REDIS_URL`` or a ``RedisServer`` started
on first use and stopped at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from benchmarks.harness import Case, Check, Context, Measurement, Skip, time_batch, time_inline

G_REDIS = "keyqueue.redis (one Redis round trip is the limit)"

_server: dict[str, Any] = {}


def _url() -> str:
    import os

    if "url" not in _server:
        env = os.environ.get("KEYQUEUE_REDIS_URL")
        if env:
            _server["url"] = env
        else:
            from keyqueue.redis import RedisServer

            server = RedisServer().start()
            atexit.register(server.stop)
            _server["url"] = server.url
    return str(_server["url"])


def _available() -> Skip | None:
    try:
        import redis  # noqa: F401

        _url()
    except Exception as e:
        return Skip(f"no Redis: {type(e).__name__}: {e}")
    return None


def _queue(cls_name: str = "Queue") -> Any:
    import keyqueue.redis

    return getattr(keyqueue.redis, cls_name)(f"bench-{uuid.uuid4().hex[:8]}", url=_url())


_PING = b"*1\r\n$4\r\nPING\r\n"


def _lean_ping(client: Any) -> Any:
    """A PING on the path keyqueue's calls take (``keyqueue.redis._wire.SyncWire``: a connection held by the caller,
    ``send_packed_command`` + ``read_response``): the lighter of the two ways to make one round trip, so the honest
    limit. ``client.ping()`` goes through ``execute_command`` (pool checkout, retry closure, observability hooks,
    response callback): ~20 µs more client CPU per call on redis-py 8.1 (the ``redis.ping_client`` row)."""
    from keyqueue.redis._wire import SyncWire

    wire = SyncWire(client)
    return lambda: wire.call(_PING)


def _ping(ctx: Context) -> Measurement | Skip:
    if (skip := _available()) is not None:
        return skip
    import redis

    client = redis.Redis.from_url(_url())
    try:
        m = time_inline(ctx, "ping()", globals={"ping": _lean_ping(client)})
        m.note = "PING on keyqueue's own client path (SyncWire): one round trip, nothing else"
        return m
    finally:
        client.close()


def _ping_client(ctx: Context) -> Measurement | Skip:
    if (skip := _available()) is not None:
        return skip
    import redis

    client = redis.Redis.from_url(_url())
    try:
        return time_inline(ctx, "ping()", globals={"ping": client.ping})
    finally:
        client.close()


def _evalsha(keys: int, args: int) -> Any:
    # The floor of a script call: EVALSHA of a script that only returns, with this many KEYS and ARGV, on the same
    # client path as keyqueue's calls and the PING row.
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        import redis

        from keyqueue.redis._wire import Packer, SyncWire

        client = redis.Redis.from_url(_url())
        try:
            sha = client.script_load("return 1")
            names = [f"kq:{{bench}}:{i}" for i in range(keys)] + ["x" * 12] * args
            packed = Packer("").command("EVALSHA", sha, keys, *names)
            return time_inline(ctx, "call(packed)", globals={"call": SyncWire(client).call, "packed": packed})
        finally:
            client.close()
    return run


def _block_ratio(blocks: int, first: Any, second: Any) -> float:
    """The median over ``blocks`` blocks of (``second(b)``'s time / ``first(b)``'s time), each pair run back to back:
    two moments a few milliseconds apart, so load from elsewhere on the machine falls on both sides."""
    ratios = []
    for b in range(blocks):
        t0 = time.perf_counter()
        first(b)
        t1 = time.perf_counter()
        second(b)
        ratios.append((time.perf_counter() - t1) / (t1 - t0))
    return statistics.median(ratios)


def _paired(ctx: Context, m: Measurement, run_block: Any, per: int) -> Measurement:
    """Add to ``m`` the ratio measured block by block against PING: ``per`` PINGs, then ``per`` operations
    (``run_block(b)`` runs block ``b``'s), many times; the median over blocks of (operations' time / PINGs' time)
    (:func:`_block_ratio`); the row's own ratio compares medians of separate timings. Reported in the note and in
    ``extra``."""
    import redis

    blocks = ctx.size(40, 4)
    with contextlib.closing(redis.Redis.from_url(_url(), decode_responses=True)) as client:
        ping = _lean_ping(client)

        def pings(_: int) -> None:
            for _ in range(per):
                ping()
        paired = _block_ratio(blocks, pings, run_block)
    m.extra["paired_ratio"] = paired
    m.note = (m.note + "; " if m.note else "") + (
        f"paired with PING block by block ({blocks} × {per} calls each): {paired:.2f}x (median)")
    return m


_PER_BLOCK = 50  # calls per block of the paired measurement


def _dedup(ctx: Context) -> Measurement | Skip:
    if (skip := _available()) is not None:
        return skip
    q = _queue()
    try:
        q.add("default/obj")
        m = time_inline(ctx, "add(k)", globals={"add": q.add, "k": "default/obj"})

        def block(_: int) -> None:
            for _ in range(_PER_BLOCK):
                q.add("default/obj")
        return _paired(ctx, m, block, _PER_BLOCK)
    finally:
        q.delete()
        q.close()


def _add_new(n: int) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        q = _queue()
        keys = [f"default/obj-{i}" for i in range(n)]
        try:
            m = time_batch(ctx, "for k in keys: add(k)", "delete()",
                           {"add": q.add, "keys": keys, "delete": q.delete}, ops=n, unit="ns/op")
            q.delete()
            fresh = [f"default/paired-{i}" for i in range(ctx.size(40, 4) * _PER_BLOCK)]

            def block(b: int) -> None:
                for k in fresh[b * _PER_BLOCK:(b + 1) * _PER_BLOCK]:
                    q.add(k)
            return _paired(ctx, m, block, _PER_BLOCK)
        finally:
            q.delete()
            q.close()
    return run


def _get_done(n: int) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        q = _queue()
        keys = [f"default/obj-{i}" for i in range(n)]

        def fill() -> None:
            q.delete()
            for k in keys:
                q.add(k)
        try:
            m = time_batch(ctx, "for _ in keys: done(get())", "fill()",
                           {"get": q.get, "done": q.done, "keys": keys, "fill": fill}, ops=2 * n, unit="ns/op")
            m.note = "per call: get and done are one round trip each"
            q.delete()
            for i in range(ctx.size(40, 4) * _PER_BLOCK // 2):
                q.add(f"default/paired-{i}")

            def block(_: int) -> None:
                for _ in range(_PER_BLOCK // 2):
                    q.done(q.get())
            return _paired(ctx, m, block, _PER_BLOCK)
        finally:
            q.delete()
            q.close()
    return run


# The floor of a get and a done: scripts making the redis.calls of get.lua's and done.lua's hot paths (a key handed
# out with nothing due; a clean key finished) on the queue's real keys, with none of their decisions, called on the
# same client path with the least client work a call needs (pack the arguments, split the reply). keyqueue's calls
# against these rows is what its own logic costs, client and server; these rows against PING is what the calls a
# lease needs cost (TIME, GET, LPOP, INCR and the token's SET, HSET, ZADD; HGET, HDEL, ZREM), with the queue's keys
# declared in KEYS as keyqueue's calls declare them.
_FLOOR_GET = """
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('GET', KEYS[10])
local key = redis.call('LPOP', KEYS[1])
local seq = redis.call('INCR', KEYS[8])
if seq <= now then
  seq = now + 1
  redis.call('SET', KEYS[8], string.format('%.0f', seq))
end
local lease = string.format('%.0f', seq) .. '|' .. ARGV[3]
redis.call('HSET', KEYS[2], key, '@' .. lease)
redis.call('ZADD', KEYS[3], now + ARGV[2], key)
return '1 0 0 - ' .. lease .. ' ' .. key
"""
_FLOOR_DONE = """
redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 0
"""


# Two lower floors, to say how much of the above any lease design could save: a bare lease (pop the key, record its
# holder; forget it) without the lease's clock, its expiry order, the fencing counter, the due check or done's
# re-add check; and scripts that make no redis.call at all but take the same arguments and give the same reply.
_MIN_GET = """
local key = redis.call('LPOP', KEYS[1])
local lease = '1|' .. ARGV[3]
redis.call('HSET', KEYS[2], key, '@' .. lease)
return '1 0 0 - ' .. lease .. ' ' .. key
"""
_MIN_DONE = """
redis.call('HDEL', KEYS[2], ARGV[1])
return 0
"""
_NOP_GET = """
return '1 0 0 - 1|' .. ARGV[3] .. ' default/obj'
"""
_NOP_DONE = "return 0"


class _FloorHandle:
    """``get``/``done`` through two scripts (the floor scripts above unless given), on a real queue's keys (``q``,
    filled by its own adds)."""

    def __init__(self, q: Any, get_script: str = _FLOOR_GET, done_script: str = _FLOOR_DONE) -> None:
        from keyqueue.redis._wire import Packer, SyncWire

        state = q._state
        self.wire = SyncWire(q._client)
        packer = Packer(state.keys)  # every key of the queue in KEYS, as keyqueue's own calls
        self.get_packed = packer.evalsha(q._client.script_load(get_script), state.get_args())
        self.done_sha = q._client.script_load(done_script)
        self.evalsha = packer.evalsha
        self.leases: dict[str, str] = {}

    def get(self) -> str:
        _, _, _, _, lease, key = self.wire.call(self.get_packed).split(" ", 5)
        self.leases[key] = lease
        return str(key)

    def done(self, key: str) -> bool:
        return bool(self.wire.call(self.evalsha(self.done_sha, [key, self.leases.pop(key)])))

    def close(self) -> None:
        self.wire.close()


def _get_done_floor(n: int, scripts: tuple[str, str] = (_FLOOR_GET, _FLOOR_DONE),
                    note: str = "the redis.calls of get's and done's hot paths, no logic, least client work",
                    against_keyqueue: bool = True) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        q = _queue()
        floor = _FloorHandle(q, *scripts)
        keys = [f"default/obj-{i}" for i in range(n)]

        def fill() -> None:
            q.delete()
            floor.leases.clear()
            q.add_many(keys)
        try:
            m = time_batch(ctx, "for _ in keys: done(get())", "fill()",
                           {"get": floor.get, "done": floor.done, "keys": keys, "fill": fill}, ops=2 * n,
                           unit="ns/op")
            m.note = note
            blocks = ctx.size(40, 4)
            q.delete()
            floor.leases.clear()
            q.add_many([f"default/paired-{i}" for i in range(3 * blocks * (_PER_BLOCK // 2))])  # three passes

            def block(_: int) -> None:
                for _ in range(_PER_BLOCK // 2):
                    floor.done(floor.get())

            if against_keyqueue:
                def keyqueue_block(_: int) -> None:
                    for _ in range(_PER_BLOCK // 2):
                        q.done(q.get())
                # keyqueue's own get/done against this floor, block by block on the same queue: what its logic
                # costs.
                own = _block_ratio(blocks, block, keyqueue_block)
                m.extra["keyqueue_over_floor"] = own
                m.note += (f"; keyqueue's get/done against it, block by block ({blocks} × {_PER_BLOCK} calls "
                           f"each): {own:.2f}x (median)")
            return _paired(ctx, m, block, _PER_BLOCK)
        finally:
            q.delete()
            floor.close()
            q.close()
    return run


def _switches() -> tuple[int, int]:
    # This thread's context switches so far: (voluntary: it slept, e.g. in recv waiting for a reply; involuntary: it
    # was preempted, e.g. by the server it just woke on the same core). (0, 0) where the OS does not report them.
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return 0, 0
    usage = resource.getrusage(who)
    return usage.ru_nvcsw, usage.ru_nivcsw


def _server_cpu(client: Any) -> float:
    # Seconds of CPU the Redis server has used (its main thread where Redis reports it: the one that runs commands).
    info = client.info("cpu")
    if "used_cpu_user_main_thread" in info:
        return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _cpu(what: str) -> Any:
    """CPU per call, client (this thread) + server (INFO cpu), of PING or one of the hot calls: where the time goes,
    robust to load (a process waiting for a core uses none). The note splits it and gives the server's own
    ``usec_per_call`` of the command (INFO commandstats: the script itself, without reading and writing sockets)."""
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        import redis

        n, repeats = (200, 1) if ctx.smoke else (3_000, 5)
        client = redis.Redis.from_url(_url(), decode_responses=True)
        q = _queue()
        ping = _lean_ping(client)
        floor = _FloorHandle(q) if what == "getdone_floor" else None
        try:
            if what == "ping":
                calls, per = (lambda i: ping()), 1
            elif what == "dedup":
                q.add("default/obj")
                calls, per = (lambda i: q.add("default/obj")), 1
            elif what == "add":
                calls, per = (lambda i: q.add(f"default/obj-{i}")), 1
            elif floor is not None:  # the floor scripts' get and done (_FloorHandle): two calls
                calls, per = (lambda i: floor.done(floor.get())), 2
            else:  # a get and a done per step: two calls
                calls, per = (lambda i: q.done(q.get())), 2
            totals, clients, servers, usec, sleeps, preempted = [], [], [], [], [], []
            for _ in range(repeats):
                q.delete()
                if what in ("getdone", "getdone_floor"):
                    q.add_many([f"default/obj-{i}" for i in range(n)])
                client.config_resetstat()
                s0, c0, r0 = _server_cpu(client), time.thread_time(), _switches()
                for i in range(n):
                    calls(i)
                r1, c1, s1 = _switches(), time.thread_time(), _server_cpu(client)
                stats = client.info("commandstats")
                cmd = stats.get("cmdstat_ping" if what == "ping" else "cmdstat_evalsha", {})
                usec.append(float(cmd.get("usec_per_call", 0.0)))
                clients.append((c1 - c0) / (n * per) * 1e6)
                servers.append((s1 - s0) / (n * per) * 1e6)
                totals.append(clients[-1] + servers[-1])
                sleeps.append((r1[0] - r0[0]) / (n * per))
                preempted.append((r1[1] - r0[1]) / (n * per))
            med = statistics.median
            note = (f"CPU per call: client {med(clients):.1f} µs + server {med(servers):.1f} µs (the command "
                    f"itself, INFO commandstats: {med(usec):.2f} µs); client thread per call: {med(sleeps):.2f} "
                    f"sleeps waiting for a reply, {med(preempted):.2f} preemptions")
            return Measurement("µs CPU/call", totals, ops=len(totals), note=note,
                               extra={"client_us": clients, "server_us": servers, "command_us": usec,
                                      "client_sleeps": sleeps, "client_preemptions": preempted})
        finally:
            q.delete()
            if floor is not None:
                floor.close()
            q.close()
            client.close()
    return run


class _NaiveRedisQueue:
    """The obvious Redis work queue: dedup with a set, a list as the FIFO; 3 round trips per add, 2 per get."""

    def __init__(self, client: Any, name: str) -> None:
        self.r = client
        self.list = f"naive:{name}:list"
        self.set = f"naive:{name}:set"

    def add(self, key: str) -> None:
        if not self.r.sismember(self.set, key):
            self.r.sadd(self.set, key)
            self.r.rpush(self.list, key)

    def get(self, timeout: float | None = None) -> str:
        if timeout is None:
            key = self.r.lpop(self.list)
        else:  # wait for a key (the throughput rows: another process may have taken the one just added)
            popped = self.r.blpop([self.list], timeout=timeout)
            if popped is None:
                raise TimeoutError
            key = popped[1]
        self.r.srem(self.set, key)
        return str(key)

    def done(self, key: str) -> None:
        return None  # it has no processing set: nothing to do (and no per-key exclusion)


def _cycle(naive: bool) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        import redis

        client = redis.Redis.from_url(_url(), decode_responses=True)
        name = f"bench-{uuid.uuid4().hex[:8]}"
        q: Any = _NaiveRedisQueue(client, name) if naive else _queue()
        try:
            return time_inline(ctx, "add(k); done(get())", globals={"add": q.add, "get": q.get, "done": q.done,
                                                                    "k": "default/obj"})
        finally:
            if naive:
                client.delete(q.list, q.set)
            else:
                q.delete()
                q.close()
            client.close()
    return run


_THROUGHPUT_WORKER = """
import sys, time
if sys.argv[5] == "naive":  # run from the repository root (as python -m benchmarks is): benchmarks is importable
    import redis
    from benchmarks.bench_redis import _NaiveRedisQueue
    q = _NaiveRedisQueue(redis.Redis.from_url(sys.argv[2], decode_responses=True), sys.argv[1])
else:
    from keyqueue.redis import Queue
    q = Queue(sys.argv[1], url=sys.argv[2])
seconds = float(sys.argv[3]); me = sys.argv[4]
print("ready", flush=True); sys.stdin.readline()
n = 0; end = time.monotonic() + seconds
while time.monotonic() < end:
    q.add(f"{me}-{n}")  # a fresh key, so there is always work; get whatever is ready (any process's key)
    try:
        q.done(q.get(timeout=0.5)); n += 1
    except TimeoutError:
        pass
print(n, flush=True)
"""


def _throughput(processes: int, seconds: float, naive: bool = False) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        if (skip := _available()) is not None:
            return skip
        import redis

        name = f"bench-{uuid.uuid4().hex[:8]}"
        values = []
        for _ in range(ctx.size(3, 1)):
            procs = [subprocess.Popen([sys.executable, "-c", _THROUGHPUT_WORKER, name, _url(), str(seconds),
                                       f"w{i}", "naive" if naive else "keyqueue"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                     for i in range(processes)]
            try:
                for p in procs:
                    assert p.stdout is not None
                    p.stdout.readline()
                start = time.monotonic()
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.write("go\n")
                    p.stdin.flush()
                counts = [int(p.stdout.readline()) for p in procs if p.stdout is not None]
                elapsed = time.monotonic() - start
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            values.append(sum(counts) / elapsed)
        with contextlib.closing(redis.Redis.from_url(_url())) as client:  # what the workers left behind
            naive_keys = _NaiveRedisQueue(client, name)
            client.delete(naive_keys.list, naive_keys.set, *_queue_keys(name))
        what = "the naive list + set queue" if naive else "one keyqueue.redis.Queue"
        return Measurement("cycles/s", values, ops=len(values), higher_is_better=True,
                           note=f"{processes} process(es) on {what}; a cycle = add a new key, get+done the next "
                                f"ready one; {seconds:g} s")
    return run


def _queue_keys(name: str) -> list[str]:
    from keyqueue.redis._protocol import HandleState

    return HandleState(name, lease=1.0, clock=None, stats=False, url="").keys


def _idle(getters: int, seconds: float) -> Any:
    def run(ctx: Context) -> Measurement | Skip:
        import threading

        from keyqueue.errors import ShutDown

        if (skip := _available()) is not None:
            return skip
        q = _queue()
        threads = []

        def wait() -> None:
            with contextlib.suppress(ShutDown):
                q.get()

        try:
            for _ in range(getters):
                t = threading.Thread(target=wait, daemon=True)
                t.start()
                threads.append(t)
            while q._getters < getters:
                time.sleep(0.01)
            values = []
            for _ in range(ctx.size(3, 1)):
                cpu0, wall0 = time.process_time(), time.monotonic()
                time.sleep(seconds)  # the measured window: only the blocked getters could use CPU in it
                values.append((time.process_time() - cpu0) / (time.monotonic() - wall0) * 100)
        finally:
            q.shut_down()
            for t in threads:
                t.join(10)
            q.delete()
            q.close()
        return Measurement("% CPU", values, ops=len(values),
                           note=f"{getters} threads blocked in get() (BLPOP), {seconds:g} s windows, this process")
    return run


def cases(smoke: bool) -> list[Case]:
    n = 200 if smoke else 3_000
    secs = 0.5 if smoke else 2.0
    limit = 1.3
    return [
        Case("redis.ping", "Redis PING round trip (the physical limit; keyqueue's client path)", G_REDIS, _ping,
             interleave=True),
        Case("redis.ping_client", "Redis PING through redis-py's client.ping() (execute_command)", G_REDIS,
             _ping_client, baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.evalsha", "EVALSHA of `return 1`, no KEYS/ARGV (the floor of a script call)", G_REDIS,
             _evalsha(0, 0), baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.evalsha10", "EVALSHA of `return 1` with 10 KEYS + 2 ARGV", G_REDIS, _evalsha(10, 2),
             baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.add", f"add, new key → QUEUED ({n:,} keys)", G_REDIS, _add_new(n), baseline="redis.ping",
             checks=(Check(f"≤ {limit}x PING", "le", limit, ref="redis.ping"),), needs=("redis.ping",),
             interleave=True),
        Case("redis.dedup", "add, key waiting → DEDUP", G_REDIS, _dedup, baseline="redis.ping",
             checks=(Check(f"≤ {limit}x PING", "le", limit, ref="redis.ping"),), needs=("redis.ping",),
             interleave=True),
        Case("redis.getdone", f"get / done, per call ({n:,} keys)", G_REDIS, _get_done(n), baseline="redis.ping",
             checks=(Check(f"≤ {limit}x PING", "le", limit, ref="redis.ping"),), needs=("redis.ping",),
             interleave=True),
        Case("redis.getdone_floor", f"get / done floor: the same redis.calls, no logic, per call ({n:,} keys)",
             G_REDIS, _get_done_floor(n), baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.getdone_min", f"get / done of a bare lease: LPOP + HSET, HDEL, per call ({n:,} keys)",
             G_REDIS, _get_done_floor(n, (_MIN_GET, _MIN_DONE), "a bare lease: pop and record the holder; "
                                      "forget it (no clock, expiry order, fencing counter or checks)", False),
             baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.getdone_nop", "get / done scripts making no redis.call (same arguments and replies), per call",
             G_REDIS, _get_done_floor(n, (_NOP_GET, _NOP_DONE), "EVALSHA with get's and done's arguments and "
                                      "reply shapes, no redis.call: the cost of a script call itself", False),
             baseline="redis.ping", needs=("redis.ping",), interleave=True),
        Case("redis.cpu.ping", "CPU per PING (client + server)", G_REDIS, _cpu("ping")),
        *(Case(f"redis.cpu.{w}", f"CPU per call (client + server): {label}", G_REDIS, _cpu(w),
               baseline="redis.cpu.ping", needs=("redis.cpu.ping",))
          for w, label in (("add", "add, new key"), ("dedup", "add, DEDUP"), ("getdone", "get / done"),
                           ("getdone_floor", "get / done floor (same redis.calls, no logic)"))),
        Case("redis.cycle", "add+get+done, one key (3 round trips)", G_REDIS, _cycle(False),
             baseline="redis.naive", needs=("redis.naive", "redis.ping"), interleave=True),
        Case("redis.naive", "naive Redis queue add+get+done (list + set, 5 round trips, not atomic)", G_REDIS,
             _cycle(True), interleave=True),
        *(Case(f"redis.procs{p}", f"throughput, {p} process(es)", G_REDIS, _throughput(p, secs),
               baseline=f"redis.naiveprocs{p}", needs=(f"redis.naiveprocs{p}",))
          for p in (1, 2, 4)),
        *(Case(f"redis.naiveprocs{p}", f"naive Redis queue throughput, {p} process(es)", G_REDIS,
               _throughput(p, secs, naive=True))
          for p in (1, 2, 4)),
        Case("redis.idle", "idle: 16 getters blocked in get()", G_REDIS, _idle(16, 0.5 if smoke else 5.0),
             checks=(Check("≤ 1% of a core", "le", 1.0),)),
    ]
