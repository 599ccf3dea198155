from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import keyqueue.redis


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def new_queue(redis_url: str) -> Iterator[Callable[..., Any]]:
    """``new_queue(cls=keyqueue.redis.Queue, name=None, **kwargs)``: a handle on a fresh queue; every handle built
    here is closed and the queues' state deleted after the test."""
    made: list[Any] = []

    def factory(cls: Any = keyqueue.redis.Queue, name: str | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("url", redis_url)
        q = cls(name or f"t-{uuid.uuid4().hex[:12]}", **kwargs)
        made.append(q)
        return q

    yield factory
    for q in made:
        with contextlib.suppress(keyqueue.redis.RedisQueueError):
            q.delete()
        q.close()


def pytest_report_header() -> str:
    """Which server the Redis tests run against (a leg's log then shows it was Valkey, Redis 7 ...)."""
    binary = keyqueue.redis.find_redis_server()
    try:
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"unknown ({exc})"
    return f"redis server: {binary}: {version}"
