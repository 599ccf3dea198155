from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keyqueue.lab.__main__ import main


@pytest.fixture
def lab(tmp_path: Path) -> Callable[..., tuple[int, dict[str, Any]]]:
    """``lab("race", "--adds", "1000")`` → (exit status, the --json summary), running main() in-process."""

    def call(*argv: str) -> tuple[int, dict[str, Any]]:
        path = tmp_path / f"summary-{len(list(tmp_path.iterdir()))}.json"
        status = main([*argv, "--json", str(path)])
        summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        return status, summary

    return call
