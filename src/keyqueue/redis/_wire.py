"""The lean client path of the Redis shells: the hot scripts sent through redis-py's own connections and reply
parser, without the per-command machinery of ``Redis.execute_command``.

Measured on redis-py 8.1 with hiredis (thread CPU per call, loopback): ``client.ping()`` costs ~30 µs of client CPU,
one ``send_packed_command`` + ``read_response`` on a connection already held ~11 µs. The difference is the generic
path's connection pool checkout (a lock, a readiness ``recv`` with two ``settimeout`` calls, observability
counters, a release event: ~7 µs), the retry closure, argument encoding by the generic packer (~2.5 µs for an
``EVALSHA``) and response-callback dispatch. Here:

* **Packing**: each operation's ``EVALSHA <sha> 1 <prefix>`` head is packed once per argument count
  (:class:`Packer`); only the arguments are encoded per call (with the client's encoding).
* **One checkout**: a handle keeps the connections it opened (:class:`SyncWire`), built with its client's
  connection settings (``connection_pool.connection_class`` and ``connection_kwargs``: address, credentials,
  timeouts, retry policy, protocol, encoding), on a stack under a lock; a call pops one, uses it, pushes it back.
  A connection taken from the stack is checked with one ``poll(0)``: readable means the server closed it (a restart)
  or left bytes behind, and it is reconnected first, as redis-py's pool does at checkout.
* **Same behaviour**: a call runs inside the connection's own retry policy (``conn.retry``, what
  ``execute_command`` uses: a client built from a URL by keyqueue has none); redis-py disconnects a connection on
  any send or read error, so no late reply is read by a later command; error replies raise redis-py's exceptions
  (``NoScriptError`` included, which the shells answer by loading the script and sending the call once more).
* **Deadlines**: :meth:`SyncWire.command_within` sends one command with its reply awaited at most a given number of
  seconds, never resent; if it has to open a connection first, the connect runs on a helper thread and the caller
  waits only for what is left of the deadline (a connect that finishes later leaves its connection on the stack).
* **Fork**: a child process drops the connections its parent's handles held (never uses a socket it shares).
* **asyncio** (:class:`AsyncWire`): the same, with ``redis.asyncio``'s connections; one event loop uses it (no
  lock: nothing is awaited between looking at the stack and taking from it), readiness is the connection's own
  ``can_read()`` (no system call there), and deadlines are the caller's cancellation scopes.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from typing import Any, Final

import redis.exceptions as rx

__all__ = ["AsyncWire", "Packer", "SyncWire"]

_READABLE: Final = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


class Packer:
    """RESP for ``EVALSHA <sha> 1 <prefix> args...`` of one queue: heads cached per (script, argument count)."""

    __slots__ = ("_encoding", "_errors", "_heads", "_prefix")

    def __init__(self, prefix: str, *, encoding: str = "utf-8", errors: str = "strict") -> None:
        self._encoding = encoding
        self._errors = errors
        self._prefix = prefix.encode(encoding, errors)
        self._heads: dict[tuple[str, int], bytes] = {}

    def head(self, sha: str, nargs: int) -> bytes:
        head = self._heads.get((sha, nargs))
        if head is None:
            p = self._prefix
            head = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n" % (
                4 + nargs, len(sha), sha.encode(), len(p), p)
            self._heads[(sha, nargs)] = head
        return head

    def evalsha(self, sha: str, args: list[str]) -> bytes:
        """One ``EVALSHA`` of ``sha`` with the queue's prefix as its one key and ``args`` (``str``) as ``ARGV``."""
        out = self.head(sha, len(args))
        enc, err = self._encoding, self._errors
        for a in args:  # two or three short arguments: concatenating beats collecting parts and joining them
            b = a.encode(enc, err)
            out += b"$%d\r\n%s\r\n" % (len(b), b)
        return out

    def command(self, *args: Any) -> bytes:
        """Any command of ``str``/``int``/``float`` arguments (BLPOP, a wake-up)."""
        parts = [b"*%d\r\n" % len(args)]
        enc, err = self._encoding, self._errors
        for a in args:
            b = a.encode(enc, err) if isinstance(a, str) else repr(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(parts)


class _Held:
    """A connection of a :class:`SyncWire` and the ``poll`` object watching its current socket."""

    __slots__ = ("conn", "poll", "sock")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sock: Any = None
        self.poll: Any = None

    def stale(self) -> bool:
        """True if the connection must be (re)connected before use: not connected, or its socket is readable while
        no command is outstanding (the server closed it, or bytes were left behind)."""
        sock = getattr(self.conn, "_sock", None)
        if sock is None:
            return True
        if sock is not self.sock:
            self.sock, self.poll = sock, select.poll()
            self.poll.register(sock, _READABLE)
        return bool(self.poll.poll(0))


_WIRES: weakref.WeakSet[SyncWire] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for wire in list(_WIRES):
        wire._forget_all()


os.register_at_fork(after_in_child=_after_fork_in_child)


class SyncWire:
    """The connections one threaded handle talks to Redis on (see the module). Thread-safe."""

    def __init__(self, client: Any) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = dict(pool.connection_kwargs)
        self._lock = threading.Lock()
        self._idle: list[_Held] = []
        self._all: set[_Held] = set()  # every connection this wire opened and has not closed (for close())
        self._closed = False
        _WIRES.add(self)

    # -- connections ------------------------------------------------------------------------------------------

    def _new(self) -> _Held:
        held = _Held(self._connection_class(**self._kwargs))
        with self._lock:
            self._all.add(held)
        return held

    def _take(self) -> _Held:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._new()

    def _give(self, held: _Held) -> None:
        with self._lock:
            if not self._closed and held in self._all:
                self._idle.append(held)
                return
        held.conn.disconnect()

    def _drop(self, held: _Held) -> None:
        with self._lock:
            self._all.discard(held)
        held.conn.disconnect()

    def _forget_all(self) -> None:
        # In a forked child: the sockets belong to the parent; drop them without a word on the wire.
        self._lock = threading.Lock()
        self._idle.clear()
        self._all.clear()

    def close(self) -> None:
        """Disconnect every connection; calls still running disconnect theirs when they finish."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for held in idle:
            held.conn.disconnect()

    # -- calls ------------------------------------------------------------------------------------------------

    def call(self, packed: bytes) -> Any:
        """Send one packed command and return its reply, inside the connection's retry policy (as
        ``execute_command``): at most the socket timeout per attempt. Raises redis-py's exceptions."""
        held = self._take()
        conn = held.conn
        try:
            if held.stale():
                conn.disconnect()  # the next send reconnects (within the retry policy)

            def attempt() -> Any:
                conn.send_packed_command((packed,))
                return conn.read_response()

            return conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        finally:
            self._give(held)

    def command_within(self, budget: float | None, packed: bytes, *, deadline: float | None = None) -> Any:
        """Send one packed command once (no retry) and return its reply, read at most ``budget`` seconds (``None``:
        the socket timeout). ``deadline`` (``time.monotonic()``): opening a connection first is bounded by it too
        (else by the connect and socket timeouts). A reply that does not come in time raises redis-py's
        ``TimeoutError`` and the connection is dropped (redis-py disconnects on any read error)."""
        held = self._take()
        give = True  # False: a connect still running on a helper thread hands the connection back itself
        try:
            conn = held.conn
            if held.stale():
                conn.disconnect()
                if deadline is None:
                    conn.connect()
                elif not self._connect_by(held, deadline):
                    give = False
                    raise rx.TimeoutError("Timeout connecting to server (within the call's deadline)")
            conn.send_packed_command((packed,))
            return conn.read_response() if budget is None else conn.read_response(timeout=budget)
        finally:
            if give:
                self._give(held)

    def _connect_by(self, held: _Held, deadline: float) -> bool:
        # Connect ``held`` on a helper thread and wait for it until ``deadline``: True when connected (a connect
        # error is raised here). False: still connecting; the helper finishes on its own (bounded by redis-py's
        # connect and socket timeouts) and then puts the connection on the idle stack, or drops it if it failed.
        lock = threading.Lock()
        done = threading.Event()
        state: dict[str, Any] = {"finished": False, "abandoned": False, "error": None}

        def run() -> None:
            try:
                held.conn.connect()
            except BaseException as exc:  # handed to the waiting caller, or dropped if it left
                state["error"] = exc
            with lock:
                state["finished"] = True
                abandoned = state["abandoned"]
            done.set()
            if abandoned:
                if state["error"] is None:
                    self._give(held)
                else:
                    self._drop(held)

        threading.Thread(target=run, name="keyqueue-redis-connect", daemon=True).start()
        done.wait(max(0.0, deadline - time.monotonic()))
        with lock:
            if not state["finished"]:
                state["abandoned"] = True
                return False
        if state["error"] is not None:
            raise state["error"]
        return True


class AsyncWire:
    """The connections one asyncio handle talks to Redis on (see the module): used from its event loop only."""

    def __init__(self, client: Any) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = dict(pool.connection_kwargs)
        self._idle: list[Any] = []
        self._all: set[Any] = set()
        self._closed = False

    def _take(self) -> Any:
        if self._idle:
            return self._idle.pop()
        conn = self._connection_class(**self._kwargs)
        self._all.add(conn)
        return conn

    async def _stale(self, conn: Any) -> bool:
        # Connected, and readable while no command is outstanding (closed by the server, or bytes left behind).
        if not conn.is_connected:
            return False  # the send connects it
        check = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis-py < 8: the older name
        try:
            return bool(await check())
        except OSError:
            return True

    async def _give(self, conn: Any) -> None:
        if not self._closed and conn in self._all:
            self._idle.append(conn)
        else:
            await conn.disconnect()

    async def call(self, packed: bytes) -> Any:
        """Send one packed command and return its reply, inside the connection's retry policy (as
        ``execute_command``). Cancelled, redis-py drops the connection (no late reply is read by a later call)."""
        conn = self._take()
        try:
            if await self._stale(conn):
                await conn.disconnect()  # closed by the server, or bytes left behind: the send reconnects

            async def attempt() -> Any:
                await conn.send_packed_command((packed,))
                return await conn.read_response()

            return await conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        finally:
            await self._give(conn)

    async def close(self) -> None:
        """Disconnect every connection; calls still running disconnect theirs when they finish."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.disconnect()
