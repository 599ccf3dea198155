"""What both Redis shells share, without any I/O: key names, the scripts, argument checks, limiter trees,
reply decoding and the per-handle bookkeeping (:class:`HandleState`).

A shell (:mod:`keyqueue.redis` for threads, :mod:`keyqueue.redis.aio` for asyncio) sends each operation as one
script (``EVALSHA``, loading it once if Redis does not know it) and feeds the reply back here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from keyqueue._core import AddResult, QueueStats, check_delay
from keyqueue._core.outcomes import Counts
from keyqueue.clock import Clock, RealClock
from keyqueue.metrics._recorders import SharedQueueRecorder
from keyqueue.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    WithMaxWaitRateLimiter,
)
from keyqueue.redis.errors import LeaseLost, RedisQueueError, RedisUnavailable

__all__ = ["OPERATIONS", "UNCHECKED", "WAITED", "HandleState", "LimiterTree", "check_key", "limiter_tree",
           "script_source"]

log = logging.getLogger("keyqueue.redis")

# The queue's Redis keys (prefix + role), as lib.lua names them.
# Every script's KEYS, in lib.lua's order: this layout's keys, then the older layout's two (layout and delete).
_KEY_ROLES: Final = ("fifo", "state", "proc", "delay", "notify", "fail", "bucket", "seq", "counters", "due", "dirty",
                     "lease")
# The roles of the layout before the per-key state hash (dirty and lease hashes instead of state), for the error
# that refuses a queue an older keyqueue left in Redis.
_OLD_KEY_ROLES: Final = ("fifo", "dirty", "proc", "lease", "delay", "notify", "fail", "bucket", "seq", "counters",
                         "due")
OPERATIONS: Final = (
    "add", "add_after", "add_rate_limited", "get", "done", "renew", "len", "forget", "num_requeues", "inspect",
    "delete", "wake", "layout",
)
# Operations that change the queue's state: with wait_replicas each is followed by WAIT in the same round trip.
WAITED: Final = frozenset(OPERATIONS) - {"inspect", "num_requeues", "layout"}
# Operations a handle may send before it has checked the queue's layout (see HandleState.on_layout).
UNCHECKED: Final = frozenset({"delete", "layout"})
_RESULTS: Final = {1: AddResult.DEDUP, 2: AddResult.MARKED, 3: AddResult.QUEUED, 4: AddResult.DELAYED,
                   5: AddResult.DELAY_KEPT}
ADD_MANY_BATCH: Final = 1000  # adds per pipelined round trip of add_many (bounds the request and reply buffers)
DEFAULT_SOCKET_TIMEOUT: Final = 5.0  # seconds, for a client built from a URL without socket_timeout=
# Seconds past ``get(timeout=t)`` by which a get whose connection stopped answering has raised RedisUnavailable: each
# reply a get waits for (its script's, its BLPOP's) is read with a deadline of ``t + GET_MARGIN`` from the call's start.
GET_MARGIN: Final = 0.5


_LUA_FUNCTION = re.compile(r"^local function (\w+)\(", re.MULTILINE)
_LUA_COMMENT = re.compile(r"--[^\n]*")  # the scripts have no "--" inside string literals
# lib.lua's names (key names, constants), one per line: a script keeps only those its code uses. P is always kept.
_LUA_NAME = re.compile(r"^local ([A-Z][A-Z_]+) = ")
# An operation's cold part (see script_source): from a line "--: cold ..." to one "--: end cold" or the end of the file.
_LUA_COLD = re.compile(r"^[ \t]*--: cold\b[^\n]*\n(.*?)(?:^[ \t]*--: end cold[^\n]*\n|\Z)", re.MULTILINE | re.DOTALL)


@functools.cache
def _library() -> tuple[str, tuple[tuple[str, str], ...]]:
    """lib.lua split into its prologue (keys, constants) and its functions in file order: (name, text with the
    comment above it). A function's text ends at the first line that is exactly ``end``."""
    text = (resources.files("keyqueue.redis") / "lua" / "lib.lua").read_text()
    starts = [m.start() for m in _LUA_FUNCTION.finditer(text)]
    if not starts:
        return text, ()

    def comment_start(pos: int) -> int:  # back over the comment lines right above a definition
        lines_before = text[:pos].split("\n")[:-1]
        while lines_before and lines_before[-1].startswith("--"):
            lines_before.pop()
        return len("\n".join(lines_before)) + (1 if lines_before else 0)

    functions = []
    prologue_end = comment_start(starts[0])
    for pos in starts:
        end = text.index("\nend\n", pos) + len("\nend\n")
        name = _LUA_FUNCTION.match(text, pos)
        assert name is not None
        functions.append((name.group(1), text[comment_start(pos):end]))
    return text[:prologue_end], tuple(functions)


def _calls(code: str, bodies: dict[str, str]) -> set[str]:
    """The library functions ``code`` calls, directly or through another library function."""
    needed: set[str] = set()
    todo = [code]
    while todo:
        text = _LUA_COMMENT.sub("", todo.pop())  # a function named in a comment is not a call
        for name in bodies:
            if name not in needed and re.search(rf"\b{name}\(", text):
                needed.add(name)
                todo.append(bodies[name])
    return needed


@functools.cache
def script_source(operation: str) -> str:
    """The Lua text sent for ``operation``: lib.lua's prologue (of its names only those the script uses), the
    library functions the operation calls (directly or through another library function, in lib.lua's order, so
    each is defined before its callers), then the operation's own file. Redis runs a script's whole text on every
    call, and a definition costs time even when unused (a closure with its upvalues, a string), so:

    * unused names and functions are left out;
    * an operation may mark **cold parts** (each from a line ``--: cold`` to a line ``--: end cold`` or the end of
      the file, e.g. the inside of an ``if``): the names and functions only a cold part needs are defined there,
      at its start, so a call that never enters it (a dedup add, a get with nothing due) never pays for them. The
      rest of the file (the hot part) cannot use them, as Lua's scoping also says."""
    own = (resources.files("keyqueue.redis") / "lua" / f"{operation}.lua").read_text()
    prologue, functions = _library()
    bodies = dict(functions)
    colds = list(_LUA_COLD.finditer(own))
    hot = "".join(own[a:b] for a, b in zip([0] + [m.end() for m in colds], [m.start() for m in colds] + [len(own)],
                                            strict=True))

    def definitions(code: str, exclude: set[str], names_too: bool) -> tuple[str, set[str]]:
        # The prologue lines (names: only those used) and library functions ``code`` needs, without ``exclude``.
        needed = _calls(code, bodies) - exclude
        funcs = "".join(body for name, body in functions if name in needed)
        used = _LUA_COMMENT.sub("", funcs + code)
        lines = []
        for line in prologue.splitlines(keepends=True):
            m = _LUA_NAME.match(line)
            if m is None:
                if names_too:  # the prologue's other lines (comments, P) once, at the top
                    lines.append(line)
            elif m.group(1) not in exclude and re.search(rf"\b{m.group(1)}\b", used):
                lines.append(line)
                needed.add(m.group(1))
        return "".join(lines) + funcs, needed

    text, hot_defined = definitions(hot, set(), True)
    parts, pos = [text + "\n"], 0
    for m in colds:
        cold_defs, _ = definitions(m.group(1), hot_defined, False)
        parts += [own[pos:m.start()], cold_defs, m.group(1)]
        pos = m.end()
    parts.append(own[pos:])
    return "".join(parts)


@functools.cache
def script_sha(operation: str) -> str:
    """The SHA1 under which Redis knows ``operation``'s script (what ``EVALSHA`` names)."""
    return hashlib.sha1(script_source(operation).encode()).hexdigest()


def check_name(name: object) -> str:
    """A queue name: a non-empty ``str`` without braces (it becomes the Redis Cluster hash tag ``{name}``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r:.80}")
    if not name or "{" in name or "}" in name:
        raise ValueError(f"name must be a non-empty str without '{{' or '}}', got {name!r:.80}")
    return name


def check_wait_replicas(value: object) -> tuple[int, float] | None:
    """``wait_replicas``: ``None``, or ``(n, timeout)``: an int ``n >= 1`` and a finite number of seconds ``> 0``."""
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"wait_replicas must be None or a tuple (replicas, timeout seconds), got {value!r:.80}")
    n, timeout = value
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"wait_replicas[0] must be an int >= 1 (replicas), got {n!r:.80}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not (math.isfinite(timeout)
                                                                                   and timeout > 0):
        raise ValueError(f"wait_replicas[1] must be a finite number of seconds > 0, got {timeout!r:.80}")
    return n, float(timeout)


def unconfirmed(url: str, operation: str, acks: int, wanted: tuple[int, float]) -> RedisUnavailable:
    """The error of a call that ran on the primary but that fewer than ``wait_replicas`` replicas confirmed."""
    return RedisUnavailable(
        f"Redis at {url} ran {operation}, but only {acks} of {wanted[0]} replicas confirmed it within {wanted[1]:g} s "
        "(wait_replicas): a failover now may undo it; retry (an add is safe to repeat; a get's lease runs out "
        "unrenewed; a done raises LeaseLost if it did finish the key)", operation=operation, address=url,
        code="NOREPLICAS")


def check_key(key: object) -> str:
    """Keys cross processes, so they are ``str``; anything else raises ``TypeError`` naming its type."""
    if type(key) is not str and not isinstance(key, str):
        raise TypeError(f"Redis queue keys must be str, got {type(key).__name__}: {key!r:.80}")
    return key


def check_lease(lease: object) -> float:
    if not isinstance(lease, (int, float)) or isinstance(lease, bool):
        raise TypeError(f"lease must be a number of seconds, got {type(lease).__name__}: {lease!r:.80}")
    if not (math.isfinite(lease) and lease > 0):
        raise ValueError(f"lease must be a finite number of seconds > 0, got {lease!r}")
    return float(lease)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def is_cluster_client(client: Any, *, asyncio: bool) -> bool:
    """Whether ``client`` is redis-py's Redis Cluster client (``redis.cluster.RedisCluster``, or
    ``redis.asyncio.cluster.RedisCluster`` for ``asyncio``)."""
    if asyncio:
        from redis.asyncio.cluster import RedisCluster as AsyncCluster

        return isinstance(client, AsyncCluster)
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def describe_client(client: Any) -> str:
    """What a client talks to, for messages (never credentials): ``redis://host:port/db``, ``unix://path``,
    ``redis+sentinel://<service>`` (the master Sentinel names), ``redis+cluster://host:port,...`` (the startup
    nodes)."""
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:
        return f"redis+sentinel://{service}"
    if pool is None and hasattr(client, "get_node_from_key"):
        nodes = getattr(client, "startup_nodes", None) or {}
        names = list(nodes) if isinstance(nodes, dict) else [getattr(n, "name", str(n)) for n in nodes]
        return "redis+cluster://" + ",".join(str(n) for n in names[:3])
    kwargs = getattr(pool, "connection_kwargs", {}) or {}
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"



def server_of(client: Any, key: str, fallback: str) -> str:
    """The server a call about ``key`` goes to, as well as the client knows it without a round trip: a cluster
    node's ``host:port``, the master a Sentinel pool last found, else ``fallback``."""
    try:
        if hasattr(client, "get_node_from_key") and getattr(client, "connection_pool", None) is None:
            node = client.get_node_from_key(key)
            if node is not None:
                return f"{node.host}:{node.port} (cluster)"
        pool = getattr(client, "connection_pool", None)
        service = getattr(pool, "service_name", None)
        if service is not None:
            master = getattr(getattr(pool, "proxy", pool), "master_address", None)
            if master:
                return f"{master[0]}:{master[1]} (master of {service})"
    except Exception:  # a description only: a client in a bad state still gets its error raised
        pass
    return fallback


def socket_timeout_of(client: Any) -> float | None:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if kwargs is None:  # a cluster client: its nodes' setting
        kwargs = getattr(client, "nodes_manager", None) and getattr(client.nodes_manager, "connection_kwargs", None)
    value = (kwargs or {}).get("socket_timeout")
    return None if value is None else float(value)


@contextlib.contextmanager
def translated(url: str, operation: str) -> Iterator[None]:
    """Turn the ``redis`` package's errors into :class:`RedisUnavailable` / :class:`RedisQueueError` naming ``url``."""
    import redis.exceptions as rx

    try:
        yield
    except rx.RedisError as exc:
        raise translate(url, operation, exc) from exc


def read_budget(hard: float | None, socket_timeout: float | None) -> float | None:
    """Seconds one reply of a ``get`` may take: the time left before ``hard`` (a ``time.monotonic()`` deadline: the
    get's timeout plus :data:`GET_MARGIN`; at least 10 ms), at most ``socket_timeout``. ``None``: the socket timeout
    is the bound (no deadline, or one further away), so the reply is read without changing the socket's timeout."""
    if hard is None:
        return None
    left = max(0.01, hard - time.monotonic())
    return left if socket_timeout is None or left < socket_timeout else None


# Error codes after which the same call can succeed once the deployment settles (a failover, a restart, a slot
# migration): the call did not run, and they are raised as RedisUnavailable.
RETRYABLE_CODES: Final = frozenset({"READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK",
                                    "NOSCRIPT", "BUSY", "NOREPLICAS"})
_CODE = re.compile(r"[A-Z][A-Z_]{1,}")
# A script error as Redis 6 reports it: "ERR Error running script (...): @user_script: 1: -OOM command not allowed
# ..." (Redis 7 replies "OOM command not allowed ... script: ..." instead): the code of the command that failed.
_SCRIPT_CODE = re.compile(r"@user_script: ?\d+: -?([A-Z][A-Z_]+) ")


def error_code(exc: BaseException) -> str | None:
    """The server's error code of a redis-py exception (``OOM``, ``MOVED``, ``READONLY``, ``NOSCRIPT``, ``NOPERM``,
    ``ERR`` ...), or ``None`` for a client-side error (a connection error, a timeout). redis-py strips the code from
    the message of the errors it maps to a class of its own; it keeps it in ``status_code`` (redis-py >= 6) or is
    recovered from the class. An error raised inside a script by a command the script called is reported with that
    command's code."""
    import redis.exceptions as rx

    if not isinstance(exc, rx.ResponseError):
        return None
    text = str(exc)
    inner = _SCRIPT_CODE.search(text)
    if inner is not None and inner.group(1) != "ERR":
        return inner.group(1)
    code = getattr(exc, "status_code", None)
    if code:
        return str(code)
    for cls, name in _class_codes():
        if isinstance(exc, cls):
            return name
    first = text.split(" ", 1)[0]
    return first if _CODE.fullmatch(first) else "ERR"


@functools.cache
def _class_codes() -> tuple[tuple[type, str], ...]:
    import redis.exceptions as rx

    pairs = [("NoScriptError", "NOSCRIPT"), ("ReadOnlyError", "READONLY"), ("NoPermissionError", "NOPERM"),
             ("AskError", "ASK"), ("MovedError", "MOVED"), ("TryAgainError", "TRYAGAIN"),
             ("ClusterDownError", "CLUSTERDOWN"), ("MasterDownError", "MASTERDOWN"), ("BusyLoadingError", "LOADING"),
             ("OutOfMemoryError", "OOM"), ("ExecAbortError", "EXECABORT"), ("ClusterCrossSlotError", "CROSSSLOT"),
             ("AuthenticationError", "NOAUTH")]
    return tuple((getattr(rx, cls), code) for cls, code in pairs if hasattr(rx, cls))


def translate(url: str, operation: str, exc: Exception, *, within: float | None = None) -> RedisQueueError:
    """The keyqueue error for an error of the ``redis`` package (raise it ``from exc``), naming ``operation``, the
    server ``url`` (where the call went) and the server's error code: :class:`RedisUnavailable` for a connection
    error or timeout, or a code the same call can get past once a failover, restart or slot migration is over
    (:data:`RETRYABLE_CODES`); else :class:`RedisQueueError`. ``within``: the read deadline (seconds) a timeout ran
    out of, for the message."""
    import redis.exceptions as rx

    code = error_code(exc)
    if within is not None and isinstance(exc, (rx.TimeoutError, TimeoutError)):
        return RedisUnavailable(f"Redis at {url} did not answer {operation} within {within:.2f} s "
                                "(the connection is dead or the server stalled)",
                                operation=operation, address=url, code=None)
    if isinstance(exc, rx.ClusterError) and "TTL exhausted" in str(exc):
        # redis-py's cluster client followed redirections and retried TRYAGAIN until its attempts ran out: the
        # queue's slot is moving (or the cluster is reconfiguring).
        return RedisUnavailable(f"Redis Cluster node {url} cannot serve {operation} right now (error TRYAGAIN: the "
                                "queue's slot is moving; the client's redirections and retries ran out; retry)",
                                operation=operation, address=url, code="TRYAGAIN")
    if code is None and isinstance(exc, (rx.ConnectionError, rx.TimeoutError, rx.ClusterError, OSError)):
        return RedisUnavailable(f"Redis at {url} is unreachable ({operation}): {exc}", operation=operation,
                                address=url, code=None)
    if code in RETRYABLE_CODES:
        return RedisUnavailable(f"Redis at {url} cannot serve {operation} right now (error {code}; retry): {exc}",
                                operation=operation, address=url, code=code)
    return RedisQueueError(f"Redis at {url} answered {operation} with error {code}: {exc}", operation=operation,
                           address=url, code=code)


# -- rate limiters ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LimiterTree:
    """A :mod:`keyqueue.ratelimit` limiter as the JSON tree add_rate_limited.lua evaluates, and the indexes of its
    per-key limiters (whose failure counts ``forget``/``num_requeues`` address)."""

    json: str
    per_key: tuple[str, ...]


def _seconds(x: float) -> float | str:
    return "inf" if x == math.inf else x


def limiter_tree(limiter: object) -> LimiterTree:
    """Describe ``limiter`` for Redis. Only :mod:`keyqueue.ratelimit`'s limiters can be described (their state lives
    in Redis, shared by every handle); the object itself is used as a description and its own state is never
    touched. Raises ``TypeError`` naming any other type."""
    per_key: list[str] = []
    counter = [0]

    def node(lim: object) -> dict[str, Any]:
        index = counter[0]
        counter[0] += 1
        if isinstance(lim, ItemExponentialFailureRateLimiter):
            per_key.append(str(index))
            return {"t": "exp", "i": index, "base": _seconds(lim.base_delay), "max": _seconds(lim.max_delay)}
        if isinstance(lim, ItemFastSlowRateLimiter):
            per_key.append(str(index))
            return {"t": "fastslow", "i": index, "fast": _seconds(lim.fast_delay), "slow": _seconds(lim.slow_delay),
                    "maxfast": lim.max_fast_attempts}
        if isinstance(lim, BucketRateLimiter):
            return {"t": "bucket", "i": index, "qps": _seconds(lim.qps), "burst": lim.burst}
        if isinstance(lim, MaxOfRateLimiter):
            return {"t": "max", "i": index, "c": [node(c) for c in lim.limiters]}
        if isinstance(lim, WithMaxWaitRateLimiter):
            return {"t": "maxwait", "i": index, "max": _seconds(lim.max_delay), "c": [node(lim.limiter)]}
        raise TypeError(
            "a Redis queue's rate_limiter must be built from keyqueue.ratelimit's limiters (ItemExponentialFailure-, "
            f"ItemFastSlow-, Bucket-, MaxOf-, WithMaxWaitRateLimiter): its state lives in Redis; got "
            f"{type(lim).__name__}: {lim!r:.80}"
        )

    tree = node(limiter)
    if tree["t"] == "max" and not tree["c"]:
        tree = {"t": "max", "i": 0, "c": []}
    return LimiterTree(json.dumps(tree, separators=(",", ":")), tuple(per_key))


# -- replies ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class NotReady:
    """A get that found no key ready."""

    wake_in: float | None  # seconds of queue time until a delayed key or a lease is due (None: never)


class HandleState:
    """One handle's bookkeeping, shared by both shells (no I/O): identity, keys, held leases, shutdown, counters.

    ``lock`` guards ``held``/``lost``/``getters``/flags and the metrics recorder; it is never held across a round
    trip. ``metrics`` (set by the shell, see :mod:`keyqueue.redis._metrics`) is called here, under ``lock``, with
    times of ``metrics_clock`` (the handle's clock, else the monotonic clock).
    """

    def __init__(self, name: str, *, lease: float, clock: Clock | None, stats: bool, url: str) -> None:
        self.name = check_name(name)
        self.lease = check_lease(lease)
        self.lease_us = max(1, round(self.lease * 1e6))
        self.clock = clock
        self.url = url
        self.holder = uuid.uuid4().hex[:16]
        self.prefix = prefix = f"kq:{{{name}}}:"  # every key of the queue: one hash tag, one Cluster slot
        self.keys = [prefix + role for role in _KEY_ROLES]  # every script's KEYS
        self.notify_key = prefix + "notify"
        self.wake_key = f"{prefix}wake:{self.holder}"  # this handle's private wake-up list (shutdown, clock jumps)
        self.lock = threading.Lock()
        self.held: dict[str, str] = {}  # key -> "token|holder" of the lease this handle holds
        self.lost: set[tuple[str, str]] = set()  # (key, lease) the heartbeat found lost
        self.getters = 0  # get() calls of this handle blocked in Redis right now
        self.shutting_down = False
        self.draining = False
        self.counts = Counts() if stats else None
        self.expired_seen = 0
        self.layout_ok = False  # the queue's layout was checked (on_layout): set before this handle's first operation
        self.metrics: SharedQueueRecorder | None = None
        self.metrics_clock: Clock = clock if clock is not None else RealClock()

    # -- arguments (each starts with the queue time, "" = Redis TIME) ---------------------------------------

    def now_arg(self) -> str:
        return "" if self.clock is None else str(self.clock.now_ns() // 1000)

    def since_arg(self) -> str:
        """An add's ARGV[1]: the queue time, or "" (Redis TIME) if this handle records metrics, else "-": the time a
        key became dirty is only read for workqueue_queue_duration, so an add of a handle without metrics does not
        read the clock (add.lua)."""
        if self.clock is not None:
            return self.now_arg()
        return "" if self.metrics is not None else "-"

    def add_args(self, key: object) -> list[str]:
        return [self.since_arg(), check_key(key)]

    def add_many_args(self, keys: Iterable[object]) -> list[list[str]]:
        """One add's arguments per key, every key checked before anything is sent."""
        if isinstance(keys, (str, bytes)):
            raise TypeError(f"add_many takes an iterable of str keys, not one {type(keys).__name__}: {keys!r:.80}")
        now = self.since_arg()
        return [[now, check_key(k)] for k in keys]

    def add_after_args(self, key: object, delay: object) -> list[str]:
        d = check_delay(delay)
        return [self.now_arg(), check_key(key), "inf" if d == math.inf else repr(d)]

    def rate_args(self, key: object, tree: LimiterTree, *, record_only: bool = False) -> list[str]:
        return [self.now_arg(), check_key(key), tree.json, "1" if record_only else ""]

    def get_args(self) -> list[str]:
        if self.metrics is None:
            return [self.now_arg(), str(self.lease_us), self.holder]
        return [self.now_arg(), str(self.lease_us), self.holder, "1"]  # and tell me how long the key waited

    # -- outcomes ---------------------------------------------------------------------------------------------

    def on_layout(self, reply: Any) -> None:
        """The layout script's reply: 0 lets this handle use the queue; else the queue holds state of an older
        keyqueue (before the per-key state hash) and :class:`RedisQueueError` says what to delete."""
        if int(reply) == 0:
            self.layout_ok = True
            return
        keys = " ".join(self.prefix + role for role in _OLD_KEY_ROLES)
        raise RedisQueueError(
            f"Redis queue {self.name!r} at {self.url} holds state written by an older keyqueue (its "
            f"{self.prefix}dirty / {self.prefix}lease hashes, before the per-key state hash), which this version "
            f"cannot read. Stop every handle of the older version, then delete the queue's state: q.delete(), or "
            f"DEL {keys}")

    def dropped(self) -> AddResult:
        if self.counts is not None:
            self.counts.add(AddResult.DROPPED)
        return AddResult.DROPPED

    def on_add(self, reply: Any, *, retry: bool = False) -> AddResult:
        """An add's outcome; ``retry``: it was an accepted ``add_after``/``add_rate_limited`` (workqueue_retries)."""
        outcome = _RESULTS[int(reply)]
        if self.counts is not None or self.metrics is not None:
            with self.lock:
                if self.counts is not None:
                    self.counts.add(outcome)
                m = self.metrics
                if m is not None:
                    if outcome is AddResult.QUEUED or outcome is AddResult.MARKED:
                        m.adds_total[0] += 1  # it made the key dirty
                    if retry:
                        m.retry()
        return outcome

    def on_adds(self, replies: list[Any]) -> list[AddResult]:
        """A pipelined add_many batch's outcomes, in order. An error reply (the batch is not atomic: the adds before
        and after it were applied) raises :class:`RedisQueueError` after the applied ones are counted."""
        results = [self.on_add(r) for r in replies if not isinstance(r, Exception)]
        for r in replies:
            if isinstance(r, Exception):
                raise translate(self.url, "add_many", r) from r
        return results

    def on_len(self, reply: Any) -> tuple[int, int]:
        """The len script's reply: (fifo length, dirty keys); counts the keys it made dirty as this handle's adds."""
        dirtied = int(reply[2])
        if dirtied and self.metrics is not None:
            with self.lock:
                self.metrics.adds_total[0] += dirtied
        return int(reply[0]), int(reply[1])

    def on_get(self, reply: Any) -> str | NotReady:
        """The get script's reply (one string, or {string, reclaimed keys}; see get.lua): the key handed out (now in
        ``held``), or :class:`NotReady`."""
        if type(reply) is str and reply.startswith("1 0 0 ") and self.counts is None and self.metrics is None:
            # The common case: a key handed out, nothing fired or reclaimed, nothing to count.
            _, _, _, _, lease, key = reply.split(" ", 5)
            with self.lock:
                self.held[key] = lease
            return key
        if isinstance(reply, list):
            text, expired = _text(reply[0]), [_text(k) for k in reply[1]]
        else:
            text, expired = _text(reply), []
        if text[0] == "1":
            _, fired_s, dirtied_s, waited, lease, key = text.split(" ", 5)
        else:
            _, fired_s, dirtied_s, wake, now = text.split(" ")
        fired, dirtied = int(fired_s), int(dirtied_s)
        if expired:
            log.warning("Redis queue %r: the lease of %d key(s) ran out; handed out again: %s",
                        self.name, len(expired), ", ".join(repr(k) for k in expired[:10]))
        handed = text[0] == "1"
        waited_us = None if not handed or waited == "-" else int(waited)
        with self.lock:  # one acquisition for the whole outcome
            self.expired_seen += len(expired)
            if self.counts is not None:
                self.counts.fired += fired
                self.counts.adds += fired
                if handed:
                    self.counts.gets += 1
            if self.metrics is not None:
                self.metrics.adds_total[0] += dirtied
            if handed:
                self.held[key] = lease
                if self.metrics is not None:
                    self.metrics.handed_out(key, self.metrics_clock.now_ns(),
                                            None if waited_us is None else waited_us * 1000)
        if handed:
            return key
        wake_in = None
        if wake != "-" and wake != "inf":
            if self.clock is None:  # Redis time: the server said what time it is
                wake_in = max(0.0, (float(wake) - float(now)) / 1e6)
            else:  # the test clock decides (a FakeClock: None, only a step, which wakes us, moves time)
                wake_in = self.clock.real_wait(int(wake) * 1000)
        return NotReady(wake_in)

    def begin_done(self, key: object) -> tuple[str, bool] | None:
        """Take the lease of ``key`` out of ``held`` for a done(): (lease, whether the heartbeat found it lost, so
        that nothing need be sent), or None if this handle does not hold ``key``."""
        k = check_key(key)
        with self.lock:
            lease = self.held.pop(k, None)
            if lease is None:
                return None
            return lease, bool(self.lost) and (k, lease) in self.lost

    def abort_done(self, key: str, lease: str) -> None:
        with self.lock:
            self.held[key] = lease

    def end_done(self, key: str, lease: str, reply: Any, idle: Callable[[], None] | None = None) -> bool:
        """The done script's reply (-1 lost, 0 finished, 1 queued again): True for a redelivery; raises
        :class:`LeaseLost` for -1. ``idle`` is called under ``lock`` if this handle holds no key afterwards while
        a drain waits for that (``draining``)."""
        code = int(reply)
        with self.lock:
            try:
                if self.lost:
                    self.lost.discard((key, lease))
                if self.counts is not None and code >= 0:
                    self.counts.dones += 1
                    self.counts.redelivered += code == 1
                if self.metrics is not None:
                    if code >= 0:
                        self.metrics.finished(key, self.metrics_clock.now_ns())
                    else:  # the lease ran out: this handle's work on it was not finished, nothing to observe
                        self.metrics.abandon(key)
            finally:
                if idle is not None and self.draining and not self.held:
                    idle()
        if code < 0:
            raise LeaseLost(key, int(lease.split("|", 1)[0]), self.name)
        return code == 1

    def renew_args(self) -> tuple[list[str], list[tuple[str, str]]] | None:
        with self.lock:
            pairs = [(k, v) for k, v in self.held.items() if (k, v) not in self.lost]
        if not pairs:
            return None
        args = [self.now_arg(), str(self.lease_us)]
        for k, v in pairs:
            args += (k, v)
        return args, pairs

    def on_renew(self, pairs: list[tuple[str, str]], reply: Any) -> None:
        lost_keys = {_text(k) for k in reply}
        if not lost_keys:
            return
        with self.lock:
            # A key finished (done) while the renewal was under way is not lost: only a lease still held counts.
            really = [k for k, v in pairs if k in lost_keys and self.held.get(k) == v]
            self.lost.update((k, self.held[k]) for k in really)
        if really:
            log.warning("Redis queue %r: lease lost for %s (not renewed in time; handed out again)",
                        self.name, ", ".join(repr(k) for k in sorted(really)[:10]))

    def token(self, key: str) -> int:
        with self.lock:
            lease = self.held.get(key)
        if lease is None:
            raise KeyError(f"this handle does not hold key {key!r}")
        return int(lease.split("|", 1)[0])

    def stats(self) -> QueueStats:
        if self.counts is None:
            raise RuntimeError("this queue does not count its decisions; build it with stats=True")
        with self.lock:
            return self.counts.snapshot()

    def block_slice(self, remaining: float | None, wake_in: float | None, socket_timeout: float | None) -> float:
        """Seconds for one blocking wait (BLPOP): the shortest of the time left, the time until something is due,
        and a bound below the client's socket timeout (so a wait is never mistaken for a dead connection).
        0 means "do not wait: look again now". Never below 10 ms otherwise: Redis 6.2 turns a BLPOP timeout of
        about a millisecond into "wait forever"."""
        bound = 60.0 if socket_timeout is None else max(0.01, socket_timeout - 1.0 if socket_timeout > 2 else
                                                        socket_timeout / 2)
        wait = bound
        if remaining is not None:
            wait = min(wait, remaining)
        if wake_in is not None:
            wait = min(wait, wake_in + 0.001)
        return 0.0 if wait < 0.001 else max(wait, 0.01)
