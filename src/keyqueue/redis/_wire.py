"""The lean client path of the Redis shells: the hot scripts sent through redis-py's own connections and reply
parser, without the per-command machinery of ``Redis.execute_command``.

Measured on redis-py 8.1 with hiredis (thread CPU per call, loopback): ``client.ping()`` costs ~30 µs of client CPU,
one ``send_packed_command`` + ``read_response`` on a connection already held ~11 µs. The difference is the generic
path's connection pool checkout (a lock, a readiness ``recv`` with two ``settimeout`` calls, observability
counters, a release event: ~7 µs), the retry closure, argument encoding by the generic packer (~2.5 µs for an
``EVALSHA``) and response-callback dispatch. Here:

* **Packing**: each operation's ``EVALSHA <sha> <n> <the queue's keys>`` head is packed once per argument count
  (:class:`Packer`); only the arguments are encoded per call (with the client's encoding).
* **One checkout**: a handle takes connections from its client's own pool (``pool.get_connection()``: the
  connection class and settings the user chose, Sentinel's master lookup included) and keeps them (:class:`SyncWire`)
  on a stack under a lock until it closes, when it gives them back (``pool.release``); a call pops one, uses it,
  pushes it back. A connection taken from the stack is checked with one ``poll(0)``: readable means the server
  closed it (a restart) or left bytes behind, and it is reconnected first, through the connection class's own
  ``connect`` (a Sentinel-managed connection asks the Sentinels for the master there).
* **Same behaviour**: a call runs inside the connection's own retry policy (``conn.retry``, what
  ``execute_command`` uses: a client built from a URL by keyqueue has none); redis-py disconnects a connection on
  any send or read error, so no late reply is read by a later command; error replies raise redis-py's exceptions
  (``NoScriptError`` included, answered here by a ``SCRIPT LOAD`` on the same connection and the call sent once
  more, so the script is loaded on the server that lacks it). Any failure other than an error reply disconnects
  the connection, so no late reply is left for the next command.
* **Deadlines**: :meth:`SyncWire.command_within` sends one command with its reply awaited at most a given number of
  seconds, never resent; if it has to open a connection first, the connect runs on a helper thread and the caller
  waits only for what is left of the deadline (a connect that finishes later leaves its connection on the stack).
* **Fork**: a child process drops the connections its parent's handles held (never uses a socket it shares).
* **asyncio** (:class:`AsyncWire`): the same, with ``redis.asyncio``'s connections; one event loop uses it (no
  lock: nothing is awaited between looking at the stack and taking from it), readiness is the connection's own
  ``can_read()`` (no system call there), and deadlines are the caller's cancellation scopes.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import weakref
from typing import Any, Final

import redis.exceptions as rx

__all__ = ["AsyncWire", "Packer", "SyncWire", "address_of", "note_address"]

_READABLE: Final = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


class Packer:
    """RESP for ``EVALSHA <sha> <n> <keys...> args...`` of one queue (its keys are the same for every script):
    heads cached per (script, argument count)."""

    __slots__ = ("_encoding", "_errors", "_heads", "_keys", "_nkeys")

    def __init__(self, keys: list[str], *, encoding: str = "utf-8", errors: str = "strict") -> None:
        self._encoding = encoding
        self._errors = errors
        packed = [k.encode(encoding, errors) for k in keys]
        self._keys = b"$%d\r\n%d\r\n" % (len(str(len(packed))), len(packed)) + b"".join(
            b"$%d\r\n%s\r\n" % (len(k), k) for k in packed)
        self._nkeys = len(packed)
        self._heads: dict[tuple[str, int], bytes] = {}

    def head(self, sha: str, nargs: int) -> bytes:
        head = self._heads.get((sha, nargs))
        if head is None:
            head = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n" % (3 + self._nkeys + nargs, len(sha), sha.encode())
            head += self._keys
            self._heads[(sha, nargs)] = head
        return head

    def evalsha(self, sha: str, args: list[str]) -> bytes:
        """One ``EVALSHA`` of ``sha`` with the queue's keys as ``KEYS`` and ``args`` (``str``) as ``ARGV``."""
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


def _checkout(pool: Any) -> Any:
    """A connection from ``pool`` (connected, and checked by the pool as at any checkout)."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py < 5.1 names the command it is for
        return pool.get_connection("EVALSHA")


def address_of(conn: Any) -> str:
    """``host:port`` (or the socket path) of the server a connection talks to (the one it last connected to)."""
    path = getattr(conn, "path", None)
    if path:
        return f"unix://{path}"
    return f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"


def note_address(exc: BaseException, conn: Any) -> None:
    """Remember on ``exc`` the server the failed call talked to (for :func:`keyqueue.redis._protocol.translate`)."""
    with contextlib.suppress(Exception):
        exc.keyqueue_address = address_of(conn)  # type: ignore[attr-defined]


def _exchange(conn: Any, packed: bytes, load: bytes | None, then: tuple[bytes, ...] | None,
              budget: float | None) -> Any:
    # One command (and the commands of ``then`` right behind it, in the same send) and their replies; NOSCRIPT
    # answered by ``load`` and the command once more (_after_error). With ``then`` the result is [reply, the last
    # of then's replies]. Every reply sent for is read, also when the command's is an error, so that the connection
    # stays in step; any other failure (a timeout, a reset) disconnects it, whatever the connection class does on
    # its own (Sentinel's keeps the connection on a read timeout, which would leave the late reply for the next
    # command).
    try:
        conn.send_packed_command((packed,) if then is None else (packed, *then))
        try:
            reply = conn.read_response() if budget is None else conn.read_response(timeout=budget)
        except rx.ResponseError as exc:
            reply = _after_error(conn, exc, packed, load, then, budget)
        if then is None:
            return reply
        return [reply, _read_then(conn, then, budget)]
    except rx.ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise


def _read_then(conn: Any, then: tuple[bytes, ...], budget: float | None) -> Any:
    # The replies of ``then``'s commands, all of them (the connection stays in step): the last one, or the first
    # error reply among them, raised once all are read.
    error: rx.ResponseError | None = None
    last = None
    for _ in then:
        try:
            last = conn.read_response() if budget is None else conn.read_response(timeout=budget)
        except rx.ResponseError as exc:
            error = error or exc
    if error is not None:
        raise error
    return last


def _after_error(conn: Any, exc: rx.ResponseError, packed: bytes, load: bytes | None, then: tuple[bytes, ...] | None,
                 budget: float | None) -> Any:
    # The command's reply was an error: the replies to ``then`` are read (the connection stays in step); NOSCRIPT
    # with a ``load`` loads the script and sends the command (and ``then``) once more: the new reply, ``then``'s
    # still to read. Any other error is raised.
    def read() -> Any:
        return conn.read_response() if budget is None else conn.read_response(timeout=budget)

    if then is not None:
        with contextlib.suppress(rx.ResponseError):
            _read_then(conn, then, budget)
    if load is None or not isinstance(exc, rx.NoScriptError):
        raise exc
    conn.send_packed_command((load, packed) if then is None else (load, packed, *then))
    read()
    try:
        return read()
    except rx.ResponseError:
        if then is not None:
            with contextlib.suppress(rx.ResponseError):
                _read_then(conn, then, budget)
        raise


class SyncWire:
    """The connections one threaded handle talks to Redis on (see the module). Thread-safe."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._lock = threading.Lock()
        self._idle: list[_Held] = []
        self._all: set[_Held] = set()  # every connection this wire took from the pool and holds (for close())
        self._closed = False
        _WIRES.add(self)

    # -- connections ------------------------------------------------------------------------------------------

    def _new(self) -> _Held:
        held = _Held(_checkout(self._pool))
        with self._lock:
            self._all.add(held)
        return held

    def _take(self) -> _Held | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return None

    def _give(self, held: _Held) -> None:
        with self._lock:
            if not self._closed and held in self._all:
                self._idle.append(held)
                return
            self._all.discard(held)
        self._release(held)

    def _drop(self, held: _Held) -> None:
        with self._lock:
            self._all.discard(held)
        held.conn.disconnect()
        self._release(held)

    def _release(self, held: _Held) -> None:
        with contextlib.suppress(Exception):  # a pool reset (fork, client closed) may no longer know it
            self._pool.release(held.conn)

    def _forget_all(self) -> None:
        # In a forked child: the sockets belong to the parent; drop them without a word on the wire (the pool
        # resets itself in the child).
        self._lock = threading.Lock()
        self._idle.clear()
        self._all.clear()

    def close(self) -> None:
        """Give every idle connection back to the client's pool; calls still running give theirs back when they
        finish."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            for held in idle:
                self._all.discard(held)
        for held in idle:
            self._release(held)

    # -- calls ------------------------------------------------------------------------------------------------

    def call(self, packed: bytes, load: bytes | None = None, then: tuple[bytes, ...] | None = None) -> Any:
        """Send one packed command and return its reply, inside the connection's retry policy (as
        ``execute_command``): at most the socket timeout per attempt. ``load``: a packed ``SCRIPT LOAD`` sent on
        the same connection when the server does not know the script (``NOSCRIPT``: first use, a restart, a
        failover), then the command once more. ``then``: packed commands sent right behind it (a write and a
        ``WAIT``), the result then ``[reply, the last of their replies]``. Raises redis-py's exceptions (with the
        server's address noted)."""
        held = self._take()
        if held is None:
            held = self._new()
        conn = held.conn
        try:
            if held.stale():
                conn.disconnect()  # the next send reconnects (within the retry policy; Sentinel: to the master)

            def attempt() -> Any:
                if getattr(conn, "_sock", None) is None:
                    conn.connect()  # the connection class's own connect (Sentinel: asks for the master first)
                return _exchange(conn, packed, load, then, None)

            return conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        except rx.RedisError as exc:
            note_address(exc, conn)
            raise
        finally:
            self._give(held)

    def command_within(self, budget: float | None, packed: bytes, *, deadline: float | None = None,
                       load: bytes | None = None, then: tuple[bytes, ...] | None = None) -> Any:
        """Send one packed command once (no retry) and return its reply, read at most ``budget`` seconds (``None``:
        the socket timeout). ``deadline`` (``time.monotonic()``): taking a connection from the pool and opening it
        is bounded by it too (else by the connect and socket timeouts). ``load`` and ``then`` as in :meth:`call`.
        A reply that does not come in time raises redis-py's ``TimeoutError`` and the connection is dropped
        (redis-py disconnects on any read error)."""
        held = self._take()
        if held is None or held.stale():  # stale: not connected, or closed by the server
            if held is not None:
                held.conn.disconnect()
            held = self._open_by(held, deadline)
        conn = held.conn
        try:
            return _exchange(conn, packed, load, then, budget)
        except rx.RedisError as exc:
            note_address(exc, conn)
            raise
        finally:
            self._give(held)

    def _open_by(self, held: _Held | None, deadline: float | None) -> _Held:
        # A connected connection: ``held`` reconnected, or a new one from the pool (which connects it), waited for
        # at most until ``deadline``. Past it: the work goes on on a helper thread (bounded by redis-py's connect
        # and socket timeouts), which leaves the connection on the idle stack (or drops it if it failed), and
        # redis-py's TimeoutError is raised here.
        def open_() -> _Held:
            if held is None:
                return self._new()
            held.conn.connect()
            return held

        if deadline is None:
            try:
                return open_()
            except BaseException:
                if held is not None:
                    self._give(held)
                raise
        lock = threading.Lock()
        done = threading.Event()
        state: dict[str, Any] = {"finished": False, "abandoned": False, "error": None, "held": held}

        def run() -> None:
            try:
                state["held"] = open_()
            except BaseException as exc:  # handed to the waiting caller, or dropped if it left
                state["error"] = exc
            with lock:
                state["finished"] = True
                abandoned = state["abandoned"]
            done.set()
            if abandoned and state["held"] is not None:
                if state["error"] is None:
                    self._give(state["held"])
                else:
                    self._drop(state["held"])

        threading.Thread(target=run, name="keyqueue-redis-connect", daemon=True).start()
        done.wait(max(0.0, deadline - time.monotonic()))
        with lock:
            if not state["finished"]:
                state["abandoned"] = True
                raise rx.TimeoutError("Timeout connecting to server (within the call's deadline)")
        if state["error"] is not None:
            if state["held"] is not None:
                self._give(state["held"])
            raise state["error"]
        result: _Held = state["held"]
        return result


async def _acheckout(pool: Any) -> Any:
    try:
        return await pool.get_connection()
    except TypeError:  # redis-py < 5.1 names the command it is for
        return await pool.get_connection("EVALSHA")


class AsyncWire:
    """The connections one asyncio handle talks to Redis on (see the module): used from its event loop only."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._idle: list[Any] = []
        self._all: set[Any] = set()
        self._closed = False

    async def _take(self) -> Any:
        if self._idle:
            return self._idle.pop()
        conn = await _acheckout(self._pool)
        self._all.add(conn)
        return conn

    async def _stale(self, conn: Any) -> bool:
        # Connected, and readable while no command is outstanding (closed by the server, or bytes left behind).
        if not conn.is_connected:
            return False  # the send connects it
        check = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis-py < 8: the older name
        try:
            return bool(await check())
        except (OSError, rx.ConnectionError):  # the parser saw the server's end of stream
            return True

    async def _give(self, conn: Any) -> None:
        if not self._closed and conn in self._all:
            self._idle.append(conn)
        else:
            self._all.discard(conn)
            with contextlib.suppress(Exception):
                await self._pool.release(conn)

    async def call(self, packed: bytes, load: bytes | None = None, then: tuple[bytes, ...] | None = None) -> Any:
        """Send one packed command and return its reply, inside the connection's retry policy (as
        ``execute_command``); ``load`` and ``then`` as in :meth:`SyncWire.call`. Cancelled, redis-py drops the
        connection (no late reply is read by a later call)."""
        conn = await self._take()
        try:
            if await self._stale(conn):
                await conn.disconnect()  # closed by the server, or bytes left behind: the send reconnects

            async def attempt() -> Any:
                try:
                    return await exchange()
                except rx.ResponseError:
                    raise
                except BaseException:  # a timeout, a reset, a cancellation: never leave a reply unread (as sync)
                    with contextlib.suppress(Exception):
                        await conn.disconnect()
                    raise

            async def exchange() -> Any:
                if not conn.is_connected:
                    await conn.connect()  # the connection class's own connect (Sentinel: asks for the master)
                await conn.send_packed_command((packed,) if then is None else (packed, *then))
                try:
                    reply = await conn.read_response()
                except rx.ResponseError as exc:
                    if then is not None:
                        with contextlib.suppress(rx.ResponseError):
                            await read_then(then)
                    if load is None or not isinstance(exc, rx.NoScriptError):
                        raise
                    await conn.send_packed_command((load, packed) if then is None else (load, packed, *then))
                    await conn.read_response()
                    try:
                        reply = await conn.read_response()
                    except rx.ResponseError:
                        if then is not None:
                            with contextlib.suppress(rx.ResponseError):
                                await read_then(then)
                        raise
                return reply if then is None else [reply, await read_then(then)]

            async def read_then(then: tuple[bytes, ...]) -> Any:  # as _read_then
                error: rx.ResponseError | None = None
                last = None
                for _ in then:
                    try:
                        last = await conn.read_response()
                    except rx.ResponseError as exc:
                        error = error or exc
                if error is not None:
                    raise error
                return last

            return await conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        except rx.RedisError as exc:
            note_address(exc, conn)
            raise
        finally:
            await self._give(conn)

    async def close(self) -> None:
        """Give every idle connection back to the client's pool; calls still running give theirs back when they
        finish."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            self._all.discard(conn)
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
