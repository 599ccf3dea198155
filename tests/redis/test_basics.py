"""The Redis queue's own contract: str keys, bad input, unreachable or failing Redis, shared state, limiter
arithmetic checked against keyqueue.ratelimit on the same inputs."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
import redis

import keyqueue
from keyqueue import AddResult, FakeClock, ShutDown
from keyqueue.redis import LeaseLost, Queue, RateLimitingQueue, RedisQueueError, RedisUnavailable
from keyqueue.redis.errors import LeaseLost as LeaseLostClass


def test_keys_are_str_and_bad_input_changes_nothing(new_queue: Any) -> None:
    q = new_queue(keyqueue.redis.DelayingQueue)
    q.add("a")
    for bad in (1, b"x", ("ns", "n"), None):
        with pytest.raises(TypeError, match=type(bad).__name__):
            q.add(bad)
        with pytest.raises(TypeError, match=type(bad).__name__):
            q.add_after(bad, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        q.add_after("b", math.nan)
    with pytest.raises(TypeError, match="str"):
        q.add_after("b", "1")
    assert q.inspect()["dirty"] == 1 and len(q) == 1
    assert q.get(timeout=1) == "a"


def test_names_and_options_are_checked(redis_url: str) -> None:
    with pytest.raises(TypeError, match="name"):
        Queue(42, url=redis_url)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        Queue("a{b}", url=redis_url)
    with pytest.raises(ValueError, match="lease"):
        Queue("x", url=redis_url, lease=0)
    with pytest.raises(ValueError, match="not a Redis URL"):
        Queue("x", url="http://127.0.0.1:1")
    with pytest.raises(TypeError, match="rate_limiter"):
        RateLimitingQueue("x", url=redis_url, rate_limiter=object())  # type: ignore[arg-type]


def test_unreachable_redis_is_a_clear_error_naming_the_url_and_no_hang() -> None:
    url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    q = keyqueue.redis.DelayingQueue("x", url=url)
    start = time.monotonic()
    for call in (lambda: q.add("a"), lambda: q.get(timeout=0.5), lambda: q.add_after("a", 1), lambda: len(q)):
        with pytest.raises(RedisUnavailable, match=r"127\.0\.0\.1:1"):
            call()
    assert time.monotonic() - start < 10  # each call fails at once (connection refused), far below any timeout
    q.close()


def test_a_redis_error_reply_is_a_queue_error_and_changes_nothing(new_queue: Any, rclient: redis.Redis) -> None:
    q = new_queue()
    q.add("a")
    rclient.config_set("maxmemory", "1")  # every write is refused (noeviction): OOM on the script's first write
    try:
        with pytest.raises(RedisQueueError, match="OOM"):
            q.add("b")
    finally:
        rclient.config_set("maxmemory", "0")
    assert q.inspect()["dirty"] == 1
    assert q.get(timeout=1) == "a"
    with pytest.raises(TimeoutError):
        q.get(timeout=0.01)


def test_many_adds_collapse_into_one_entry(new_queue: Any) -> None:
    q = new_queue()
    assert {q.add("default/target") for _ in range(2_000)} == {AddResult.QUEUED, AddResult.DEDUP}
    assert len(q) == 1


def test_two_handles_share_one_queue_and_one_holder_per_key(new_queue: Any) -> None:
    a = new_queue(name="shared")
    b = new_queue(name="shared")
    assert a.add("k") == AddResult.QUEUED
    assert b.add("k") == AddResult.DEDUP
    assert b.get(timeout=1) == "k"
    assert a.add("k") == AddResult.MARKED  # being processed by the other handle
    with pytest.raises(TimeoutError):
        a.get(timeout=0.05)  # held by b: never handed out twice
    assert a.done("k") is False  # a does not hold it: nothing sent, nothing changed
    assert b.done("k") is True
    assert a.get(timeout=1) == "k"
    assert a.done("k") is False


def test_shutdown_is_per_handle_and_loses_nothing(new_queue: Any) -> None:
    a = new_queue(name="per-handle")
    b = new_queue(name="per-handle")
    a.add("x")
    a.add("y")
    held = a.get(timeout=1)
    a.add(held)
    a.shut_down()
    assert a.add("z") == AddResult.DROPPED
    with pytest.raises(ShutDown):
        a.get(timeout=1)
    assert a.done(held) is True  # keys in flight can still be finished; the re-add is honoured
    assert sorted([b.get(timeout=1), b.get(timeout=1)]) == ["x", "y"]
    assert b.add("z") == AddResult.QUEUED  # the other handle carries on


def test_drain_waits_for_this_handles_keys_in_flight(new_queue: Any) -> None:
    import threading

    q = new_queue()
    q.add("a")
    q.add("b")
    key = q.get(timeout=1)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(q.shut_down_with_drain(timeout=10)))
    t.start()
    t.join(0.05)
    assert result == []  # still holding a key
    q.done(key)
    t.join(5)
    assert result == [True]
    assert len(q) == 1  # "b" stays queued for other handles


def test_delete_removes_the_shared_state(new_queue: Any, rclient: redis.Redis) -> None:
    q = new_queue(keyqueue.redis.RateLimitingQueue, name="to-delete")
    q.add("a")
    q.add_after("b", 100)
    q.add_rate_limited("c")
    assert rclient.keys("kq:{to-delete}:*")
    assert q.delete() > 0
    assert rclient.keys("kq:{to-delete}:*") == []
    assert len(q) == 0


def test_lease_lost_is_a_keyqueue_redis_error() -> None:
    assert issubclass(LeaseLost, RedisQueueError) and LeaseLost is LeaseLostClass
    err = LeaseLost("k", 7, "q")
    assert err.key == "k" and err.token == 7 and "'k'" in str(err)


REFERENCE_LIMITERS = [
    lambda clock: keyqueue.ItemExponentialFailureRateLimiter(0.005, 1000.0),
    lambda clock: keyqueue.ItemExponentialFailureRateLimiter(0.001, 0.05),
    lambda clock: keyqueue.ItemFastSlowRateLimiter(0.01, 2.0, 3),
    lambda clock: keyqueue.BucketRateLimiter(10, 5, clock=clock),
    lambda clock: keyqueue.default_controller_rate_limiter(clock=clock),
    lambda clock: keyqueue.WithMaxWaitRateLimiter(keyqueue.ItemExponentialFailureRateLimiter(0.1, 100.0), 1.0),
    lambda clock: keyqueue.MaxOfRateLimiter(),
]


@pytest.mark.parametrize("make_limiter", REFERENCE_LIMITERS)
def test_rate_limiter_arithmetic_matches_keyqueue_ratelimit(
    make_limiter: Any, new_queue: Any, rclient: redis.Redis
) -> None:
    # The same sequence of failures, forgets and clock steps through the Lua limiter and the Python reference.
    clock = FakeClock(start=1000.0)
    reference = make_limiter(clock)
    q = new_queue(RateLimitingQueue, rate_limiter=make_limiter(clock), clock=clock)
    delay_key = q._state.prefix + "delay"
    steps = [("k1", 0.0)] * 8 + [("k2", 0.0), ("k1", 0.25), ("forget", 0.0), ("k1", 0.0), ("k2", 0.0)] * 4
    for i, (key, step) in enumerate(steps):
        clock.step(step)
        if key == "forget":
            reference.forget("k1")
            q.forget("k1")
            continue
        want = reference.when(key)
        rclient.zrem(delay_key, key)  # let every call store its own entry (earliest-wins would hide later delays)
        q.add_rate_limited(key)
        score = rclient.zscore(delay_key, key)
        now_us = clock.now_ns() // 1000
        if want <= 0:
            assert score is None, (i, key)
        elif want == math.inf:
            assert score == math.inf, (i, key)
        else:
            assert score is not None and int(score) - now_us == max(1, round(want * 1e6)), (i, key, want)
        assert q.num_requeues(key) == reference.num_requeues(key), (i, key)
        rclient.delete(q._state.prefix + "fifo", q._state.prefix + "state")  # only the limiter is compared


@pytest.mark.parametrize("key", ["a b", "x|y z", " lead", "trail ", "", "ü ✓\n2", "1 0 0 - 7|h k"])
def test_any_str_key_comes_back_unchanged(new_queue: Any, key: str) -> None:
    # get's reply is one flat string with the key last (get.lua): spaces, '|' and newlines in a key must survive.
    q = new_queue()
    assert q.add(key) is AddResult.QUEUED
    assert q.add(key) is AddResult.DEDUP
    assert q.get(timeout=5) == key
    assert q.held == [key]
    assert q.done(key) is False


def test_scripts_flushed_from_redis_are_loaded_again(new_queue: Any, rclient: redis.Redis) -> None:
    q = new_queue()
    assert q.add("a") is AddResult.QUEUED  # the add script is known to Redis now
    rclient.script_flush()  # as after a Redis restart without persistence of scripts
    assert q.add("b") is AddResult.QUEUED  # NOSCRIPT: loaded and sent once more, applied once
    assert q.inspect()["queued"] == 2
    assert rclient.script_exists(keyqueue.redis._protocol.script_sha("add")) == [True]


def test_snapshot_counts_the_shared_structures_like_the_in_process_queue(new_queue: Any) -> None:
    """The lab's funnel reads ``snapshot()``; on Redis it is the shared queue's sizes, from one round trip."""
    q = new_queue(keyqueue.redis.DelayingQueue)
    q.add("a")
    q.add("b")
    q.add_after("c", 3600.0)
    assert q.get(timeout=5) == "a"
    q.add("a")  # held and re-added: dirty, not in the FIFO
    snap = q.snapshot()
    assert (snap.dirty, snap.fifo, snap.processing, snap.delayed, snap.held_dirty) == (2, 1, 1, 1, 1)
    assert not snap.shutting_down
    q.done("a")
    assert (q.snapshot().fifo, q.snapshot().processing) == (2, 0)


@pytest.mark.parametrize("old_key", ["dirty", "lease"])
def test_a_queue_left_by_an_older_layout_is_refused_until_deleted(
    new_queue: Any, rclient: redis.Redis, old_key: str
) -> None:
    # Before the per-key state hash a queue kept a dirty hash and a lease hash; this version would not see them (a
    # waiting key would be queued twice), so every handle checks once, before its first operation, and refuses.
    name = f"old-{old_key}"
    prefix = f"kq:{{{name}}}:"
    rclient.rpush(prefix + "fifo", "a")
    rclient.hset(prefix + old_key, "a", "1")
    q = new_queue(name=name)
    for call in (lambda: q.add("a"), lambda: q.get(timeout=1), lambda: q.add_many(["a"]), lambda: len(q)):
        with pytest.raises(RedisQueueError, match=rf"older keyqueue.*DEL kq:{{{name}}}:fifo kq:{{{name}}}:dirty"):
            call()
    assert rclient.lrange(prefix + "fifo", 0, -1) == ["a"] and not rclient.exists(prefix + "state")  # untouched
    assert q.delete() == 2  # delete() needs no check: it removes the older layout's keys too
    assert q.add("a") is AddResult.QUEUED and q.get(timeout=1) == "a"
    # The control: a handle that passed its check does not look again (one check per handle, not per call).
    rclient.hset(prefix + old_key, "b", "1")
    assert q.add("b") is AddResult.QUEUED


def test_dirty_counts_keys_readded_while_held_through_done_and_run_out_leases(new_queue: Any) -> None:
    # A key re-added while held is dirty but not in the FIFO: the depth counts it until done() queues it again or
    # its lease runs out and it is reclaimed (lib.lua's counters: marks - redelivered - unmarked).
    clock = FakeClock(start=1000.0)
    q = new_queue(clock=clock, lease=30.0)  # its heartbeat beats every 10 s: not during this test
    for k in ("a", "b", "c"):
        q.add(k)
    got = [q.get(timeout=1) for _ in range(3)]
    assert got == ["a", "b", "c"] and q.inspect()["dirty"] == 0
    assert [q.add(k) for k in got] == [AddResult.MARKED] * 3
    assert q.add("a") is AddResult.DEDUP  # dirty already, twice is once
    assert (q.inspect()["dirty"], q.inspect()["queued"], q._depth()) == (3, 0, 3)
    assert q.done("a") is True  # redelivered: in the FIFO again, still dirty
    assert (q.inspect()["dirty"], q.inspect()["queued"]) == (3, 1)
    assert q.done("b") is True and q.get(timeout=1) == "a"
    assert (q.inspect()["dirty"], q.inspect()["queued"], q.inspect()["processing"]) == (2, 1, 2)
    clock.step(100.0)  # the leases of a and c run out
    assert len(q) == 3  # b waiting, then c (re-added: reclaimed as dirty) and a (clean) reclaimed
    assert (q.inspect()["dirty"], q.inspect()["processing"], q.inspect()["expired"]) == (3, 0, 2)
    assert sorted(q.get(timeout=1) for _ in range(3)) == ["a", "b", "c"]
    assert q.inspect()["dirty"] == 0


def test_each_script_carries_exactly_the_library_functions_it_calls(rclient: redis.Redis) -> None:
    import re

    from keyqueue.redis._protocol import OPERATIONS, _library, script_source

    _, functions = _library()
    names = [n for n, _ in functions]
    assert {"now_us", "notify", "add_clean", "add_held", "add_state", "catch_up"} <= set(names)
    for op in OPERATIONS:
        src = script_source(op)
        defined = re.findall(r"^local function (\w+)\(", src, re.MULTILINE)
        code = re.sub(r"--[^\n]*", "", src)
        called = {n for n in names if re.search(rf"\b{n}\(", code.replace(f"local function {n}(", ""))}
        assert set(defined) - {"num", "when"} == called, op  # num/when: add_rate_limited's own functions
        # ... and exactly the key names it uses (each is one concatenation per call)
        declared = set(re.findall(r"^local ([A-Z_]+) = KEYS\[\d+\]", src, re.MULTILINE))
        roles = ("FIFO", "STATE", "PROC", "DELAY", "NOTIFY", "FAIL", "BUCKET", "SEQ", "COUNTERS", "DUE", "OLD_DIRTY",
                 "OLD_LEASE")
        used = {n for n in roles
                if re.search(rf"\b{n}\b", re.sub(rf"^local {n} = [^\n]*", "", code, flags=re.MULTILINE))}
        assert declared == used, op
        rclient.script_load(src)  # Redis compiles it
    assert "catch_up" not in re.findall(r"^local function (\w+)\(", script_source("add"), re.MULTILINE)
    assert re.findall(r"^local ([A-Z]+) = KEYS", script_source("done"), re.MULTILINE) == [
        "STATE", "PROC", "FIFO", "NOTIFY", "COUNTERS"]  # the last three only in its cold part (a redelivery)


def test_a_hot_path_defines_only_what_it_uses() -> None:
    # script_source's cold parts: a dedup add, a done that finds the key clean and a get with nothing due return
    # before the names and functions only their cold part needs are defined (each definition costs Redis time).
    import re

    from keyqueue.redis._protocol import script_source

    def defined(text: str) -> tuple[list[str], list[str]]:
        return (re.findall(r"^local function (\w+)\(", text, re.MULTILINE),
                re.findall(r"^local ([A-Z][A-Z_]+) = ", text, re.MULTILINE))

    add = script_source("add")
    # The dedup path: the head (one HGET), past the clean key's branch, to its return: nothing defined but STATE.
    assert defined(add[:add.index("if not v then")]) == ([], ["STATE"])
    assert defined(add[add.index("  return add_clean("):add.index("  return 1\nend\n")]) == ([], [])
    assert {"add_clean", "add_held", "notify", "since_text"} <= set(defined(add)[0])
    assert "add_state" not in defined(add)[0]
    done = script_source("done")
    assert defined(done[:done.index("  return 0\nend\n")]) == ([], ["STATE", "PROC"])
    get = script_source("get")
    functions, names = defined(get[:get.index("if due <= now then")])
    assert functions == ["int", "now_us", "read_due"]
    assert names == ["FIFO", "STATE", "PROC", "SEQ", "DUE", "INF"]
    assert defined(get)[0].count("catch_up") == defined(get)[0].count("write_due") == 1  # each in its cold part


def test_add_many_is_add_of_each_key_in_order_pipelined(new_queue: Any, rclient: redis.Redis) -> None:
    q = new_queue(stats=True)
    q.add("held")
    assert q.get(timeout=1) == "held"
    rclient.script_flush()  # the pipeline meets NOSCRIPT: those adds did not run, they are sent once more
    keys = ["a", "b", "a", "held", "c"] + [f"k{i}" for i in range(2_500)]  # more than one batch
    results = q.add_many(keys)
    assert results[:5] == [AddResult.QUEUED, AddResult.QUEUED, AddResult.DEDUP, AddResult.MARKED, AddResult.QUEUED]
    assert results[5:] == [AddResult.QUEUED] * 2_500
    assert q.stats().adds == len(keys) + 1
    assert q.inspect()["queued"] == 3 + 2_500  # held is marked, not queued
    assert [q.get(timeout=1) for _ in range(3)] == ["a", "b", "c"]
    assert q.add_many([]) == []


def test_add_many_checks_every_key_before_sending_and_drops_after_shutdown(
    new_queue: Any, rclient: redis.Redis
) -> None:
    q = new_queue()
    with pytest.raises(TypeError, match="int"):
        q.add_many(["a", 1])
    with pytest.raises(TypeError, match="str"):
        q.add_many("abc")  # one str is not a list of keys
    assert q.inspect()["dirty"] == 0  # nothing was sent
    rclient.config_set("maxmemory", "1")  # every write is refused: an error reply for each add of the batch
    try:
        with pytest.raises(RedisQueueError, match="OOM"):
            q.add_many(["a", "b"])
    finally:
        rclient.config_set("maxmemory", "0")
    assert q.inspect()["dirty"] == 0
    q.shut_down()
    assert q.add_many(["a", "b"]) == [AddResult.DROPPED, AddResult.DROPPED]
    assert q.inspect()["dirty"] == 0


def _due_and_scores(rclient: redis.Redis, name: str) -> tuple[str | None, list[float]]:
    prefix = f"kq:{{{name}}}:"
    scores = [s for _, s in rclient.zrange(prefix + "proc", 0, -1, withscores=True)]
    scores += [s for _, s in rclient.zrange(prefix + "delay", 0, -1, withscores=True)]
    return rclient.get(prefix + "due"), scores  # type: ignore[return-value]


def test_due_hint_stays_a_lower_bound_of_every_deadline_and_ready_time(new_queue: Any, rclient: redis.Redis) -> None:
    # get and len skip reading proc and delay while the hint (lib.lua's "due") is later than now, so it must never be
    # above a lease deadline or a ready time. Two handles with different lease lengths, delayed adds, run-out
    # leases, renewals and clock steps, in a seeded random order; the invariant is checked after every call.
    import random

    clock = FakeClock(start=1000.0)
    name = "due-hint"
    a = new_queue(keyqueue.redis.DelayingQueue, name=name, clock=clock, lease=30.0)
    b = new_queue(keyqueue.redis.DelayingQueue, name=name, clock=clock, lease=2.0)
    rnd = random.Random(12)
    lost = fired = hinted = 0
    for _ in range(300):
        h = rnd.choice((a, b))
        op = rnd.random()
        if op < 0.25:
            h.add(f"k{rnd.randrange(12)}")
        elif op < 0.45:
            h.add_after(f"k{rnd.randrange(12)}", rnd.choice((0.5, 3.0, 45.0)))
        elif op < 0.7:
            before = h.inspect()["delayed"]
            if len(h):
                h.get(timeout=1)
            fired += before - h.inspect()["delayed"]
        elif op < 0.85 and h.held:
            try:
                h.done(rnd.choice(h.held))
            except LeaseLost:
                lost += 1
        elif op < 0.92:
            h._renew()
        else:
            clock.step(rnd.choice((0.3, 1.5, 7.0, 40.0)))
        due, scores = _due_and_scores(rclient, name)
        if due is not None:  # absent: unknown, the next get or len reads proc and delay
            hinted += 1
            assert (due == "inf" and not scores) or float(due) <= min(scores, default=math.inf), (due, scores)
    # leases did run out and delayed keys did fire while the hint was in use, and it was in use most of the time
    assert lost > 0 and fired > 0 and hinted > 250


def test_get_trusts_the_due_hint_control(new_queue: Any, rclient: redis.Redis) -> None:
    # The control of the test above: a hint set above a run-out lease's deadline hides it from get (so the hint is
    # what get reads, and the invariant is what keeps leases honest); with the hint removed (unknown), get reclaims.
    clock = FakeClock(start=1000.0)
    name = "due-control"
    holder = new_queue(name=name, clock=clock, lease=1.0)
    other = new_queue(name=name, clock=clock, lease=1.0)
    holder.add("k")
    assert holder.get(timeout=1) == "k"
    clock.step(5.0)  # the lease ran out
    rclient.set(f"kq:{{{name}}}:due", str(10**15))
    with pytest.raises(TimeoutError):
        other.get(timeout=0.05)
    due, scores = _due_and_scores(rclient, name)
    assert float(due or 0) > min(scores)  # the invariant check above would have caught this state
    rclient.delete(f"kq:{{{name}}}:due")
    assert other.get(timeout=1) == "k"
    with pytest.raises(LeaseLost):
        holder.done("k")


def test_a_renewal_that_moves_a_deadline_earlier_lowers_the_due_hint(new_queue: Any, rclient: redis.Redis) -> None:
    # Redis's clock can step back (NTP), and then a renewal moves a deadline earlier: the hint must follow.
    from keyqueue.redis._protocol import script_source

    clock = FakeClock(start=1000.0)
    q = new_queue(name="due-renew", clock=clock, lease=30.0)
    q.add("k")
    assert q.get(timeout=1) == "k"
    assert float(rclient.get("kq:{due-renew}:due") or 0) == 1030e6
    lease = q._state.held["k"]
    keys = q._state.keys
    lost = rclient.eval(script_source("renew"), len(keys), *keys, str(500 * 10**6), str(30 * 10**6), "k", lease)
    assert lost == []
    due, scores = _due_and_scores(rclient, "due-renew")
    assert scores == [530e6] and due is not None and float(due) <= 530e6


class _UnguardedStart(Queue):
    """The control's handle: its heartbeat is started by a check-then-act without the lock."""

    def _ensure_heartbeat(self) -> None:
        if self._beat is None:
            beat = threading.Thread(target=lambda: None, name=f"keyqueue-redis-heartbeat-{self.name}")
            beat.start()
            self._beat = beat


@pytest.mark.parametrize("cls", [Queue, _UnguardedStart], ids=["handle", "control-unguarded"])
def test_gets_handing_out_keys_at_once_start_one_heartbeat(
    cls: type[Queue], new_queue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Eight gets hand out their keys at once. A heartbeat thread's construction waits (up to 1 s) for a second one:
    # with the handle's lock the other getters wait on the lock, find the thread started and start none; the control,
    # which checks and starts without the lock, starts a second while the first is still being built.
    q = new_queue(cls)
    q.add_many([f"k{i}" for i in range(8)])
    real = threading.Thread
    started: list[threading.Thread] = []
    arrived = threading.Condition()

    class Counted(real):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if str(kwargs.get("name", "")).startswith("keyqueue-redis-heartbeat-"):
                with arrived:
                    started.append(self)
                    arrived.notify_all()
                    arrived.wait_for(lambda: len(started) > 1, timeout=1.0)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(threading, "Thread", Counted)
    barrier = threading.Barrier(8)
    got: list[str] = []

    def take() -> None:
        barrier.wait()
        got.append(q.get(timeout=10))

    getters = [real(target=take) for _ in range(8)]
    for t in getters:
        t.start()
    for t in getters:
        t.join(30)
    monkeypatch.undo()
    assert sorted(got) == sorted(f"k{i}" for i in range(8))
    if cls is Queue:
        assert len(started) == 1
    else:
        assert len(started) > 1, "the unguarded start started one thread: this test cannot see the race"


def test_no_heartbeat_starts_after_close(new_queue: Any) -> None:
    q = new_queue()
    q.close()
    q._ensure_heartbeat()  # a get whose key arrives after close() would call this
    assert q._beat is None
