"""``TestAPIServer``: etcd + storage + HTTP server in one context manager, like envtest."""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import shutil
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from keyqueue._httpserver import HTTPLimits
from keyqueue._tempdirs import owned_tempdir

from .etcd import EtcdProcess
from .registry import Registry
from .server import APIServer
from .storage import DEFAULT_WATCH_BUFFER, Backend, EtcdBackend, MemoryBackend
from .tls import make_certificates, server_ssl_context

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration

__all__ = ["TestAPIServer", "kubeconfig_text"]

log = logging.getLogger(__name__)


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar


def kubeconfig_text(server: str, *, ca_pem: bytes | None = None, token: str | None = None,
                    namespace: str = "default", name: str = "keyqueue") -> str:
    """A kubeconfig with one cluster, user and context (all named ``name``)."""
    cluster = [f"    server: {_q(server)}"]
    if ca_pem is not None:
        cluster.append(f"    certificate-authority-data: {_q(base64.b64encode(ca_pem).decode())}")
    user = f"    token: {_q(token)}" if token else None
    lines = [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        f"- name: {_q(name)}",
        "  cluster:",
        *cluster,
        "users:",
        f"- name: {_q(name)}",
        "  user:" + ("" if user else " {}"),
        *([user] if user else []),
        "contexts:",
        f"- name: {_q(name)}",
        "  context:",
        f"    cluster: {_q(name)}",
        f"    user: {_q(name)}",
        f"    namespace: {_q(namespace)}",
        f"current-context: {_q(name)}",
        "preferences: {}",
    ]
    return "\n".join(lines) + "\n"


class TestAPIServer:
    """A Kubernetes-API-compatible test server for ConfigMaps, Namespaces, Events, Leases, the built-in kinds
    operators create and watch (Pods, Services, Secrets, Deployments, Jobs, RBAC, ...; no controllers run),
    CustomResourceDefinitions and their custom resources (not kube-apiserver).

    ``with TestAPIServer() as s:`` starts, in order: etcd on free loopback ports
    (unless ``backend="memory"``, a :class:`~.storage.Backend` instance, or an
    already running ``etcd`` is passed), the storage layer with the namespaces
    ``default``, ``kube-system`` and ``kube-public``, and the HTTP server on
    ``127.0.0.1:port`` (0 = free port).  A kubeconfig for it is written to
    :attr:`kubeconfig_path`.  Leaving the block (also on an exception) stops
    everything this object started, waits for it, and removes temp files; an
    etcd passed in is left running.

    ``tls=True`` serves HTTPS with a throwaway CA (needs the ``openssl``
    command); ``token`` requires ``Authorization: Bearer <token>``
    (``token=True`` picks a random one), and such requests are from the user ``user`` (what
    ``kubectl auth whoami`` shows; nothing is authorized, every request is allowed).  ``compaction_interval`` (seconds):
    compact storage periodically like kube-apiserver (every 5 min by default
    there), each time up to the revision seen one interval earlier; ``None``
    (the default) never compacts on its own.  ``limits`` (connections, header,
    idle and body limits) and ``watch_buffer`` (events a watch may hold
    undelivered before the server ends it) go to :class:`~.server.APIServer`.

    The constructor only checks its arguments (``ValueError`` for an unknown
    backend, a port outside 0..65535 or a non-positive interval); :meth:`start`
    blocks until etcd is healthy and the server listens, and raises
    :class:`~.etcd.EtcdStartError`, ``FileNotFoundError`` (no etcd binary) or
    ``OSError`` (port taken) after stopping whatever it had started.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        backend: Literal["etcd", "memory"] | Backend = "etcd",
        *,
        etcd: EtcdProcess | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        prefix: str = "/registry",
        tls: bool = False,
        token: str | bool | None = None,
        bookmark_interval: float = 1.0,
        unsafe_no_fsync: bool = False,
        compaction_interval: float | None = None,
        limits: HTTPLimits | None = None,
        watch_buffer: int = DEFAULT_WATCH_BUFFER,
        user: str = "keyqueue-admin",
    ) -> None:
        if not isinstance(user, str) or not user:
            raise ValueError(f"user must be a non-empty str, got {type(user).__name__}: {user!r}")
        if not isinstance(backend, Backend) and backend not in ("etcd", "memory"):
            raise ValueError(f"unknown backend {backend!r}: use 'etcd', 'memory' or a Backend instance")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int within 0..65535, got {type(port).__name__}: {port!r}")
        for label, value in (("bookmark_interval", bookmark_interval), ("compaction_interval", compaction_interval)):
            if value is None and label == "compaction_interval":
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise ValueError(f"{label} must be a positive finite number of seconds, got "
                                 f"{type(value).__name__}: {value!r}")
        self._backend_choice = backend
        self._etcd_given = etcd
        self._unsafe_no_fsync = unsafe_no_fsync
        self.host = host
        self._port = port
        self.prefix = prefix
        self.tls = tls
        self.token: str | None = secrets.token_urlsafe(24) if token is True else (token or None)
        self.bookmark_interval = bookmark_interval
        self.compaction_interval = compaction_interval
        self.limits = limits
        self.watch_buffer = watch_buffer
        self.user = user
        self._compactor: threading.Thread | None = None
        self._stop_compactor = threading.Event()
        self.etcd: EtcdProcess | None = None
        self._owns_etcd = False
        self._backend: Backend | None = None
        self._registry: Registry | None = None
        self._server: APIServer | None = None
        self._tmpdir: Path | None = None
        self.ca_cert: Path | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ accessors
    @property
    def server(self) -> APIServer:
        if self._server is None:
            raise RuntimeError("TestAPIServer not started")
        return self._server

    @property
    def registry(self) -> Registry:
        """The storage layer; writes through it bypass HTTP (like a second API server)."""
        if self._registry is None:
            raise RuntimeError("TestAPIServer not started")
        return self._registry

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("TestAPIServer not started")
        return self._backend

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def kubeconfig_path(self) -> Path:
        if self._tmpdir is None:
            raise RuntimeError("TestAPIServer not started")
        return self._tmpdir / "kubeconfig"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        """Start everything; on failure, stop what was started and re-raise."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError("TestAPIServer already started")
            try:
                self._start()
            except BaseException:
                self.stop()
                raise
        return self

    def _start(self) -> None:
        self._tmpdir = Path(owned_tempdir("keyqueue-apiserver-"))
        choice = self._backend_choice
        if isinstance(choice, Backend):
            self._backend = choice
        elif choice == "memory":
            self._backend = MemoryBackend()
        elif choice == "etcd":
            if self._etcd_given is not None:
                self.etcd = self._etcd_given
            else:
                self.etcd = EtcdProcess(unsafe_no_fsync=self._unsafe_no_fsync,
                                        progress_notify_interval=min(self.bookmark_interval, 1.0))
                self._owns_etcd = True
                self.etcd.start()
            self._backend = EtcdBackend(self.etcd.endpoint)
        else:
            raise ValueError(f"unknown backend {choice!r}: use 'etcd', 'memory' or a Backend")
        self._registry = Registry(self._backend, self.prefix)
        self._registry.ensure_namespaces()
        ssl_context = None
        if self.tls:
            certs = make_certificates(self._tmpdir / "pki", self.host)
            self.ca_cert = certs.ca_cert
            ssl_context = server_ssl_context(certs)
        self._server = APIServer(self._registry, self.host, self._port, token=self.token,
                                 ssl_context=ssl_context, bookmark_interval=self.bookmark_interval,
                                 limits=self.limits, watch_buffer=self.watch_buffer, user=self.user)
        self._server.start()
        self.write_kubeconfig(self.kubeconfig_path)
        if self.compaction_interval:
            self._compactor = threading.Thread(target=self._compact_periodically, args=(self.compaction_interval,),
                                               name="apiserver-compactor", daemon=True)
            self._compactor.start()

    def _compact_periodically(self, interval: float) -> None:
        previous = 0
        while not self._stop_compactor.wait(interval):
            try:
                current = self.backend.revision()
                if previous:
                    self.backend.compact(previous)
                previous = current
            except Exception:  # storage going away during stop; the next round retries
                log.debug("periodic compaction failed", exc_info=True)

    def stop(self) -> None:
        """Stop the HTTP server, close storage, stop an etcd this object started.

        Blocks until all of it is down.  Idempotent; the object cannot be started again.
        """
        with self._lock:
            self._stop_compactor.set()
            if self._compactor is not None:
                self._compactor.join()
            if self._server is not None:
                self._server.stop()
            if self._registry is not None:
                self._registry.close_watches()
            if self._backend is not None and not isinstance(self._backend_choice, Backend):
                self._backend.close()
            if self.etcd is not None and self._owns_etcd:
                self.etcd.stop()
            self._owns_etcd = False
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def abandon(self) -> None:
        """For a process about to exit at once (a stop that hangs): SIGKILL the etcd this object started and remove
        its temp files (the kubeconfig with the token among them), without waiting for anything else."""
        if self.etcd is not None and self._owns_etcd:
            self.etcd.abandon()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def stop_server(self) -> None:
        """Stop only the HTTP server (storage and etcd keep running); open watch streams end."""
        self.server.stop()

    def start_server(self) -> None:
        """Start the HTTP server again, on the same port."""
        self.server.start()

    def compact(self) -> int:
        """Compact storage up to the current revision; older resourceVersions now give 410."""
        return self.registry.compact()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ clients
    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server to ``path`` (mode 0600, parents created); return the path."""
        path = Path(path)
        ca = self.ca_cert.read_bytes() if self.ca_cert is not None else None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(kubeconfig_text(self.url, ca_pem=ca, token=self.token))
        return path

    def configuration(self) -> Configuration:
        """A ``kubernetes.client.Configuration`` for this server."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        if self.ca_cert is not None:
            config.ssl_ca_cert = str(self.ca_cert)
        if self.token:
            config.api_key = {"authorization": self.token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return config

    def api_client(self, **kwargs: Any) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` (keep-alive connection pool); close it when done."""
        from kubernetes import client

        return client.ApiClient(self.configuration(), **kwargs)
