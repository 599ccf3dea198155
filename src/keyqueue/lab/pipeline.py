"""``keyqueue-lab pipeline``: HTTP trigger → API server → etcd → watch → informer → queue → worker, timed.

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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TextIO

from keyqueue._core import AddResult
from keyqueue._procs import wait_or_kill
from keyqueue._signals import recorded_signals
from keyqueue.controller import Controller
from keyqueue.informer import Informer, meta_namespace_key
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    MAX_THREADS,
    add_json_argument,
    check_size,
    format_duration,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.handoff import HandoffProbe, HandoffSample
from keyqueue.lab.load import LoadResult, percentile, run_load, run_load_subprocess
from keyqueue.lab.race import SameKeyDetector
from keyqueue.threaded import RateLimitingQueue

if TYPE_CHECKING:
    from keyqueue.lab.trigger_process import TriggerProcess

__all__ = [
    "Pipeline",
    "PipelineConfig",
    "StageStats",
    "TriggerError",
    "Verification",
    "add_arguments",
    "microbench_queue",
    "run",
]

_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: Issue 18's goal for the enqueue → worker Get median (ns): the replay rows count the adds that wait longer.
ENQUEUE_TO_GET_GOAL_NS: Final = 300_000
_MAX_UNMATCHED: Final = 50_000  # bound on bookkeeping of write/event pairs that never meet (foreign writes)


class TriggerError(Exception):
    """A trigger could not be carried out; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class PipelineConfig:
    """Options of a :class:`Pipeline` (the CLI flags)."""

    port: int = 0  #: the trigger server's port on 127.0.0.1 (0 = a free port)
    workers: int = 4
    backend: str = "etcd"  #: "etcd" or "memory" (ignored with kubeconfig)
    kubeconfig: str | None = None  #: use this cluster instead of starting the test API server
    namespace: str = "default"
    reconcile: float = 0.002  #: seconds of simulated work per reconcile (a GIL-releasing sleep)
    log_lines: int = 10  #: per-event log lines printed per kind; -1 = all, 0 = none
    stats_interval: float = 5.0  #: seconds between [STATS] lines while serving; 0 = only at the end
    unsafe_no_fsync: bool = False  #: start etcd with --unsafe-no-fsync (faster, not durable; in-process server only)
    apiserver_process: bool = False  #: run the test API server in a child process (its own GIL) instead of here
    #: serve ``POST /trigger`` from a child process of its own (:mod:`keyqueue.lab.trigger_process`) instead of this
    #: process's loop; needs ``apiserver_process`` or ``kubeconfig`` (the child reads the kubeconfig)
    trigger_process: bool = False
    switch_interval: float | None = None  #: sys.setswitchinterval while running (None: leave the interpreter's)


@dataclass(frozen=True)
class StageStats:
    """Percentiles of one stage, in seconds (NaN when there is no sample)."""

    n: int
    p50: float
    p95: float
    p99: float
    max: float
    mean: float
    negative: int = 0  #: samples below zero (write → event: the event arrived before the write's answer)
    above: int = 0  #: samples above the ``above_ns`` given to :meth:`of` (0 when none was given)

    @classmethod
    def of(cls, samples_ns: list[int], above_ns: int | None = None) -> StageStats:
        values = sorted(samples_ns)
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        secs = [v / 1e9 for v in values]
        above = 0 if above_ns is None else sum(1 for v in values if v > above_ns)
        return cls(len(secs), percentile(secs, 50), percentile(secs, 95), percentile(secs, 99), secs[-1],
                   sum(secs) / len(secs), sum(1 for v in values if v < 0), above)


@dataclass(frozen=True)
class Verification:
    """Did every triggered name get reconciled after its last trigger, and never by two workers at once?"""

    names: int  #: distinct names triggered
    triggers: int
    reconciles: int
    lost: int  #: names whose last reconcile saw an older resourceVersion than their last trigger wrote
    lost_names: list[str]
    violations: int  #: reconciles that started while another worker held the same key

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.violations == 0


@dataclass
class _Samples:
    api: list[int] = field(default_factory=list)
    handler: list[int] = field(default_factory=list)
    write_to_event: list[int] = field(default_factory=list)
    chunk_to_handler: list[int] = field(default_factory=list)
    add: list[int] = field(default_factory=list)
    enqueue_to_get: list[int] = field(default_factory=list)
    enqueue_to_get_idle: list[int] = field(default_factory=list)
    enqueue_to_get_free: list[int] = field(default_factory=list)  # more idle workers than keys waiting at the add
    enqueue_to_get_busy: list[int] = field(default_factory=list)  # the others: they wait for a reconcile to end
    arrivals: list[tuple[int, str]] = field(default_factory=list)  # (ns, key) of every add (for replay_bound)
    handoff: list[HandoffSample] = field(default_factory=list)  # the gaps of adds a worker was free for, split up
    reconcile: list[int] = field(default_factory=list)


def microbench_queue(cycles: int = 20_000) -> dict[str, float]:
    """Median cost in seconds of ``add``, ``get``, ``done`` of one key on a fresh, uncontended queue (one thread),
    measured now, in batches of 100 cycles, on a queue built like the pipeline's (``stats=True``)."""
    q: RateLimitingQueue[str] = RateLimitingQueue(stats=True)
    clock = time.perf_counter_ns
    per: dict[str, list[float]] = {"add": [], "get": [], "done": [], "cycle": []}
    batch = 100
    for _ in range(max(1, cycles // batch)):
        ta = tg = td = 0
        for _ in range(batch):
            t0 = clock()
            q.add("default/obj")
            t1 = clock()
            key = q.get()
            t2 = clock()
            q.done(key)
            t3 = clock()
            ta += t1 - t0
            tg += t2 - t1
            td += t3 - t2
        per["add"].append(ta / batch / 1e9)
        per["get"].append(tg / batch / 1e9)
        per["done"].append(td / batch / 1e9)
        per["cycle"].append((ta + tg + td) / batch / 1e9)
    return {k: percentile(sorted(v), 50) for k, v in per.items()}


def _child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                found.extend(int(x) for x in fh.read().split())
    return found


# -- the trigger HTTP server -------------------------------------------------------------------------------------


def _error_json(code: int, message: str) -> tuple[bytes, str]:
    return json.dumps({"error": message}).encode() + b"\n", "application/json"


def _json_response(code: int, obj: Any) -> Any:
    from aiohttp import web

    return web.Response(status=code, body=json.dumps(obj, separators=(",", ":")).encode() + b"\n",
                        content_type="application/json")


class _ApiWriter:
    """The trigger's write to the API server: plain HTTP with aiohttp's client (a keep-alive connection pool), on
    the trigger server's loop, with the address, CA, client certificate and credentials of a
    ``kubernetes.client.Configuration`` (its ``auth_settings()``, read for every request, so a kubeconfig's refresh
    hook still works). The answer body is returned as bytes; nothing is decoded into the official client's models.
    Create its session lazily on the loop that uses it; :meth:`close` on that loop."""

    def __init__(self, conf: Any) -> None:
        import ssl

        self._conf = conf
        self.base = str(conf.host).rstrip("/")
        self._ssl: ssl.SSLContext | bool | None = None
        if self.base.startswith("https:"):
            if conf.verify_ssl:
                ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
                if not conf.assert_hostname and conf.assert_hostname is not None:
                    ctx.check_hostname = False
            else:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if conf.cert_file:
                ctx.load_cert_chain(conf.cert_file, conf.key_file or None)
            self._ssl = ctx
        self._session: Any = None

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for setting in self._conf.auth_settings().values():  # the official client's own source of credentials
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    async def send(self, method: str, path: str, body: dict[str, Any] | None,
                   content_type: str) -> tuple[int, str, bytes]:
        """One request (``body`` sent as JSON; ``None``: no body); returns (status, reason, body). Raises
        ``aiohttp.ClientError`` / ``OSError`` on failure."""
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(limit=64, ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        async with self._session.request(method, self.base + path, data=data,
                                         headers=self._headers(content_type)) as resp:
            return resp.status, str(resp.reason or ""), await resp.read()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _TriggerTarget(Protocol):
    """What the trigger server serves: a :class:`Pipeline`, or the trigger process's side
    (:mod:`keyqueue.lab.trigger_process`)."""

    async def trigger_async(self, name: str) -> dict[str, Any]: ...

    def metrics_text(self) -> bytes | None: ...

    def summary(self) -> dict[str, Any]: ...


class _TriggerServer:
    """The trigger server: aiohttp on an event loop thread (:class:`keyqueue._httpserver.BackgroundHTTPServer`,
    with its connection, header, idle and body limits); each trigger is a coroutine on that loop
    (:meth:`Pipeline.trigger_async`: its API write is awaited there, no thread is involved). :meth:`refuse` makes
    new triggers answer 503 (the first step of a stop); :meth:`stop` lets triggers in flight finish (up to
    ``timeout``), then closes the writer's connections. ``triggers_at``: triggers are served elsewhere (the
    pipeline's own server while a trigger process serves them): ``POST /trigger/...`` answers 404 naming that URL.
    ``endpoints=False``: only ``POST /trigger`` and ``GET /healthz`` (the trigger process)."""

    def __init__(self, pipeline: _TriggerTarget, port: int, writer: _ApiWriter | None, *, name: str = "trigger-server",
                 triggers_at: str = "", endpoints: bool = True) -> None:
        from keyqueue._httpserver import BackgroundHTTPServer, HTTPLimits

        self.pipeline = pipeline
        self.writer = writer
        self.limits = HTTPLimits(max_body=64 * 1024)
        self.accepting = True
        self.triggers_at = triggers_at
        self.endpoints = endpoints
        self.http = BackgroundHTTPServer(self._handle, "127.0.0.1", port, limits=self.limits, error_body=_error_json,
                                         name=name, after_stop=writer.close if writer is not None else None)

    def start(self) -> None:
        self.http.start()

    @property
    def port(self) -> int:
        return self.http.port

    def refuse(self) -> None:
        """From now on ``POST /trigger/...`` answers 503; triggers already running finish."""
        self.accepting = False

    def stop(self, timeout: float = 5.0) -> None:
        self.accepting = False
        self.http.stop(timeout)

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the server's loop and wait for its result (from any other thread)."""
        loop = self.http.loop
        if loop is None:
            coro.close()
            raise TriggerError(503, "the pipeline is stopping: no new triggers")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        from keyqueue._httpserver import BodyError, read_body

        try:
            await read_body(request, self.limits)
        except BodyError as exc:
            resp = _json_response(exc.code, {"error": str(exc)})
            resp.force_close()
            return resp
        path = request.path
        pipeline = self.pipeline
        if request.method == "POST":
            if not path.startswith("/trigger/"):
                return _json_response(404, {"error": f"no such endpoint: POST {path} (use POST /trigger/{{name}})"})
            if self.triggers_at:
                return _json_response(404, {"error": f"triggers are served by the trigger process: POST "
                                                     f"{self.triggers_at}{path}"})
            if not self.accepting:
                return _json_response(503, {"error": "the pipeline is stopping: no new triggers"})
            try:
                result = await pipeline.trigger_async(path[len("/trigger/"):])
            except TriggerError as exc:
                return _json_response(exc.status, {"error": str(exc)})
            return _json_response(200, result)
        if request.method != "GET":
            return _json_response(405, {"error": f"method {request.method} not allowed"})
        if path == "/healthz":
            return web.Response(status=200, body=b"ok\n", content_type="text/plain")
        if not self.endpoints:
            return _json_response(404, {"error": f"no such endpoint: GET {path} (the pipeline process serves it)"})
        if path == "/metrics":
            text = pipeline.metrics_text()
            if text is None:
                return web.Response(status=501, body=b"prometheus_client is not installed\n",
                                    content_type="text/plain")
            return web.Response(status=200, body=text, headers={"Content-Type": "text/plain; version=0.0.4; "
                                                                                "charset=utf-8"})
        if path == "/stats":
            return _json_response(200, pipeline.summary())
        return _json_response(404, {"error": f"no such endpoint: GET {path}"})


async def write_trigger(writer: _ApiWriter, namespace: str, name: str, seq: int, run_id: str,
                        exists: Callable[[str], bool]) -> tuple[str, int, int, int]:
    """A trigger's write: a merge patch of ConfigMap ``namespace/name`` with a new ``trigger-seq`` (a create if
    ``exists(key)`` says it is missing; a 404 to the patch creates, a 409 to the create patches). Returns
    ``(action, resourceVersion, t_api, t_done)`` (``perf_counter_ns`` around the request). Raises
    :class:`TriggerError` (400 for a bad name, 502 when the API server refused or failed)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise TriggerError(400, f"not a valid ConfigMap name: {name!r}")
    key = f"{namespace}/{name}"
    data = {"trigger-seq": str(seq), "trigger-run": run_id}  # never a no-op write (which keeps the RV)
    known = exists(key)
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    patch = ("PATCH", f"{collection}/{name}", {"data": data}, "application/merge-patch+json")
    create = ("POST", collection, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                   "data": data}, "application/json")
    t_api = time.perf_counter_ns()
    try:
        action, (status, reason, raw) = ("updated", await writer.send(*patch)) if known else (
            "created", await writer.send(*create))
        if status == 404 and known:  # deleted meanwhile
            action, (status, reason, raw) = "created", await writer.send(*create)
        elif status == 409 and not known:  # created meanwhile (another trigger or client)
            action, (status, reason, raw) = "updated", await writer.send(*patch)
        t_done = time.perf_counter_ns()
        if not 200 <= status < 300:
            raise TriggerError(502, f"API server answered {status} {reason}")
        obj = json.loads(raw)
        rv = int(obj["metadata"]["resourceVersion"])
    except TriggerError:
        raise
    except Exception as exc:  # connection refused/reset, timeout, an answer that is not an object
        raise TriggerError(502, f"API request failed: {type(exc).__name__}: {exc}") from exc
    return action, rv, t_api, t_done


def trigger_answer(name: str, key: str, action: str, rv: int, seq: int, t_start: int, t_api: int, t_done: int,
                   t_end: int) -> dict[str, Any]:
    """The JSON answer of ``POST /trigger/{name}``."""
    return {"name": name, "key": key, "action": action, "resourceVersion": str(rv), "seq": seq,
            "api_ms": (t_done - t_api) / 1e6, "took_ms": (t_end - t_start) / 1e6}


# -- the pipeline ------------------------------------------------------------------------------------------------


class _TimedQueue(RateLimitingQueue[str]):
    """The pipeline's queue: notes (per thread) when ``get`` returned, times each ``done`` call and how long a
    worker held each key (from ``get`` returning to its next ``get`` call: the reconcile and the worker's own
    turnaround).

    The controller's workers call ``get`` and ``done``; the reconcile function runs in between, in the same thread,
    and reads the stamp. Three ``perf_counter_ns`` calls are all this adds, plus the :class:`HandoffProbe`'s reads
    (the worker's scheduler counters before and after ``get``, the watched CPU clocks after it: ~5 µs, none of it
    between the add and the stamp).
    """

    def __init__(self, probe: HandoffProbe, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = threading.local()
        self.probe = probe
        self.done_ns: list[int] = []  # list.append is atomic: no lock needed
        self.busy_ns: list[int] = []

    def get(self, timeout: float | None = None) -> str:
        local = self.local
        t_get = getattr(local, "t_get", 0)
        if t_get:
            local.t_get = 0
            self.busy_ns.append(time.perf_counter_ns() - t_get)
        probe = self.probe
        sched0 = probe.sched()
        key = super().get(timeout)
        local.t_get = time.perf_counter_ns()
        local.handoff = (sched0, probe.sched(), probe.cpu())
        return key

    def done(self, item: str) -> bool:
        t0 = time.perf_counter_ns()
        requeued = super().done(item)
        self.done_ns.append(time.perf_counter_ns() - t0)
        return requeued


class Pipeline:
    """The whole mode-2 path in one object. :meth:`start` it (or ``with Pipeline(cfg) as p:``), send triggers
    (HTTP ``POST {url}/trigger/{name}`` or :meth:`trigger`), then :meth:`wait_reconciled`, :meth:`verify`,
    :meth:`report`, and :meth:`stop`.

    ``reconcile``: replaces the simulated work; called as ``reconcile(key, obj_or_None)`` in a worker thread
    (an exception counts as a failure: the key is re-added rate-limited). ``out``: where log lines go.
    """

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        reconcile: Callable[[str, dict[str, Any] | None], None] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.config = cfg = config if config is not None else PipelineConfig()
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
        self._saved_switch_interval: float | None = None
        self._reconcile_hook = reconcile
        self.out = out if out is not None else sys.stdout
        self.line_sink: Callable[[str], None] | None = None
        """Where log lines go instead of :attr:`out` while set (a live view prints them above itself)."""
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()  # all bookkeeping below
        self._cond = threading.Condition(self._lock)  # notified after every reconcile
        self._samples = _Samples()
        self._write_done: dict[tuple[str, int], int] = {}  # (key, rv) → ns the write's answer came (no event yet)
        self._event_seen: dict[tuple[str, int], int] = {}  # (key, rv) → ns the handler ran (no write answer yet)
        # key → (ns of the add that queued it, a worker idle, the probe's CPU clocks at that add when a worker was free
        # for it, a worker free for it: more idle workers than keys already waiting)
        self._pending_get: dict[str, tuple[int, bool, tuple[int, int, int] | None, bool]] = {}
        self.probe = HandoffProbe()
        self._last_trigger_rv: dict[str, int] = {}
        self._reconciled_rv: dict[str, int] = {}
        self._active = 0  # reconciles running now (workers - active = workers waiting in get)
        self._worker_ids: dict[str, int] = {}
        self._trigger_seq = 0
        self._run_id = os.urandom(4).hex()
        self._triggers = 0
        self._trigger_errors = 0
        self._reconcile_seq = 0
        self._reconciles = 0
        self._reconcile_failures = 0
        self._events = 0
        self._log_counts: dict[str, int] = {}
        self.detector = SameKeyDetector()
        self._apiserver: Any = None
        self._child: subprocess.Popen[str] | None = None
        self._child_dir: str | None = None
        self._child_kubeconfig = ""
        self._child_reader: threading.Thread | None = None
        self._clients: list[Any] = []
        self._writer: _ApiWriter | None = None
        self.informer: Informer | None = None
        self.queue: _TimedQueue | None = None
        self.controller: Controller[str] | None = None
        self._metrics: Any = None
        self._httpd: _TriggerServer | None = None
        self._trigger_proc: TriggerProcess | None = None
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

        kubeconfig = self.config.kubeconfig or self._child_kubeconfig
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
            self._start_child_apiserver()
        elif not cfg.kubeconfig:
            from keyqueue.apiserver import TestAPIServer

            backend: Any = cfg.backend  # checked in __init__
            self._apiserver = TestAPIServer(backend, unsafe_no_fsync=cfg.unsafe_no_fsync).start()
        watcher = client.ApiClient(self._client_configuration())
        self._clients = [watcher]
        self.api_url = watcher.configuration.host
        self._writer = _ApiWriter(watcher.configuration)

        provider = registry = None
        try:
            from prometheus_client import CollectorRegistry

            from keyqueue.metrics import PrometheusMetricsProvider

            registry = CollectorRegistry()
            provider = PrometheusMetricsProvider(registry)
            self._metrics = provider
        except ImportError:
            self._metrics = None
        self.queue = _TimedQueue(self.probe, name="pipeline", stats=True, metrics_provider=provider)
        self.controller = Controller(self._reconcile, self.queue, name="pipeline", workers=cfg.workers,
                                     registry=registry, stop_timeout=10.0)

        self.informer = Informer.for_config_maps(watcher, cfg.namespace, name=f"pipeline configmaps/{cfg.namespace}")
        self.informer.add_event_handler(on_add=self._on_add, on_update=self._on_update, on_delete=self._on_delete)
        self.informer.start()
        if not self.informer.wait_for_cache_sync(30):
            raise RuntimeError("the informer did not sync within 30 s")

        self.controller.start()

        if cfg.trigger_process:
            from keyqueue.lab.trigger_process import TriggerProcess

            kubeconfig = cfg.kubeconfig or self._child_kubeconfig
            self._trigger_proc = TriggerProcess(kubeconfig, cfg.namespace, cfg.port, self._run_id).start()
            # This process still serves GET /metrics, /stats, /healthz (a controller's own endpoint), idle while
            # the load runs; its loop thread is not the trigger loop (the probe's loop column stays empty).
            self._httpd = _TriggerServer(self, 0, None, name="pipeline-http", triggers_at=self._trigger_proc.url)
            self._httpd.start()
        else:
            httpd = _TriggerServer(self, cfg.port, self._writer)
            httpd.start()
            self._httpd = httpd

            async def loop_thread() -> int:
                return threading.get_ident()

            self.probe.watch_loop_thread(httpd.run(loop_thread()))
        if cfg.stats_interval > 0:
            self._stats_thread = threading.Thread(target=self._stats_loop, name="pipeline-stats", daemon=True)
            self._stats_thread.start()

    def _start_child_apiserver(self) -> None:
        """``python -m keyqueue.apiserver`` in a child process; returns once its kubeconfig is written."""
        from keyqueue._procs import die_with_parent
        from keyqueue._tempdirs import owned_tempdir

        self._child_dir = owned_tempdir("keyqueue-pipeline-")  # also removes those of pipelines that were killed
        path = os.path.join(self._child_dir, "kubeconfig")
        cmd = [sys.executable, "-m", "keyqueue.apiserver", "--kubeconfig", path, "--backend", self.config.backend,
               "--stop-on-stdin-eof"]
        # If this process dies without stopping the child, the child stops (and stops its etcd) twice over: the
        # kernel sends it SIGTERM (PR_SET_PDEATHSIG, see die_with_parent), and its stdin pipe, whose only writer is
        # this process, reaches its end. The pipe alone would do; the signal is faster.
        cmd, preexec = die_with_parent(cmd)
        self._child = child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, preexec_fn=preexec,
                                               # A terminal's Ctrl-C goes to the foreground process group: in a
                                               # process group of its own the child is stopped by stop(), after
                                               # the informer, never under the informer's open watch. It stays in
                                               # this process's session, i.e. (Linux, sched_autogroup) in its
                                               # scheduling group: in a session of its own it was a group as
                                               # large as this whole process, and a worker woken by an add waited
                                               # for the API server's time slices instead of preempting its
                                               # threads (issue 18: that doubled enqueue → Get at concurrency 10).
                                               process_group=0)
        lines: list[str] = []
        ready = threading.Event()

        def drain() -> None:  # reads the child's output to its end, so that it never blocks on a full pipe
            assert child.stdout is not None
            for line in child.stdout:
                if len(lines) < 200:
                    lines.append(line)
                if line.startswith("stop with"):  # the banner's last line: the kubeconfig is written
                    ready.set()
            ready.set()  # the child exited

        self._child_reader = threading.Thread(target=drain, name="apiserver-child-output", daemon=True)
        self._child_reader.start()
        ready.wait(60)
        if not os.path.exists(path) or child.poll() is not None:
            raise RuntimeError("the API server child process did not start:\n" + "".join(lines))
        self._child_kubeconfig = path

    def _stop_child_apiserver(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.terminate()  # SIGTERM: it stops its server and etcd
                wait_or_kill(child, 15)
            if self._child_reader is not None:
                self._child_reader.join(5.0)  # it reaches the end of the output now that the child is gone
                self._child_reader = None
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
        if self._child_dir is not None:
            import shutil

            shutil.rmtree(self._child_dir, ignore_errors=True)
            self._child_dir = None

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

    def _sync_triggers(self, records: list[Any] | None = None) -> None:
        """Book the triggers the trigger process answered since the last call (nothing without one)."""
        proc = self._trigger_proc
        if records is None:
            records = proc.collect() if proc is not None else []
        for key, rv, t_start, t_api, t_done, t_end in records:
            if rv < 0:
                with self._lock:
                    self._trigger_errors += 1
            else:
                self._note_trigger(key, rv, t_start, t_api, t_done, t_end)

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
        self._stop_child_apiserver()
        if self._saved_switch_interval is not None:
            sys.setswitchinterval(self._saved_switch_interval)
            self._saved_switch_interval = None

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- logging ---------------------------------------------------------------------------------------------

    def _log(self, kind: str, line: str) -> None:
        limit = self.config.log_lines
        if limit == 0:
            return
        with self._lock:
            n = self._log_counts.get(kind, 0) + 1
            self._log_counts[kind] = n
        if limit < 0 or n <= limit:
            self._print(line)
        elif n == limit + 1:
            self._print(f"{kind} ... (further {kind} lines suppressed; --log-lines -1 shows all)")

    def _print(self, line: str) -> None:
        with self._out_lock:
            sink = self.line_sink
            if sink is not None:
                sink(line)
            else:
                print(line, file=self.out, flush=True)

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
            return self._trigger_over_http(name)
        result: dict[str, Any] = httpd.run(self.trigger_async(name))
        return result

    def _trigger_over_http(self, name: str) -> dict[str, Any]:
        import http.client
        import urllib.parse

        assert self._trigger_proc is not None
        conn = http.client.HTTPConnection("127.0.0.1", self._trigger_proc.port, timeout=60)
        try:
            conn.request("POST", "/trigger/" + urllib.parse.quote(name, safe=""), body=b"",
                         headers={"Content-Length": "0"})
            resp = conn.getresponse()
            body = json.loads(resp.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise TriggerError(503, f"the trigger process did not answer: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        if resp.status != 200:
            raise TriggerError(resp.status, str(body.get("error", body)))
        result: dict[str, Any] = body
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

    def _note_trigger(self, key: str, rv: int, t_start: int, t_api: int, t_done: int, t_end: int) -> None:
        """Book one answered trigger (from this process's trigger server or the trigger process's records): its
        stage samples, the resourceVersion the verification waits for, and the write → event pairing."""
        with self._lock:
            self._triggers += 1
            if rv > self._last_trigger_rv.get(key, 0):
                self._last_trigger_rv[key] = rv
            self._samples.api.append(t_done - t_api)
            seen = self._event_seen.pop((key, rv), None)
            if seen is None:
                if len(self._write_done) >= _MAX_UNMATCHED:
                    self._write_done.clear()
                self._write_done[(key, rv)] = t_done
            else:
                self._samples.write_to_event.append(seen - t_done)
            self._samples.handler.append(t_end - t_start)

    # -- informer handlers (informer thread) -----------------------------------------------------------------

    def _on_add(self, obj: dict[str, Any]) -> None:
        self._enqueue(obj, "ADDED", time.perf_counter_ns())

    def _on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._enqueue(new, "MODIFIED" if old is not new else "RESYNC", time.perf_counter_ns())

    def _on_delete(self, obj: Any) -> None:
        self._enqueue(None, "DELETED", time.perf_counter_ns(), key=meta_namespace_key(obj))

    def _enqueue(self, obj: dict[str, Any] | None, kind: str, t_handler: int, key: str = "") -> None:
        queue, informer = self.queue, self.informer
        assert queue is not None and informer is not None
        if not self.probe.informer_watched:
            self.probe.watch_informer_thread(threading.get_ident())  # handlers run in the informer's thread
        received = informer.event_received_ns
        if obj is not None:
            key = meta_namespace_key(obj)
            rv = int(obj["metadata"].get("resourceVersion") or 0)
        else:
            rv = 0
        delta: int | None = None
        waiting = len(queue)  # keys ready, not yet taken (outside self._lock: the queue's lock is not nested in it)
        with self._lock:
            self._events += 1
            self._samples.arrivals.append((t_handler, key))
            if received and kind in ("ADDED", "MODIFIED"):
                self._samples.chunk_to_handler.append(t_handler - received)
                written = self._write_done.pop((key, rv), None)
                if written is None:
                    if len(self._event_seen) >= _MAX_UNMATCHED:
                        self._event_seen.clear()
                    self._event_seen[(key, rv)] = t_handler
                else:
                    delta = t_handler - written
                    self._samples.write_to_event.append(delta)
            mine = key not in self._pending_get
            if mine:
                idle = self._active < self.config.workers
                free = self.config.workers - self._active > waiting
                self._pending_get[key] = (t_handler, idle, self.probe.cpu() if free else None, free)
        t_add = time.perf_counter_ns()
        result = queue.add(key)
        t_added = time.perf_counter_ns()
        with self._lock:
            self._samples.add.append(t_added - t_add)
            if result != AddResult.QUEUED and mine:
                self._pending_get.pop(key, None)
        if delta is not None:
            when = f"{format_duration(delta / 1e9)} after the write"
        else:
            when = "(no matching /trigger write yet)" if kind in ("ADDED", "MODIFIED") and received else ""
        self._log("[ENQUEUE]", f"[ENQUEUE] key={key} (informer: {kind}) {when}".rstrip())
        if result == AddResult.MARKED:
            self._log("[REQUEUE-WHILE-PROCESSING]", f"[REQUEUE-WHILE-PROCESSING] key={key} a worker holds this key "
                                                    "— marked, redelivered once at Done()")
        elif result == AddResult.DEDUP:
            self._log("[DEDUP]", f"[DEDUP] key={key} already waiting or marked — Add is a no-op")

    # -- workers ---------------------------------------------------------------------------------------------

    def _worker_id(self) -> int:
        name = threading.current_thread().name
        with self._lock:
            wid = self._worker_ids.get(name)
            if wid is None:
                wid = self._worker_ids[name] = len(self._worker_ids) + 1
        return wid

    def _reconcile(self, key: str) -> None:
        """The controller's reconcile function (a worker thread): read the cache, do the (simulated) work."""
        queue, informer = self.queue, self.informer
        assert queue is not None and informer is not None
        clock = time.perf_counter_ns
        t_get = getattr(queue.local, "t_get", 0) or clock()
        handoff = getattr(queue.local, "handoff", None)
        wid = self._worker_id()
        with self._lock:
            self._active += 1
            self._reconcile_seq += 1
            seq = self._reconcile_seq
            pending = self._pending_get.pop(key, None)
            if pending is not None:
                waited = t_get - pending[0]
                self._samples.enqueue_to_get.append(waited)
                if pending[1]:
                    self._samples.enqueue_to_get_idle.append(waited)
                if pending[3]:
                    self._samples.enqueue_to_get_free.append(waited)
                    if pending[2] is not None and handoff is not None:
                        sched0, sched1, cpu1 = handoff
                        self._samples.handoff.append(HandoffSample.of(waited, pending[2], cpu1, sched0, sched1))
                else:
                    self._samples.enqueue_to_get_busy.append(waited)
        try:
            after = f" {format_duration(waited / 1e9)} after that" if pending is not None else ""
            self._log("[WORKER]", f"[WORKER-{wid}] key={key} Get seq={seq}{after}")
            self.detector.start(key)
            try:
                t0 = clock()
                obj = informer.store.get_by_key(key)
                seen_rv = int(obj["metadata"].get("resourceVersion") or 0) if obj is not None else 0
                if self._reconcile_hook is not None:
                    self._reconcile_hook(key, obj)
                elif self.config.reconcile > 0:
                    time.sleep(self.config.reconcile)
                t1 = clock()
            finally:
                self.detector.finish(key)
        except BaseException:
            with self._cond:
                self._active -= 1
                self._reconcile_failures += 1
                self._cond.notify_all()
            raise  # the controller re-adds the key rate-limited and logs
        with self._cond:
            self._active -= 1
            self._reconciles += 1
            self._samples.reconcile.append(t1 - t0)
            if seen_rv > self._reconciled_rv.get(key, -1):
                self._reconciled_rv[key] = seen_rv
            self._cond.notify_all()

    # -- results ---------------------------------------------------------------------------------------------

    def _lost_names(self) -> list[str]:
        # With the lock held.
        return sorted(k for k, rv in self._last_trigger_rv.items() if self._reconciled_rv.get(k, -1) < rv)

    def wait_reconciled(self, timeout: float) -> bool:
        """Block until every triggered name has been reconciled after its last trigger (``True``), or
        ``timeout`` seconds passed (``False``). With ``trigger_process`` the triggers it answered are collected
        first, and again every 0.5 s while waiting."""
        deadline = time.monotonic() + timeout
        while True:
            self._sync_triggers()
            with self._cond:
                if not self._lost_names():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    def verify(self) -> Verification:
        """The correctness check, now (call :meth:`wait_reconciled` first)."""
        self._sync_triggers()
        with self._lock:
            lost = self._lost_names()
            return Verification(
                names=len(self._last_trigger_rv),
                triggers=self._triggers,
                reconciles=self._reconciles,
                lost=len(lost),
                lost_names=lost[:20],
                violations=self.detector.violations,
            )

    def reset_measurements(self) -> None:
        """Forget the latency samples taken so far (e.g. after a warm-up). Counters and the verification's
        per-name bookkeeping are kept."""
        self._sync_triggers()  # the trigger process's records so far belong to what is forgotten
        with self._lock:
            self._samples = _Samples()
            if self.queue is not None:
                self.queue.done_ns = []
                self.queue.busy_ns = []

    def process_ids(self) -> dict[str, int]:
        """PIDs of the processes on the path: ``pipeline`` (this one), ``trigger`` (with ``trigger_process``),
        ``apiserver`` (this one unless ``apiserver_process``), ``etcd`` (when the test API server runs on etcd).
        Empty entries are left out."""
        pids = {"pipeline": os.getpid()}
        if self._trigger_proc is not None and self._trigger_proc.pid:
            pids["trigger"] = self._trigger_proc.pid
        if self._child is not None:
            pids["apiserver"] = self._child.pid
            etcd = _child_pids(self._child.pid)
            if etcd:
                pids["etcd"] = etcd[0]
        elif self._apiserver is not None:
            pids["apiserver"] = os.getpid()
            if self._apiserver.etcd is not None and self._apiserver.etcd.pid is not None:
                pids["etcd"] = self._apiserver.etcd.pid
        return pids

    def stages(self, recent: int = 0) -> dict[str, StageStats]:
        """Per-stage latency statistics so far; with ``recent > 0``, of each stage's last ``recent`` samples."""
        self._sync_triggers()
        with self._lock:
            s = self._samples
            done = self.queue.done_ns if self.queue is not None else []
            handoff = s.handoff[-recent:] if recent > 0 else s.handoff
            lists = {"api_write": s.api, "trigger_handler": s.handler, "write_to_informer": s.write_to_event,
                     "watch_chunk_to_handler": s.chunk_to_handler, "queue_add": s.add,
                     "enqueue_to_get": s.enqueue_to_get, "enqueue_to_get_idle": s.enqueue_to_get_idle,
                     "enqueue_to_get_free": s.enqueue_to_get_free, "enqueue_to_get_busy": s.enqueue_to_get_busy,
                     "queue_done": done, "reconcile": s.reconcile,
                     "worker_busy": self.queue.busy_ns if self.queue is not None else []}
        out = {name: StageStats.of(values[-recent:] if recent > 0 else values) for name, values in lists.items()}
        for part in ("loop", "informer", "runqueue"):  # -1: not known for that sample
            out[f"handoff_{part}"] = StageStats.of([v for h in handoff if (v := getattr(h, part)) != -1])
        out["handoff_others"] = StageStats.of([h.others for h in handoff])
        out["handoff_idle"] = StageStats.of([h.idle for h in handoff])  # signed: clocks read a few µs apart
        return out

    def handoff_slices(self) -> dict[str, float]:
        """How often the scheduler put a worker free for the key on a core during the ``get`` an add woke it from
        (:class:`~keyqueue.lab.handoff.HandoffSample`): ``n`` samples, ``mean``, ``once`` (share woken once: it got
        the GIL at its first try), ``p50``, ``p95``. Empty without the kernel's counters."""
        with self._lock:
            counts = sorted(h.slices for h in self._samples.handoff if h.slices >= 0)
        if not counts:
            return {}
        return {"n": len(counts), "mean": sum(counts) / len(counts), "once": sum(1 for c in counts if c <= 1) /
                len(counts), "p50": float(counts[len(counts) // 2]),
                "p95": float(counts[min(len(counts) - 1, int(0.95 * len(counts)))])}

    def replay_bound(self, limit: int = 100_000) -> dict[str, StageStats]:
        """The adds of this run (its last ``limit``) replayed on instant workers (:func:`keyqueue.lab.replay.replay`,
        the part of enqueue → ``Get`` that the arrivals' bursts set): the waits of the adds that queued a key, with
        ``workers`` workers that take a ready key at once and hold it for exactly the configured reconcile
        (``"reconcile"``; left out with a custom reconcile function) and for the busy times measured in this run, in
        turn (``"measured"``: the reconcile and the worker's own turnaround). Empty before any add."""
        from keyqueue.lab.replay import replay

        with self._lock:
            arrivals = self._samples.arrivals[-limit:]
        busy = list(self.queue.busy_ns) if self.queue is not None else []
        if not arrivals:
            return {}
        workers = self.config.workers
        out: dict[str, StageStats] = {}
        if self._reconcile_hook is None:
            out["reconcile"] = StageStats.of(replay(arrivals, workers, round(self.config.reconcile * 1e9)),
                                             ENQUEUE_TO_GET_GOAL_NS)
        if busy:
            out["measured"] = StageStats.of(replay(arrivals, workers, busy), ENQUEUE_TO_GET_GOAL_NS)
        return out

    def counters(self) -> tuple[int, int, int]:
        """(triggers handled, informer events, reconciles) so far."""
        self._sync_triggers()
        with self._lock:
            return self._triggers, self._events, self._reconciles

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

    def stats_line(self) -> str:
        """The ``[STATS]`` line."""
        assert self.queue is not None
        st = self.queue.stats()
        stage = self.stages()["trigger_handler"]
        with self._lock:
            triggers, events, reconciles, lost = self._triggers, self._events, self._reconciles, len(self._lost_names())

        def ms(x: float) -> str:
            return "-" if math.isnan(x) else f"{x * 1e3:.2f}ms"

        return (f"[STATS] events={events:,} adds={st.adds:,} queued={st.queued:,} dedup-noop={st.deduplicated:,} "
                f"rwp-marked={st.marked:,} reconciles={reconciles:,} queue.len={len(self.queue)} "
                f"unreconciled-names={lost} | /trigger reqs={triggers:,} p50={ms(stage.p50)} p95={ms(stage.p95)} "
                f"p99={ms(stage.p99)}")

    def _stats_loop(self) -> None:
        while not self._stop.wait(self.config.stats_interval):
            self._print(self.stats_line())

    def metrics_text(self) -> bytes | None:
        """The queue's metrics in Prometheus text format (``None`` without ``prometheus_client``)."""
        if self._metrics is None:
            return None
        from prometheus_client import generate_latest

        return bytes(generate_latest(self._metrics.registry))

    def verdict(self, load: LoadResult | None = None) -> bool:
        """The run's one verdict: verified (:meth:`verify`) and no request of ``load`` failed."""
        return self.verify().ok and (load is None or load.errors == 0)

    def refuse_triggers(self) -> None:
        """The first step of a stop: from now on ``POST /trigger/...`` answers 503 (triggers in flight finish)."""
        if self._trigger_proc is not None:
            self._trigger_proc.refuse()
        if self._httpd is not None:
            self._httpd.refuse()

    def report(self, micro: dict[str, float] | None = None, load: LoadResult | None = None, *,
               interrupted: bool = False) -> str:
        """The stage table (measured in this run) and the verification with the run's verdict
        (:meth:`verdict` of ``load``: OK or FAILED; INTERRUPTED instead of OK when a signal cut the load short),
        as text."""
        st = self.stages()

        def f(x: float) -> str:
            return "-" if math.isnan(x) else format_duration(x)

        def mean(s: StageStats) -> str:
            return f"mean {f(s.mean)}"

        bound = self.replay_bound()
        all_adds = st["enqueue_to_get"].n

        def share(s: StageStats) -> str:
            return f"{s.n / all_adds:.0%}" if all_adds else "-"

        def over(s: StageStats) -> str:
            return f"{s.above / s.n:.0%} wait > {f(ENQUEUE_TO_GET_GOAL_NS / 1e9)}" if s.n else ""

        rows: list[tuple[str, StageStats | None, str]] = [
            ("API write (/trigger → API server → answer)", st["api_write"], "client call in the trigger handler"),
            ("  /trigger handler, whole", st["trigger_handler"], ""),
            ("write answered → informer handler", st["write_to_informer"],
             f"{st['write_to_informer'].negative} events came before the write's answer (negative)"),
            ("  watch chunk read → handler", st["watch_chunk_to_handler"], "JSON decode + cache update"),
            ("queue add (call)", st["queue_add"], ""),
            ("enqueue → worker Get", st["enqueue_to_get"], "all adds that queued a key"),
            ("  … with a worker idle at the add", st["enqueue_to_get_idle"], "fewer reconciles running than workers"),
            ("  … a worker free for it at the add", st["enqueue_to_get_free"],
             f"{share(st['enqueue_to_get_free'])}: more idle workers than keys waiting; split up below (means add up)"),
            ("    trigger loop thread on a core meanwhile", st["handoff_loop"], mean(st["handoff_loop"])),
            ("    informer thread on a core meanwhile", st["handoff_informer"], mean(st["handoff_informer"])),
            ("    other threads here (the worker too)", st["handoff_others"], mean(st["handoff_others"])),
            ("    no thread of this process on a core", st["handoff_idle"], mean(st["handoff_idle"]) +
             " (kernel wake-up, other processes)"),
            ("    worker runnable, waiting for a core", st["handoff_runqueue"], mean(st["handoff_runqueue"])),
            ("  … no worker free: waits for a reconcile", st["enqueue_to_get_busy"],
             f"{share(st['enqueue_to_get_busy'])}: every idle worker had a key waiting already"),
            *((f"  replay, instant hand-offs, {label}", bound[name], f"the same adds; {over(bound[name])}")
              for name, label in (("reconcile", "exact reconcile"), ("measured", "measured busy"))
              if name in bound),
            ("queue done (call)", st["queue_done"], ""),
            ("worker busy per key (get → next get)", st["worker_busy"], "the reconcile and the worker's turnaround"),
            ("reconcile", st["reconcile"],
             "simulated: sleep " + format_duration(self.config.reconcile) if self._reconcile_hook is None else
             "custom"),
        ]
        lines = [f"{'stage':<44} {'median':>9} {'p95':>9} {'p99':>9} {'n':>7}  note", "-" * 100]
        for label, s, note in rows:
            assert s is not None
            lines.append(f"{label:<44} {f(s.p50):>9} {f(s.p95):>9} {f(s.p99):>9} {s.n:>7}  {note}")
        slices = self.handoff_slices()
        if slices:
            label = "    worker put on a core, per woken get"
            lines.append(f"{label:<44} {slices['p50']:>9.0f} {slices['p95']:>9.0f} {'':>9} {slices['n']:>7.0f}  "
                         f"times; mean {slices['mean']:.2f}, {slices['once']:.0%} once (the GIL free at its first try)")
        if micro:
            lines.append(f"{'queue add+get+done, one thread (microbench)':<44} {f(micro['cycle']):>9} "
                         f"{'':>9} {'':>9} {'':>7}  add {f(micro['add'])}, get {f(micro['get'])}, "
                         f"done {f(micro['done'])}; measured now")
        v = self.verify()
        lines.append("")
        failed = f" | failed requests={load.errors}" if load is not None else ""
        lines.append(f"verification: {v.names} names, {v.triggers} triggers, {v.reconciles} reconciles | "
                     f"lost={v.lost} (names not reconciled after their last trigger) | same-key overlaps="
                     f"{v.violations}{failed} -> {_verdict_word(self.verdict(load), interrupted)}")
        if v.lost_names:
            lines.append(f"  not reconciled after the last trigger: {', '.join(v.lost_names)}")
        return "\n".join(lines)


def _verdict_word(ok: bool, interrupted: bool) -> str:
    if not ok:
        return "FAILED"
    return "INTERRUPTED (verified so far)" if interrupted else "OK"


# -- CLI ---------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="trigger server port on 127.0.0.1 (default: free port)")
    parser.add_argument("--workers", type=int, default=4, help="reconciling worker threads (default 4)")
    parser.add_argument("--kubeconfig", default=None,
                        help="use this cluster instead of starting the test API server (ConfigMaps in 'default')")
    parser.add_argument("--backend", choices=("etcd", "memory"), default="etcd",
                        help="storage of the embedded test API server (default etcd)")
    parser.add_argument("--reconcile", type=parse_duration, default=0.002,
                        help="simulated work per reconcile, a GIL-releasing sleep (default 2ms)")
    parser.add_argument("--requests", type=int, default=0,
                        help="run a built-in load of N requests, report and exit (default: serve until Ctrl-C)")
    parser.add_argument("--concurrency", type=int, default=10, help="built-in load concurrency (default 10)")
    parser.add_argument("--keys", type=int, default=20, help="built-in load: distinct names (default 20)")
    parser.add_argument("--load-in-process", action="store_true",
                        help="run the built-in load in threads of this process instead of a child process")
    parser.add_argument("--log-lines", type=int, default=10,
                        help="per-event log lines to print per kind (default 10; -1 all, 0 none)")
    parser.add_argument("--stats-interval", type=parse_duration, default=5.0,
                        help="time between [STATS] lines while serving (default 5s; 0 only at the end)")
    parser.add_argument("--apiserver", choices=("process", "thread"), default="process",
                        help="run the test API server (and its etcd) in a child process, as a real cluster's would "
                             "be (default), or in threads of this process (it then shares this process's GIL)")
    parser.add_argument("--trigger-process", action="store_true",
                        help="serve POST /trigger from a child process of its own (the load's writer, as kubectl or "
                             "another service would be) instead of this process's loop; needs --apiserver process "
                             "or --kubeconfig")
    parser.add_argument("--switch-interval", type=parse_duration, default=None,
                        help="set the interpreter's GIL switch interval while running (default: leave it, 5ms); "
                             "a shorter one lets a thread woken by I/O take the GIL from CPU-bound threads sooner")
    parser.add_argument("--plain", action="store_true",
                        help="no live view, plain lines even on a terminal")
    parser.add_argument("--unsafe-no-fsync", action="store_true",
                        help="start etcd with --unsafe-no-fsync (faster writes, not durable; with --apiserver thread)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """0 when the run verified (nothing lost, no same-key overlap, no request failed), 1 otherwise, 2 for bad
    arguments or a pipeline that could not start, 130 when Ctrl-C or SIGTERM cut the built-in load short (after
    the report of what ran).

    SIGINT or SIGTERM (while serving, or during the built-in load) ends the run in order: the trigger server
    refuses new triggers (503), the load stops sending, the pipeline settles (every name reconciled, up to 30 s),
    then the report prints its one verdict, and that verdict is the exit status: ``OK`` 0, ``FAILED`` 1, and
    ``INTERRUPTED`` 130 for a built-in load cut short that verified so far (the exit status every lab command uses
    for an interrupt; a signal that ends serving is the normal end and gives ``OK``). Further signals while
    stopping are ignored. The child API server also gets SIGTERM from the kernel if this process dies outright
    (Linux, when started from the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return _run(args, [])
    # The handlers only record the signal (see keyqueue._signals); the loops in _run poll for it.
    with recorded_signals(signal.SIGINT, signal.SIGTERM) as received:
        return _run(args, received)


def _run(args: argparse.Namespace, received: list[int]) -> int:
    out = human_stream(args)
    try:
        check_size("--workers", args.workers, 1, MAX_THREADS)
        check_size("--concurrency", args.concurrency, 1, MAX_THREADS)
        check_size("--requests", args.requests, 0, 10_000_000)
        check_size("--keys", args.keys, 1, 1_000_000)
    except ValueError as exc:
        print(f"pipeline: {exc}", file=out)
        return 2
    cfg = PipelineConfig(port=args.port, workers=args.workers, backend=args.backend, kubeconfig=args.kubeconfig,
                         reconcile=args.reconcile, log_lines=args.log_lines, stats_interval=args.stats_interval,
                         unsafe_no_fsync=args.unsafe_no_fsync, apiserver_process=args.apiserver == "process",
                         trigger_process=args.trigger_process, switch_interval=args.switch_interval)
    try:
        pipeline = Pipeline(cfg, out=out)
    except ValueError as exc:
        print(f"pipeline: {exc}", file=out)
        return 2
    load: LoadResult | None = None
    try:
        pipeline.start()
    except Exception as exc:
        print(f"pipeline: could not start: {type(exc).__name__}: {exc}", file=out)
        return 2
    try:
        if cfg.kubeconfig:
            where = f"cluster {pipeline.api_url} (from {cfg.kubeconfig})"
        else:
            how = "a child process" if cfg.apiserver_process else "this process"
            where = (f"test API server {pipeline.api_url} ({cfg.backend} storage, in {how}; a Kubernetes-API-"
                     "compatible server for ConfigMaps, not kube-apiserver)")
        served = " (a child process)" if cfg.trigger_process else ""
        print(f"pipeline: triggers on {pipeline.url}/trigger/{{name}}{served}, metrics on "
              f"{pipeline.metrics_url}/metrics; {where}; {cfg.workers} workers", file=out, flush=True)
        view = None
        if not getattr(args, "plain", False) and out.isatty():
            from keyqueue.lab.pipeline_view import start_live_view

            view = start_live_view(pipeline, out)
        try:
            if args.requests > 0:
                load = _run_load_until_signal(pipeline, args, received)
                pipeline._print(load.line())  # above the live view, if there is one
            else:
                pipeline._print(f"try: curl -X POST {pipeline.url}/trigger/obj-7   (Ctrl-C to stop and report)")
                while not received:
                    time.sleep(0.2)
        finally:
            if view is not None:
                view.stop()
        # Interrupted = a signal cut the built-in load short (serving ends with a signal normally).
        interrupted = bool(received) and load is not None
        if received:
            pipeline.refuse_triggers()
            name = signal.Signals(received[0]).name
            during = " during the load" if load is not None else ""
            print(f"pipeline: {name}{during}: no new triggers; settling, then the verdict", file=out, flush=True)
            if interrupted:
                print("pipeline: interrupted; the report covers the triggers sent so far", file=out, flush=True)
        settled = pipeline.wait_reconciled(30.0)
        print(pipeline.stats_line(), file=out)
        micro = microbench_queue()
        print("", file=out)
        print(pipeline.report(micro, load, interrupted=interrupted), file=out)
        if not settled:
            print("pipeline: some names were still not reconciled after 30 s", file=out)
        summary = pipeline.summary()
        summary["replay_bound"] = {k: asdict(st) for k, st in pipeline.replay_bound().items()}
        summary["queue_microbench"] = micro
        summary["load"] = load.summary() if load is not None else None
        write_json(args.json, summary)
        ok = pipeline.verdict(load)
    finally:
        pipeline.stop()
    # The one verdict printed is the exit status: OK 0, FAILED 1, INTERRUPTED (verified so far) 130, like every
    # other lab command cut short by Ctrl-C.
    if not ok:
        return 1
    return EXIT_INTERRUPTED if interrupted else 0


def _run_load_until_signal(pipeline: Pipeline, args: argparse.Namespace, received: list[int]) -> LoadResult:
    """The built-in load (in a thread here, or a child process); a signal refuses new triggers and stops it."""
    stop = threading.Event()
    results: list[LoadResult | BaseException] = []

    def go() -> None:
        try:
            if args.load_in_process:
                results.append(run_load(pipeline.url, args.requests, args.concurrency, args.keys, stop=stop))
            else:
                results.append(run_load_subprocess(pipeline.url, args.requests, args.concurrency, args.keys,
                                                   stop=stop))
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=go, name="pipeline-load", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
        if received and not stop.is_set():
            pipeline.refuse_triggers()  # first: nothing new gets in while the load winds down
            stop.set()
    result = results[0]
    if isinstance(result, BaseException):
        raise result
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="keyqueue-lab pipeline", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
