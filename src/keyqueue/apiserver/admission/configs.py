""":class:`WebhookConfigs`: the stored Validating- and MutatingWebhookConfigurations, as the admission chain reads
them on every write.

Like kube-apiserver's informer, a storage watch keeps a copy current (one thread, started and stopped with the
server); a configuration this registry writes is taken into the copy before its write is answered, so a webhook is
in force for the requests that follow its configuration's creation (kube applies it within a moment; another
server sharing the storage applies it when its watch delivers it).  Without the thread (a registry used without a
server) every read is a storage read.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..objects import MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS
from ..storage import Backend, CompactedError, KeyValue, StorageError, WatchOverflowError

__all__ = ["Hook", "WebhookConfigs"]

log = logging.getLogger("keyqueue.apiserver.admission")


@dataclass(frozen=True, slots=True)
class Hook:
    """One webhook of a configuration: ``spec`` is its entry of ``webhooks``; ``uid`` names it for reinvocation
    (``<configuration>/<index>``)."""

    configuration: str
    uid: str
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


def _hooks(objs: list[Mapping[str, Any]]) -> tuple[Hook, ...]:
    """The webhooks of ``objs`` in kube's order: configurations by name, webhooks in their order."""
    out: list[Hook] = []
    for obj in sorted(objs, key=lambda o: str((o.get("metadata") or {}).get("name", ""))):
        name = str((obj.get("metadata") or {}).get("name", ""))
        for i, spec in enumerate(obj.get("webhooks") or ()):
            if isinstance(spec, Mapping):
                out.append(Hook(name, f"{name}/{i}", spec))
    return tuple(out)


class WebhookConfigs:
    """The webhook configurations stored under ``prefix`` in ``backend`` (see the module docstring).  Thread-safe."""

    def __init__(self, backend: Backend, prefix: str) -> None:
        self._backend = backend
        self._prefix = prefix.rstrip("/") + "/"
        self._prefixes = {f"{self._prefix}{rt.storage_name}/": rt is MUTATING_WEBHOOK_CONFIGURATIONS
                          for rt in (VALIDATING_WEBHOOK_CONFIGURATIONS, MUTATING_WEBHOOK_CONFIGURATIONS)}
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[int, dict[str, Any] | None]] = {}  # key -> (revision, object or deleted)
        self._cached: tuple[tuple[Hook, ...], tuple[Hook, ...]] | None = None
        self._synced = False  # the copy is current (the watch runs)
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ reading
    def hooks(self) -> tuple[tuple[Hook, ...], tuple[Hook, ...]]:
        """``(validating, mutating)`` webhooks now in force, each in kube's calling order.  Blocks on a storage
        read when the watch is not running."""
        with self._lock:
            if self._synced:
                if self._cached is None:
                    self._cached = self._build()
                return self._cached
        validating: list[Mapping[str, Any]] = []
        mutating: list[Mapping[str, Any]] = []
        for prefix, is_mutating in self._prefixes.items():
            kvs, _ = self._backend.range(prefix, 0)
            for kv in kvs:
                obj = self._load(kv.value)
                if obj is not None:
                    (mutating if is_mutating else validating).append(obj)
        return _hooks(validating), _hooks(mutating)

    def _build(self) -> tuple[tuple[Hook, ...], tuple[Hook, ...]]:
        validating: list[Mapping[str, Any]] = []
        mutating: list[Mapping[str, Any]] = []
        for key, (_rev, obj) in self._objects.items():
            if obj is not None:
                (mutating if self._is_mutating(key) else validating).append(obj)
        return _hooks(validating), _hooks(mutating)

    def _is_mutating(self, key: str) -> bool:
        return any(key.startswith(p) and m for p, m in self._prefixes.items())

    def watches(self, key: str) -> bool:
        """True if ``key`` is a webhook configuration's."""
        return any(key.startswith(p) for p in self._prefixes)

    @staticmethod
    def _load(value: bytes) -> dict[str, Any] | None:
        try:
            obj = json.loads(value)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    # ------------------------------------------------------------------ updates
    def observe(self, key: str, revision: int, obj: Mapping[str, Any] | None) -> None:
        """Take the state of ``key`` at ``revision`` (``obj`` ``None``: deleted) unless a newer one is known."""
        if not self.watches(key):
            return
        with self._lock:
            known = self._objects.get(key)
            if known is not None and known[0] >= revision:
                return
            self._objects[key] = (revision, dict(obj) if obj is not None else None)
            self._cached = None

    def _observe_kv(self, kv: KeyValue, deleted: bool) -> None:
        self.observe(kv.key, kv.mod_revision, None if deleted else self._load(kv.value))

    # ------------------------------------------------------------------ the watch
    def start(self) -> None:
        """Start the watch thread (returns at once; until it has read the configurations, reads go to storage)."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name="apiserver-admission", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch thread (idempotent); blocks up to ``timeout`` seconds for it."""
        self._stopping.set()
        with self._lock:
            watch, thread = self._watch, self._thread
            self._thread = None
            self._synced = False
        if watch is not None:
            watch.close()
        if thread is not None:
            thread.join(timeout)

    def _resync(self) -> int:
        objects: dict[str, tuple[int, dict[str, Any] | None]] = {}
        revision = 0
        for prefix in self._prefixes:
            kvs, revision = self._backend.range(prefix, revision)
            for kv in kvs:
                objects[kv.key] = (kv.mod_revision, self._load(kv.value))
        with self._lock:
            for key, known in self._objects.items():  # a write observed since the read was made
                if known[0] > revision:
                    objects[key] = known
            self._objects = objects
            self._cached = None
        return revision

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                revision = self._resync()
                watch = self._backend.watch(self._prefix, revision + 1)
                with self._lock:
                    self._watch = watch
                    self._synced = not self._stopping.is_set()
                if self._stopping.is_set():
                    watch.close()
                    return
                while True:
                    batch = watch.next(None)
                    if batch is None:
                        continue
                    for event in batch.events:
                        self._observe_kv(event.kv, event.type == "DELETE")
            except (WatchOverflowError, CompactedError):
                log.info("admission: the watch of webhook configurations fell behind; reading them again")
            except EOFError:
                return
            except StorageError as exc:
                if self._stopping.is_set():
                    return
                log.warning("admission: storage error watching webhook configurations, starting over: %s", exc)
                self._stopping.wait(0.5)
            finally:
                with self._lock:
                    watch, self._watch = self._watch, None
                    self._synced = False
                if watch is not None:
                    watch.close()
