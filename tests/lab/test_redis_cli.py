"""``keyqueue-lab redis``: a Redis two handles share a queue on, stopped by Ctrl-C with nothing left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from keyqueue.redis import Queue

from .ptys import interrupt_after

pytest.importorskip("redis")


@pytest.mark.timeout(120)
def test_two_handles_share_a_queue_on_it_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    taken: list[str] = []

    def share(lines: list[str]) -> None:
        match = re.search(r"redis://127\.0\.0\.1:\d+", "".join(lines))
        assert match is not None, lines
        producer, consumer = Queue("demo", url=match.group(0)), Queue("demo", url=match.group(0))
        try:
            producer.add("default/a")
            key = consumer.get(timeout=30)
            taken.append(key)
            consumer.done(key)
            producer.add("default/b")  # left in the server: the summary counts its keys
        finally:
            producer.close()
            consumer.close()

    status, out = interrupt_after(["redis"], lambda line: line.startswith("stop with"), timeout=30,
                                  env={"TMPDIR": str(tmp_path)}, before=share)
    assert status == 0, out
    assert taken == ["default/a"]
    assert re.search(r"SIGINT: stopping after \S+; it held [1-9]\d* keys? \(deleted with it\)", out), out
    assert "Traceback" not in out
    assert not list(tmp_path.glob("keyqueue-redis-*"))  # its files are gone


def test_a_port_in_use_is_refused_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from keyqueue.lab.__main__ import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["redis", "--port", str(taken.getsockname()[1])]) == 2
    text = capsys.readouterr().err.strip()
    assert text.startswith("redis: could not start") and "Traceback" not in text
