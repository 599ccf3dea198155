from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

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


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    paths: ClassVar[list[str]]  # set per server by the fixture

    def do_POST(self) -> None:
        self.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorded() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering every POST with 200, as the pipeline's trigger server would, and the paths it
    was sent."""
    paths: list[str] = []
    handler = type("Recorder", (_Recorder,), {"paths": paths})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def trigger_url(recorded: tuple[str, list[str]]) -> str:
    """The URL of :func:`recorded`'s server."""
    return recorded[0]
