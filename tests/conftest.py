from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.shells import SHELLS


@pytest.fixture(params=sorted(SHELLS))
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_queue(shell: str) -> Iterator[Callable[..., Any]]:
    """``make_queue(kind="queue", *args, **kwargs)`` → a queue of that kind in the shell under test (sync facade).

    kind: "queue", "delaying" or "ratelimiting". Every queue built here is shut down after the test.
    """
    created: list[Any] = []

    def factory(kind: str = "queue", *args: Any, **kwargs: Any) -> Any:
        q = SHELLS[shell](kind, *args, **kwargs)
        created.append(q)
        return q

    yield factory
    for q in created:
        q.shut_down()
        close = getattr(q, "close", None)
        if close is not None:
            close()
