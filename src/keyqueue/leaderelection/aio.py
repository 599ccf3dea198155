"""Leader election for asyncio: :class:`LeaderElector`, the same algorithm and arguments as
:class:`keyqueue.leaderelection.LeaderElector` (see that module for the timing rules).

The official ``kubernetes`` client is blocking, so each attempt (a read and at most one write, each bounded by its
request timeout) runs in the loop's default executor (:func:`asyncio.to_thread`); decisions, waits and callbacks
happen on the event loop. Waits follow the elector's clock, including a :class:`keyqueue.FakeClock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

from keyqueue.leaderelection._elector import ElectorBase, log

__all__ = ["LeaderElector"]


class LeaderElector(ElectorBase):
    """Campaign for a Lease in a task of the running event loop.

    Arguments and :meth:`is_leader` / :meth:`leader` as :class:`keyqueue.leaderelection.LeaderElector`.
    Callbacks run on the event loop; one that returns an awaitable (a coroutine function) is run as a separate
    task, so it cannot delay the renewals. :meth:`run` is a coroutine; :meth:`start` creates its task; :meth:`stop`
    (a coroutine) ends it: stop leading, then release if ``release_on_cancel``.
    """

    def _init_shell(self) -> None:
        self._stop_requested = False
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self._tick: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self.clock.subscribe(self._on_clock_jump)

    def _on_clock_jump(self) -> None:  # any thread
        loop, tick = self._loop, self._tick
        if loop is not None and tick is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(tick.set)

    async def run(self) -> None:
        """Campaign and lead until :meth:`stop` (or cancellation of this coroutine); then stop leading and
        release if ``release_on_cancel``. Raises ``RuntimeError`` if already running or stopped."""
        if self._running or self._stop_requested:
            raise RuntimeError(f"elector {self.identity!r} is already running or was stopped")
        self._running = True
        self._loop = asyncio.get_running_loop()
        self._tick = asyncio.Event()
        try:
            while not self._stop_requested:
                self._dispatch(await asyncio.to_thread(self._attempt))
                await self._sleep(self._next_wait())
                self._dispatch(self._check_deadline())
        finally:
            self._dispatch(self._step_down())
            if self.config.release_on_cancel:
                await asyncio.shield(asyncio.to_thread(self._release))
            self._client.close()
            self._running = False

    @property
    def started(self) -> bool:
        """True once :meth:`start` or :meth:`run` was called."""
        return self._task is not None or self._running or self._stop_requested

    def start(self) -> asyncio.Task[None]:
        """Create the task running :meth:`run` in the running loop and return it."""
        if self._task is not None:
            raise RuntimeError(f"elector {self.identity!r} was already started")
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"leaderelection {self.identity}")
        return self._task

    async def stop(self, timeout: float | None = None) -> bool:
        """Ask :meth:`run` to end and wait for its task up to ``timeout`` seconds (``None``: until it ended).
        Returns True if it ended. Idempotent."""
        self._stop_requested = True
        if self._tick is not None:
            self._tick.set()
        task = self._task
        if task is None or task is asyncio.current_task() or task.done():
            return True
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    async def _sleep(self, seconds: float) -> None:
        clock, tick = self.clock, self._tick
        assert tick is not None
        target = clock.now_ns() + round(seconds * 1e9)
        while not self._stop_requested:
            tick.clear()
            if clock.now_ns() >= target:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), clock.real_wait(target))

    def _dispatch(self, events: list[tuple[str, str]]) -> None:
        for call in self._callbacks(events):
            try:
                result = call()
            except Exception:
                log.exception("elector %s: a leader election callback raised", self.identity)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._callback_tasks.add(task)
                task.add_done_callback(self._callback_done)

    def _callback_done(self, task: asyncio.Future[Any]) -> None:
        self._callback_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("elector %s: a leader election callback raised", self.identity, exc_info=task.exception())
