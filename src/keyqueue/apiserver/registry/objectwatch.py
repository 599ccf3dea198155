""":class:`ObjectWatch`: the events of one watch request, made from the backend's changes as kube-apiserver makes
them (ADDED or MODIFIED from ``create_revision`` and the selectors, DELETED with the last state, ERROR on a compacted
start, BOOKMARKs with the newest safe resourceVersion)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import errors
from ..objects import ResourceType
from ..storage import Backend, BackendUnavailableError, BackendWatch, CompactedError, KeyValue, WatchOverflowError
from .options import Matcher
from .states import _with_rv

__all__ = ["ObjectWatch"]


class _WatchSource(Protocol):
    """What an :class:`ObjectWatch` uses of the registry that opened it."""

    @property
    def backend(self) -> Backend: ...

    def _shared(self, kv: KeyValue, rt: ResourceType, remember: bool = True) -> dict[str, Any]: ...

    def _forget(self, w: ObjectWatch) -> None: ...


class ObjectWatch:
    """The events of one watch request, as JSON-ready dicts (shared with other readers of the same state: read
    them, never modify them).  Used by one thread; ``close`` from any."""

    def __init__(
        self,
        registry: _WatchSource,
        rt: ResourceType,
        matcher: Matcher,
        backend_watch: BackendWatch,
        start_rv: int,
        initial: list[dict[str, Any]],
        allow_bookmarks: bool,
    ) -> None:
        self._registry = registry
        self.rt = rt
        self._matcher = matcher
        self._watch = backend_watch
        self.start_rv = start_rv
        self.last_rv = start_rv  # every change <= last_rv has been delivered
        self._pending = initial
        self._allow_bookmarks = allow_bookmarks
        self._ended = False

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` (from any thread, must not block) whenever :meth:`next` may have something new."""
        self._watch.set_listener(listener)

    @property
    def overflowed(self) -> bool:
        """True once the backend ended the watch because its consumer fell too far behind."""
        return self._watch.overflowed

    def next(self, timeout: float | None) -> list[dict[str, Any]] | None:
        """Block up to ``timeout`` seconds for events; ``None`` on timeout.

        Raises :class:`EOFError` once the stream is over (after an ERROR event,
        or when the watch was closed).
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        if self._ended:
            raise EOFError("watch ended")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                batch = self._watch.next(remaining)
            except WatchOverflowError:
                self._ended = True
                raise EOFError("watch ended: the consumer fell behind") from None
            except CompactedError as exc:
                self._ended = True
                shown = exc.compacted or self._registry.backend.revision()
                status = errors.expired(f"too old resource version: {self.start_rv} ({shown})").status()
                return [{"type": "ERROR", "object": status}]
            except BackendUnavailableError as exc:
                self._ended = True
                return [{"type": "ERROR", "object": errors.internal_error(str(exc)).status()}]
            if batch is None:
                return None
            if batch.progress is not None:
                self.last_rv = max(self.last_rv, batch.progress)
                continue
            events = self._convert(batch.events)
            if events:
                return events
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _convert(self, batch: tuple[Any, ...]) -> list[dict[str, Any]]:
        reg, rt, match_all = self._registry, self.rt, self._matcher.match_all
        out: list[dict[str, Any]] = []
        for ev in batch:
            rev = ev.kv.mod_revision
            self.last_rv = max(self.last_rv, rev)
            old: dict[str, Any] | None = None
            if ev.prev is not None and (ev.type == "DELETE" or not match_all):  # else only its presence matters
                old = _with_rv(dict(reg._shared(ev.prev, rt, ev.type != "DELETE")), rev)  # a copy: its own RV
            old_match = ev.prev is not None and (match_all or (old is not None and self._matcher.matches(old)))
            if ev.type == "DELETE":
                if old is not None and old_match:
                    out.append({"type": "DELETED", "object": old})
                continue
            new = reg._shared(ev.kv, rt)
            new_match = match_all or self._matcher.matches(new)
            if ev.kv.create_revision == rev:
                if new_match:
                    out.append({"type": "ADDED", "object": new})
            elif ev.prev is None:  # previous state unknown (compacted): assume it matched iff no selector
                if new_match:
                    out.append({"type": "MODIFIED" if match_all else "ADDED", "object": new})
            elif new_match:
                out.append({"type": "MODIFIED" if old_match else "ADDED", "object": new})
            elif old_match:  # not match_all: old was decoded
                out.append({"type": "DELETED", "object": old})
        return out

    def bookmark(self) -> dict[str, Any] | None:
        """A BOOKMARK event with the newest safe resourceVersion, if bookmarks were asked for.

        Also asks the backend for a progress notification, which lets later
        bookmarks advance past changes that did not match this watch.
        """
        if not self._allow_bookmarks or self._ended:
            return None
        self._watch.request_progress()
        return {"type": "BOOKMARK", "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version,
                                               "metadata": {"resourceVersion": str(self.last_rv)}}}

    def close(self) -> None:
        """Stop the watch; idempotent."""
        self._ended = True
        self._watch.close()
        self._registry._forget(self)
