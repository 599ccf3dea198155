"""The conformance suite runs against every shell: the in-process ones and the Redis ones (see tests/shells.py)."""

from __future__ import annotations

import pytest

from tests.shells import REDIS_SHELLS, SHELLS


@pytest.fixture(params=sorted(SHELLS) + sorted(REDIS_SHELLS))
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)
