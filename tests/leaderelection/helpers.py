"""An in-memory Lease store with kube-apiserver's write rules, and clients of it for electors."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from keyqueue.leaderelection import LeaseAPIError, LeaseClient, LeaseConflict


class LeaseStore:
    """One Lease. create: 409 if it exists; update: 409 if ``metadata.resourceVersion`` is set and stale (an
    update without one is applied unconditionally, as the API server does). ``down``: every call fails like an
    unreachable server. ``before_write(elector_identity)`` runs before each write is applied (to interleave)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.obj: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.writes: list[dict[str, Any]] = []
        self.before_write: Callable[[str], None] | None = None

    def _check_up(self) -> None:
        if self.down:
            raise LeaseAPIError("connection refused")

    def get(self) -> dict[str, Any] | None:
        with self.lock:
            self._check_up()
            return copy.deepcopy(self.obj)

    def write(self, body: dict[str, Any], create: bool, who: str) -> dict[str, Any]:
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook(who)
        with self.lock:
            self._check_up()
            if create and self.obj is not None:
                raise LeaseConflict("already exists", 409)
            if not create:
                if self.obj is None:
                    raise LeaseAPIError("not found", 404)
                want = body.get("metadata", {}).get("resourceVersion")
                if want and want != self.obj["metadata"]["resourceVersion"]:
                    raise LeaseConflict("the object has been modified", 409)
            self.rv += 1
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.obj = obj
            self.writes.append(copy.deepcopy(obj))
            return copy.deepcopy(obj)


class StoreClient(LeaseClient):
    """A :class:`LeaseClient` on a :class:`LeaseStore`. ``precondition=False`` is the broken control: it drops
    the resourceVersion from its updates, so a lost race is not refused."""

    def __init__(self, store: LeaseStore, who: str, *, precondition: bool = True) -> None:
        self.name, self.namespace = "lease", "ns"
        self.store = store
        self.who = who
        self.precondition = precondition

    def get(self, timeout: float) -> dict[str, Any] | None:
        return self.store.get()

    def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.store.write(body, True, self.who)

    def update(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if not self.precondition:
            body = copy.deepcopy(body)
            body["metadata"].pop("resourceVersion", None)
        return self.store.write(body, False, self.who)
