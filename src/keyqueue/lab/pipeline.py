"""The pipeline of ``keyqueue-lab pipeline``: HTTP trigger → API server → etcd → watch → informer → queue → worker,
timed (:class:`Pipeline`).

``POST /trigger/{name}`` updates (or creates) ConfigMap ``default/{name}``: one JSON merge patch (a create if it is
missing) sent with aiohttp's client on the trigger server's own event loop over keep-alive connections, with the
address, TLS settings and token of the official ``kubernetes`` client's configuration (the informer keeps the
official client). The API server (the project's Kubernetes-API-compatible test server on etcd or in memory, started here
in a child process like a real cluster's, or in threads of this process with ``--apiserver thread``; or a real
cluster via ``--kubeconfig``) sends the change down the informer's watch (:mod:`keyqueue.informer`); the
informer's handler adds ``default/{name}`` to a :class:`~keyqueue.RateLimitingQueue`; a
:class:`keyqueue.Controller` with ``--workers`` threads takes keys and reconciles (reads the object from the
informer's cache, then a simulated piece of work, a GIL-releasing sleep). With ``--trigger-process``
(``PipelineConfig.trigger_process``) ``POST /trigger`` is served by a child process of its own instead
(:mod:`keyqueue.lab.trigger_process`: the load's writer, as kubectl or another service would be in a cluster), and
this process keeps ``GET /metrics``, ``/stats`` and ``/healthz`` on :attr:`Pipeline.metrics_url`.

Every stage is timed with ``time.perf_counter_ns`` (``CLOCK_MONOTONIC`` on Linux, one clock for all processes: the
trigger process's stamps are handed over when the pipeline settles or reports, never during the load):

* **API write**: the client call of the trigger handler (request out, answer in);
* **write done → informer handler**: from the moment the trigger handler has the API's answer to the moment the
  informer calls the handler for the event with that resourceVersion. The watch event and the write's answer
  travel separately, so the event can arrive first: such samples are negative and are counted;
* **queue add / done**: the calls themselves; **enqueue → worker Get**: from the informer handler's ``add`` to a
  worker's ``get`` returning that key, also split out for adds made while fewer reconciles ran than there are workers
  ("idle"), and into adds that a worker was free for (more idle workers than keys already waiting: the wait is the
  hand-off, split up by :mod:`keyqueue.lab.handoff`) and the others, which wait for a reconcile to end; the same
  adds replayed on instant workers (:mod:`keyqueue.lab.replay`) give the part of that wait the bursts set;
* **reconcile**: the worker's work.

Correctness is checked as well: per name, the resourceVersion of the last trigger against the resourceVersion a
worker last saw when it reconciled (every name must be reconciled after its last trigger: ``lost`` = 0), and a
same-key detector (:class:`keyqueue.lab.race.SameKeyDetector`, whose control run is ``keyqueue-lab race
--control``) around every reconcile.

The parts: :mod:`~keyqueue.lab.pipeline_recorder` books the path and answers from it (this module adds the processes
and threads), :mod:`~keyqueue.lab.pipeline_stages` and :mod:`~keyqueue.lab.pipeline_report` compute and print what
was measured, :mod:`~keyqueue.lab.trigger_server` and :mod:`~keyqueue.lab.api_writer` take a trigger to the API
server, :mod:`~keyqueue.lab.pipeline_apiserver` runs the API server in a child process, and
:mod:`~keyqueue.lab.pipeline_cli` is ``keyqueue-lab pipeline`` itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TextIO

from keyqueue.controller import Controller
from keyqueue.informer import Informer
from keyqueue.lab.api_writer import ApiWriter, TriggerError, write_trigger
from keyqueue.lab.common import format_duration
from keyqueue.lab.pipeline_apiserver import ApiServerProcess
from keyqueue.lab.pipeline_config import PipelineConfig
from keyqueue.lab.pipeline_recorder import PipelineRecorder
from keyqueue.lab.pipeline_stages import TimedQueue
from keyqueue.lab.trigger_process import TriggerProcess
from keyqueue.lab.trigger_server import TriggerServer, trigger_answer

__all__ = ["Pipeline", "PipelineConfig"]


class Pipeline(PipelineRecorder):
    """The whole path in one object. :meth:`start` it (or ``with Pipeline(cfg) as p:``), send triggers
    (HTTP ``POST {url}/trigger/{name}`` or :meth:`trigger`), then :meth:`wait_reconciled`, :meth:`verify`,
    :meth:`report`, and :meth:`stop`.

    ``reconcile``: replaces the simulated work; called as ``reconcile(key, obj_or_None)`` in a worker thread
    (an exception counts as a failure: the key is re-added rate-limited). ``out``: where log lines go. What is
    booked and measured along the way, and the answers from it, come from :class:`PipelineRecorder`.
    """

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        reconcile: Callable[[str, dict[str, Any] | None], None] | None = None,
        out: TextIO | None = None,
    ) -> None:
        cfg = config if config is not None else PipelineConfig()
        if not isinstance(cfg.workers, int) or cfg.workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {cfg.workers!r}")
        if cfg.backend not in ("etcd", "memory"):
            raise ValueError(f"backend must be 'etcd' or 'memory', got {cfg.backend!r}")
        if not cfg.reconcile >= 0:
            raise ValueError(f"reconcile must be >= 0 seconds, got {cfg.reconcile!r}")
        if cfg.switch_interval is not None and not cfg.switch_interval > 0:
            raise ValueError(f"switch_interval must be > 0 seconds, got {cfg.switch_interval!r}")
        if cfg.trigger_process and not (cfg.apiserver_process or cfg.kubeconfig):
            raise ValueError("trigger_process needs apiserver_process or a kubeconfig (the trigger process reads "
                             "the API server's kubeconfig)")
        super().__init__(cfg, reconcile=reconcile, out=out)
        self._saved_switch_interval: float | None = None
        self._trigger_seq = 0
        self._run_id = os.urandom(4).hex()
        self._apiserver: Any = None
        self._child: ApiServerProcess | None = None
        self._clients: list[Any] = []
        self._writer: ApiWriter | None = None
        self.controller: Controller[str] | None = None
        self._metrics: Any = None
        self._httpd: TriggerServer | None = None
        self._stats_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.api_url = ""

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> Pipeline:
        """Start the API server (unless a kubeconfig was given), queue, informer (waits for its first sync, up to
        30 s), workers and the trigger server. On failure everything started is stopped and the error re-raised."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _client_configuration(self) -> Any:
        from kubernetes import client
        from kubernetes import config as kube_config

        kubeconfig = self._kubeconfig()
        if kubeconfig:
            conf = client.Configuration()
            load: Any = kube_config.load_kube_config
            load(config_file=kubeconfig, client_configuration=conf)
        else:
            conf = self._apiserver.configuration()
        conf.connection_pool_maxsize = 64  # one keep-alive connection per trigger thread, never discarded
        return conf

    def _start(self) -> None:
        from kubernetes import client

        cfg = self.config
        if cfg.switch_interval is not None:
            self._saved_switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(cfg.switch_interval)
        if cfg.apiserver_process and not cfg.kubeconfig:
            self._child = ApiServerProcess(cfg.backend)
            self._child.start()
        elif not cfg.kubeconfig:
            from keyqueue.apiserver import TestAPIServer

            backend: Any = cfg.backend  # checked in __init__
            self._apiserver = TestAPIServer(backend, unsafe_no_fsync=cfg.unsafe_no_fsync).start()
        watcher = client.ApiClient(self._client_configuration())
        self._clients = [watcher]
        self.api_url = watcher.configuration.host
        self._writer = ApiWriter(watcher.configuration)

        provider = registry = None
        try:
            from prometheus_client import CollectorRegistry

            from keyqueue.metrics import PrometheusMetricsProvider

            registry = CollectorRegistry()
            provider = PrometheusMetricsProvider(registry)
            self._metrics = provider
        except ImportError:
            self._metrics = None
        self.queue = TimedQueue(self.probe, name="pipeline", stats=True, metrics_provider=provider)
        self.controller = Controller(self._reconcile, self.queue, name="pipeline", workers=cfg.workers,
                                     registry=registry, stop_timeout=10.0)

        self.informer = Informer.for_config_maps(watcher, cfg.namespace, name=f"pipeline configmaps/{cfg.namespace}")
        self.informer.add_event_handler(on_add=self._on_add, on_update=self._on_update, on_delete=self._on_delete)
        self.informer.start()
        if not self.informer.wait_for_cache_sync(30):
            raise RuntimeError("the informer did not sync within 30 s")

        self.controller.start()

        if cfg.trigger_process:
            self._trigger_proc = TriggerProcess(self._kubeconfig(), cfg.namespace, cfg.port, self._run_id).start()
            # This process still serves GET /metrics, /stats, /healthz (a controller's own endpoint), idle while
            # the load runs; its loop thread is not the trigger loop (the probe's loop column stays empty).
            self._httpd = TriggerServer(self, 0, None, name="pipeline-http", triggers_at=self._trigger_proc.url)
            self._httpd.start()
        else:
            httpd = TriggerServer(self, cfg.port, self._writer)
            httpd.start()
            self._httpd = httpd

            async def loop_thread() -> int:
                return threading.get_ident()

            self.probe.watch_loop_thread(httpd.run(loop_thread()))
        if cfg.stats_interval > 0:
            self._stats_thread = threading.Thread(target=self._stats_loop, name="pipeline-stats", daemon=True)
            self._stats_thread.start()

    def _kubeconfig(self) -> str:
        """The kubeconfig given, or the child API server's (empty while the API server runs in this process)."""
        return self.config.kubeconfig or (self._child.kubeconfig if self._child is not None else "")

    @property
    def url(self) -> str:
        """The trigger server's base URL (``http://127.0.0.1:PORT``): this process's, or the trigger process's with
        ``trigger_process``."""
        if self._trigger_proc is not None:
            return self._trigger_proc.url
        return self.metrics_url

    @property
    def metrics_url(self) -> str:
        """This process's HTTP server (``GET /metrics``, ``/stats``, ``/healthz``; also the triggers' unless
        ``trigger_process``)."""
        if self._httpd is None:
            raise RuntimeError("pipeline not started")
        return f"http://127.0.0.1:{self._httpd.port}"

    @property
    def apiserver(self) -> Any:
        """The :class:`~keyqueue.apiserver.TestAPIServer` this pipeline started (``None`` with a kubeconfig)."""
        return self._apiserver

    def stop(self) -> None:
        """Stop the trigger server, the informer, the queue (workers finish their key and exit), the API server.
        Idempotent; joins every thread it started."""
        self._stop.set()
        if self._trigger_proc is not None:
            self._sync_triggers(self._trigger_proc.stop())  # first: the load's writer; it lets triggers finish
        if self._httpd is not None:
            self._httpd.stop(5.0)
        if self.informer is not None:
            self.informer.stop()
        if self.controller is not None:
            self.controller.stop(10.0)  # shuts the queue down; reconciles in flight finish
        elif self.queue is not None:
            self.queue.shut_down()
        self.probe.close()
        if self._stats_thread is not None:
            self._stats_thread.join(5.0)
        if self._metrics is not None:
            self._metrics.unregister()
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        self._clients = []
        if self._apiserver is not None:
            self._apiserver.stop()
        if self._child is not None:
            self._child.stop()
        if self._saved_switch_interval is not None:
            sys.setswitchinterval(self._saved_switch_interval)
            self._saved_switch_interval = None

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- trigger ---------------------------------------------------------------------------------------------

    def trigger(self, name: str) -> dict[str, Any]:
        """Update ConfigMap ``{namespace}/{name}`` (create it if missing) with a new ``trigger-seq`` value.

        Returns the JSON answer of ``POST /trigger/{name}``. Raises :class:`TriggerError` (400 for a bad name,
        502 when the API server refused or failed, 503 before start and after stop). Thread-safe; blocks while
        :meth:`trigger_async` runs on the trigger server's loop (do not call it from that loop).
        """
        httpd = self._httpd
        if httpd is None:
            raise TriggerError(503, "pipeline not started")
        if self._trigger_proc is not None:
            return self._trigger_proc.trigger(name)
        result: dict[str, Any] = httpd.run(self.trigger_async(name))
        return result

    async def trigger_async(self, name: str) -> dict[str, Any]:
        """:meth:`trigger` as a coroutine; it must run on the trigger server's loop (the writer's connections
        belong to it)."""
        t_start = time.perf_counter_ns()
        writer, informer = self._writer, self.informer
        if writer is None or informer is None:
            raise TriggerError(503, "pipeline not started")
        with self._lock:
            self._trigger_seq += 1
            seq = self._trigger_seq
        ns = self.config.namespace
        try:
            action, rv, t_api, t_done = await write_trigger(
                writer, ns, name, seq, self._run_id, lambda key: informer.store.get_by_key(key) is not None)
        except TriggerError as exc:
            if exc.status >= 500:  # the API's failures; a bad name (400) is the caller's
                with self._lock:
                    self._trigger_errors += 1
            raise
        t_end = time.perf_counter_ns()
        self._note_trigger(f"{ns}/{name}", rv, t_start, t_api, t_done, t_end)
        self._log("[TRIGGER]", f"[TRIGGER] POST /trigger/{name} action={action} rv={rv} "
                               f"took={format_duration((t_done - t_api) / 1e9)}")
        return trigger_answer(name, f"{ns}/{name}", action, rv, seq, t_start, t_api, t_done, t_end)

    # -- results ---------------------------------------------------------------------------------------------

    def process_ids(self) -> dict[str, int]:
        """PIDs of the processes on the path: ``pipeline`` (this one), ``trigger`` (with ``trigger_process``),
        ``apiserver`` (this one unless ``apiserver_process``), ``etcd`` (when the test API server runs on etcd).
        Empty entries are left out."""
        pids = {"pipeline": os.getpid()}
        if self._trigger_proc is not None and self._trigger_proc.pid:
            pids["trigger"] = self._trigger_proc.pid
        if self._child is not None:
            pids.update(self._child.pids())
        elif self._apiserver is not None:
            pids["apiserver"] = os.getpid()
            if self._apiserver.etcd is not None and self._apiserver.etcd.pid is not None:
                pids["etcd"] = self._apiserver.etcd.pid
        return pids

    def summary(self) -> dict[str, Any]:
        """Everything measured so far, JSON-ready."""
        queue, informer = self.queue, self.informer
        v = self.verify()
        return {
            "api_server": self.api_url,
            "backend": "kubeconfig" if self.config.kubeconfig else self.config.backend,
            "apiserver_process": bool(self.config.apiserver_process and not self.config.kubeconfig),
            "trigger_process": self.config.trigger_process,
            "switch_interval_s": sys.getswitchinterval(),
            "workers": self.config.workers,
            "reconcile_s": self.config.reconcile,
            "stages": {k: asdict(st) for k, st in self.stages().items()},
            "verification": {**asdict(v), "ok": v.ok},
            "trigger_errors": self._trigger_errors,
            "reconcile_failures": self._reconcile_failures,
            "informer_events": self._events,
            "queue": asdict(queue.stats()) if queue is not None else None,
            "queue_len": len(queue) if queue is not None else None,
            "informer": asdict(informer.stats()) if informer is not None else None,
        }

    def _stats_loop(self) -> None:
        while not self._stop.wait(self.config.stats_interval):
            self.print_line(self.stats_line())

    def metrics_text(self) -> bytes | None:
        """The queue's metrics in Prometheus text format (``None`` without ``prometheus_client``)."""
        if self._metrics is None:
            return None
        from prometheus_client import generate_latest

        return bytes(generate_latest(self._metrics.registry))

    def refuse_triggers(self) -> None:
        """The first step of a stop: from now on ``POST /trigger/...`` answers 503 (triggers in flight finish)."""
        if self._trigger_proc is not None:
            self._trigger_proc.refuse()
        if self._httpd is not None:
            self._httpd.refuse()
