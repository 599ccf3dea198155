from __future__ import annotations

import os
from collections.abc import Callable, Iterator
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
