"""What the threaded and the asyncio manager share: arguments, resource resolution, one shared informer per
resource, caches, controller wiring, metrics registry and the probe endpoints. Not public."""

from __future__ import annotations

import inspect
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from keyqueue.informer import HandlerRegistration
from keyqueue.leaderelection import ElectionConfig
from keyqueue.manager.cache import Cache, SharedInformer
from keyqueue.manager.probes import HealthServer
from keyqueue.manager.resources import Resource, ResourceResolver
from keyqueue.manager.wiring import MapFunc, register_for, register_mapped, register_owned

__all__ = ["CACHE_SYNC_TIMEOUT", "ManagerBase"]

#: Seconds :meth:`start` waits for the caches to sync before it gives up (controller-runtime's CacheSyncTimeout).
CACHE_SYNC_TIMEOUT = 120.0

I = TypeVar("I", bound=SharedInformer)  # noqa: E741
C = TypeVar("C")
E = TypeVar("E")


def _check_port(label: str, port: object) -> int | None:
    if port is None:
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"{label} must be an int in 0..65535 (0: a free port) or None, got "
                         f"{type(port).__name__}: {port!r:.80}")
    return port


class ManagerBase(Generic[I, C, E]):
    """See :class:`keyqueue.Manager`; subclasses provide the informer, controller and elector of their shell."""

    _elector_class: Any

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str | None = None,
        leader_election: str | E | ElectionConfig | None = None,
        metrics_port: int | None = None,
        health_port: int | None = None,
        stop_timeout: float = 30.0,
        logger: logging.Logger | None = None,
    ) -> None:
        if api_client is None:
            raise TypeError("api_client must be a kubernetes.client.ApiClient, got None")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ValueError(f"namespace must be a non-empty str or None, got {type(namespace).__name__}: "
                             f"{namespace!r:.80}")
        if (not isinstance(stop_timeout, int | float) or isinstance(stop_timeout, bool)
                or not 0 <= stop_timeout < float("inf")):
            raise ValueError(f"stop_timeout must be a finite number of seconds >= 0, got "
                             f"{type(stop_timeout).__name__}: {stop_timeout!r:.80}")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger or None, got {type(logger).__name__}: {logger!r:.80}")
        self.api_client = api_client
        self.namespace = namespace
        self.stop_timeout = float(stop_timeout)
        self.log = logger if logger is not None else logging.getLogger("keyqueue.manager")
        self._metrics_port = _check_port("metrics_port", metrics_port)
        self._health_port = _check_port("health_port", health_port)
        self.elector: E | None = self._make_elector(leader_election)
        self._resolver = ResourceResolver(api_client)
        self._lock = threading.Lock()  # informers, controllers, lifecycle flags
        self._informers: dict[str, tuple[Resource, I]] = {}
        self._controllers: dict[str, C] = {}
        self._registrations: list[tuple[I, HandlerRegistration]] = []
        self._started = False
        self._stopped = False
        self._health: HealthServer | None = None
        self._metrics: Any = None
        self.metrics_port: int | None = None
        """The bound port of ``/metrics`` once started (``metrics_port=0`` picks a free one)."""
        self.health_port: int | None = None
        """The bound port of ``/healthz`` and ``/readyz`` once started."""
        self.registry: Any = None
        """The ``prometheus_client.CollectorRegistry`` holding every metric of this manager (``None`` without
        ``prometheus_client``)."""
        self._queue_metrics: Any = None
        self._init_metrics()
        if self.elector is not None:
            self.elector.add_listener(self._on_started_leading, self._on_stopped_leading)  # type: ignore[attr-defined]

    # -- construction helpers -----------------------------------------------------------------------------------

    def _make_elector(self, leader_election: object) -> E | None:
        cls = self._elector_class
        if leader_election is None:
            return None
        if isinstance(leader_election, cls):
            return leader_election  # type: ignore[no-any-return]
        if isinstance(leader_election, str):
            identity = f"{socket.gethostname()}_{uuid.uuid4()}"  # controller-runtime's: hostname + "_" + UUID
            return cls(self.api_client, name=leader_election, namespace=self.namespace or "default",  # type: ignore[no-any-return]
                       identity=identity, release_on_cancel=True)
        if isinstance(leader_election, ElectionConfig):
            c = leader_election
            return cls(self.api_client, name=c.name, namespace=c.namespace, identity=c.identity,  # type: ignore[no-any-return]
                       lease_duration=c.lease_duration, renew_deadline=c.renew_deadline,
                       retry_period=c.retry_period, release_on_cancel=c.release_on_cancel)
        raise TypeError(f"leader_election must be a Lease name (str), a {cls.__module__}.{cls.__name__}, a "
                        f"keyqueue.leaderelection.ElectionConfig or None, got {type(leader_election).__name__}: "
                        f"{leader_election!r:.80}")

    def _init_metrics(self) -> None:
        try:
            import prometheus_client
        except ImportError:
            if self._metrics_port is not None:
                raise ImportError("metrics_port needs prometheus_client: pip install 'keyqueue[metrics]'") from None
            return
        from keyqueue.leaderelection import export_metrics
        from keyqueue.metrics import PrometheusMetricsProvider

        self.registry = prometheus_client.CollectorRegistry()
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        self._queue_metrics = PrometheusMetricsProvider(self.registry, priority_label=True)
        if self.elector is not None:
            export_metrics(self.elector, self.registry)  # type: ignore[arg-type]

    def _on_started_leading(self) -> None:
        self.log.info("manager: leading; controllers reconcile")

    def _on_stopped_leading(self) -> None:
        if not self._stopped:
            self.log.warning("manager: leadership lost; controllers take no new key until elected again")

    # -- resources, informers, caches -----------------------------------------------------------------------------

    def resolve(self, resource: str) -> Resource:
        """The kind and scope of ``resource`` (``"group/version/plural"``), from discovery (cached). Raises
        :class:`~keyqueue.manager.UnknownResource` (naming it and the closest served names) for a resource the
        server does not serve, ``ValueError``/``TypeError`` for a malformed name; API errors propagate."""
        return self._resolver.resolve(resource)

    def _new_informer(self, resource: Resource, namespace: str | None) -> I:
        raise NotImplementedError

    def _start_informer(self, informer: I) -> None:
        raise NotImplementedError

    def informer(self, resource: str) -> I:
        """The one shared informer of ``resource`` (created on first use; started with the manager, or at once if
        the manager runs already). Namespaced resources are watched in the manager's ``namespace`` (all namespaces
        when ``None``), cluster-scoped ones cluster-wide. Raises as :meth:`resolve`."""
        res = self.resolve(resource)
        with self._lock:
            entry = self._informers.get(res.name)
            if entry is not None:
                return entry[1]
            namespace = self.namespace if res.namespaced else None
            informer = self._new_informer(res, namespace)
            self._informers[res.name] = (res, informer)
            start_now = self._started and not self._stopped
        if start_now:
            self._start_informer(informer)
        return informer

    def cache(self, resource: str) -> Cache:
        """Read access (``get``/``list``) to the cache of ``resource``'s shared informer. Raises as
        :meth:`resolve`."""
        informer = self.informer(resource)
        return Cache(self.resolve(resource), informer)

    # -- controllers -----------------------------------------------------------------------------------------------

    def _new_controller(self, reconcile: Callable[..., Any], name: str, workers: int, queue: Any) -> C:
        raise NotImplementedError

    def _start_controller(self, controller: C) -> None:
        raise NotImplementedError

    def add_controller(
        self,
        reconcile: Callable[[str], Any],
        *,
        for_: str,
        owns: Iterable[str] = (),
        watches: Iterable[tuple[str, MapFunc]] = (),
        name: str | None = None,
        workers: int = 1,
        predicates: Iterable[Callable[[Any, Any], bool]] = (),
        queue: Any = None,
    ) -> C:
        """Add a controller reconciling keys ``"namespace/name"`` (``"name"`` for a cluster-scoped primary) of
        ``for_``, and return it (started with the manager, or at once if the manager runs already).

        * ``for_`` — the primary resource: each add, update and delete enqueues the object's own key;
        * ``owns`` — resources whose objects enqueue their controller owner (the ``ownerReferences`` entry with
          ``controller: true`` of the primary's group and kind); an object without one enqueues nothing;
        * ``watches`` — ``(resource, map_fn)`` pairs: ``map_fn(obj)`` returns the keys to enqueue;
        * ``predicates`` — ``(old, new) -> bool``: an update of any of these resources enqueues only if all are
          true (see :mod:`keyqueue.predicates`); adds and deletes always enqueue;
        * ``name`` — defaults to the primary kind in lower case; unique in the manager (metrics label, queue name);
        * ``workers`` — concurrent reconciles; ``queue`` — replaces the default priority queue.

        A reconcile that raises is retried with backoff (see :class:`keyqueue.Controller`); no exception ends a
        worker.

        Raises ``TypeError``/``ValueError`` for bad arguments (a duplicate name among them) and
        :class:`~keyqueue.manager.UnknownResource` for a resource the server does not serve, before anything is
        registered. The resolution asks the server (discovery), so this blocks for a request per new group-version.
        """
        if not callable(reconcile):
            raise TypeError(f"reconcile must be callable, got {type(reconcile).__name__}: {reconcile!r:.80}")
        self._check_reconcile(reconcile)
        if isinstance(owns, str):
            raise TypeError(f"owns must be an iterable of resource names, got the str {owns!r} (use ({owns!r},))")
        owns = tuple(owns)
        watches = tuple(watches)
        for w in watches:
            if not (isinstance(w, tuple) and len(w) == 2 and isinstance(w[0], str) and callable(w[1])):
                raise TypeError(f"watches must hold (resource, map_fn) pairs, got {w!r:.80}")
        predicates = tuple(predicates)
        for p in predicates:
            if not callable(p):
                raise TypeError(f"predicates must be callables (old, new) -> bool, got {type(p).__name__}: {p!r:.80}")
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {type(workers).__name__}: {workers!r:.80}")
        primary = self.resolve(for_)
        owned = [self.resolve(r) for r in owns]
        mapped = [(self.resolve(r), fn) for r, fn in watches]
        if name is None:
            name = primary.kind.lower()
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {type(name).__name__}: {name!r:.80}")
        with self._lock:
            if name in self._controllers:
                raise ValueError(f"a controller named {name!r} exists already in this manager; pass name=")
            if self._stopped:
                raise RuntimeError("the manager was stopped: it cannot take new controllers")
            controller = self._new_controller(reconcile, name, workers, queue)
            self._controllers[name] = controller
            started = self._started
        enqueue = controller.queue.add  # type: ignore[attr-defined]
        regs = [(self.informer(primary.name), register_for(self.informer(primary.name), enqueue, predicates))]
        for res in owned:
            inf = self.informer(res.name)
            regs.append((inf, register_owned(inf, primary, enqueue, predicates)))
        for res, fn in mapped:
            inf = self.informer(res.name)
            regs.append((inf, register_mapped(inf, fn, enqueue, predicates)))
        with self._lock:
            self._registrations.extend(regs)
        if started:
            self._start_controller(controller)
        return controller

    def _check_reconcile(self, reconcile: Callable[..., Any]) -> None:
        """Shell-specific checks of ``reconcile`` (a coroutine function or not)."""

    def controller(
        self,
        *,
        for_: str,
        owns: Iterable[str] = (),
        watches: Iterable[tuple[str, MapFunc]] = (),
        name: str | None = None,
        workers: int = 1,
        predicates: Iterable[Callable[[Any, Any], bool]] = (),
        queue: Any = None,
    ) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
        """:meth:`add_controller` as a decorator: ``@mgr.controller(for_="v1/configmaps")`` over the reconcile
        function, which is returned unchanged (the controller is :meth:`controllers`\\ ``()[name]``)."""

        def decorate(reconcile: Callable[[str], Any]) -> Callable[[str], Any]:
            self.add_controller(reconcile, for_=for_, owns=owns, watches=watches, name=name, workers=workers,
                                predicates=predicates, queue=queue)
            return reconcile

        return decorate

    def controllers(self) -> dict[str, C]:
        """The controllers by name (a copy)."""
        with self._lock:
            return dict(self._controllers)

    # -- probes ------------------------------------------------------------------------------------------------------

    def _elector_running(self) -> bool:
        raise NotImplementedError

    def alive(self) -> tuple[bool, str]:
        """``/healthz``: ok while the manager runs (started, not stopped)."""
        with self._lock:
            ok = self._started and not self._stopped
        return ok, "ok" if ok else "not running"

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: ok when every cache has synced and, with leader election, the elector is campaigning or
        leading; the text lists what is not ready."""
        with self._lock:
            running = self._started and not self._stopped
            informers = list(self._informers.items())
        problems = [] if running else ["manager not running"]
        problems += [f"cache {name} not synced" for name, (_, inf) in informers if not inf.has_synced()]
        if self.elector is not None and not self._elector_running():
            problems.append("leader election not running")
        return not problems, "ok" if not problems else "; ".join(problems)

    def _start_servers(self) -> None:
        if self._health_port is not None:
            self._health = HealthServer(self._health_port, self.alive, self.ready)
            self.health_port = self._health.port
        if self._metrics_port is not None:
            from keyqueue.metrics.prometheus import serve

            self._metrics = serve(self._metrics_port, "0.0.0.0", self.registry)
            self.metrics_port = self._metrics.port

    def _stop_servers(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        if self._health is not None:
            self._health.close()

    def _informer_list(self) -> list[I]:
        with self._lock:
            return [inf for _, inf in self._informers.values()]

    def __repr__(self) -> str:
        with self._lock:
            state = "stopped" if self._stopped else "running" if self._started else "new"
            return (f"<{type(self).__name__} {state} informers={sorted(self._informers)} "
                    f"controllers={sorted(self._controllers)}>")


def is_coroutine_function(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
