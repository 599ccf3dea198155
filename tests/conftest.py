from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.shells import REDIS_SHELLS, REDIS_SKIPS, SHELLS


@pytest.fixture(params=sorted(SHELLS))
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server for the session: ``$KEYQUEUE_REDIS_URL`` if set, else a fresh ``RedisServer``."""
    url = os.environ.get("KEYQUEUE_REDIS_URL")
    if url:
        yield url
        return
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'keyqueue[redis]')")
    from keyqueue.redis import RedisServer

    with RedisServer() as server:
        yield server.url


@pytest.fixture
def make_queue(shell: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_queue(kind="queue", *args, **kwargs)`` → a queue of that kind in the shell under test (sync facade).

    kind: "queue", "delaying" or "ratelimiting". Every queue built here is shut down after the test.
    """
    created: list[Any] = []
    if shell in REDIS_SHELLS:
        reason = REDIS_SKIPS.get(request.node.originalname)
        if reason is not None:
            pytest.skip(reason)
        url = request.getfixturevalue("redis_url")

    def factory(kind: str = "queue", *args: Any, **kwargs: Any) -> Any:
        if shell in REDIS_SHELLS:
            q = REDIS_SHELLS[shell](kind, *args, url=url, **kwargs)
        else:
            q = SHELLS[shell](kind, *args, **kwargs)
        created.append(q)
        return q

    yield factory
    for q in created:
        q.shut_down()
        delete = getattr(q, "delete", None)
        if delete is not None:
            delete()  # a Redis queue's state outlives its handles
        close = getattr(q, "close", None)
        if close is not None:
            close()


_TEMP_PREFIXES = ("keyqueue-apiserver-", "keyqueue-etcd-", "keyqueue-pipeline-")


def _leftover_temp_dirs() -> list[str]:
    """Temp dirs of ours that outlived their owner: this process's own (every fixture is torn down by now) or a
    process that has exited (a CLI or pipeline child started by a test)."""
    import glob
    import os
    import tempfile

    from keyqueue._tempdirs import stale_tempdirs

    mine = [p for prefix in _TEMP_PREFIXES
            for p in glob.glob(os.path.join(tempfile.gettempdir(), f"{prefix}{os.getpid()}-*"))]
    return sorted(set(mine) | {p for prefix in _TEMP_PREFIXES for p in stale_tempdirs(prefix)})


@pytest.fixture(scope="session", autouse=True)
def _no_temp_dirs_left_behind() -> Iterator[None]:
    """The suite leaves none of the temp dirs it makes (the kubeconfig with a token lives in
    one). Dirs already stale before the session (an earlier killed run) are not this session's doing."""
    before = set(_leftover_temp_dirs())
    yield
    import shutil

    left = [p for p in _leftover_temp_dirs() if p not in before]
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    assert not left, f"temp dirs left behind by the test session: {left}"


_GIL_AT_START: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """On free-threaded CPython, fail the run if an extension module turned the GIL on (CPython does so when it
    imports one that does not declare free-threading support): every test after that import ran with a GIL."""
    if not _GIL_AT_START and sys._is_gil_enabled():
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("ERROR: the GIL was enabled during the run (see the RuntimeWarning naming the module)",
                                red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# -- suites that need an extra ----------------------------------------------------------------------------------------
# A directory or file here is not collected when keyqueue's extra is not installed in full (e.g. the core suites'
# environment, or free-threaded CPython, where grpcio — the etcd client's — ships no wheel); the terminal summary says
# what was left out and which distributions were missing.

_TESTS = Path(__file__).parent
_NEEDS_EXTRA = {
    "apiserver": ("apiserver", "informer", "leaderelection", "manager", "examples", "events", "testing", "lab",
                  "pipeline", "test_docs.py", "test_benchmarks_smoke.py"),
    "redis": ("redis",),
    "lab": ("lab", "pipeline", "test_benchmarks_smoke.py"),
    "testing": ("testing", "test_docs.py"),
    "docs": ("test_docs.py",),
}
_left_out: dict[str, str] = {}


def _missing(extra: str) -> list[str]:
    """The requirements of keyqueue's ``extra`` (its own extras followed) that are not installed here."""
    from packaging.requirements import Requirement

    missing: list[str] = []
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for text in importlib.metadata.requires("keyqueue") or ():
            req = Requirement(text)
            if req.marker is None or not req.marker.evaluate({"extra": name}) or req.marker.evaluate({"extra": ""}):
                continue
            if req.name == "keyqueue":
                for inner in req.extras:
                    walk(inner)
                continue
            try:
                importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(req.name)

    walk(extra)
    return missing


def _asked_for(path: Path, config: pytest.Config) -> bool:
    """Whether ``path`` is one of the run's arguments or inside one (pytest's arguments may carry ``::`` parts)."""
    for arg in config.args:
        asked = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if asked == path or asked in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    try:
        rel = collection_path.relative_to(_TESTS)
    except ValueError:
        return None
    if len(rel.parts) != 1:
        return None
    for extra, parts in _NEEDS_EXTRA.items():
        if rel.parts[0] in parts:
            missing = _missing(extra)
            if missing:
                if _asked_for(collection_path, config):  # not the siblings pytest looks at on its way in
                    _left_out[f"tests/{rel}"] = f"the {extra} extra is not installed (missing: {', '.join(missing)})"
                return True
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for path, why in sorted(_left_out.items()):
        terminalreporter.write_line(f"NOT COLLECTED {path}: {why}", yellow=True)
