"""The pipeline's trigger server in a child process of its own (``keyqueue-lab pipeline --trigger-process``).

In a cluster the writes a controller reacts to come from elsewhere (kubectl, another service), never from the
controller's own process; in the in-process arrangement the trigger server's event loop is the largest GIL user of
the pipeline process. Here it runs in ``python -m keyqueue.lab.trigger_process``: the same aiohttp server and the
same write (:func:`keyqueue.lab.api_writer.write_trigger`), with its own GIL.

The stage timestamps (``time.perf_counter_ns``, i.e. ``CLOCK_MONOTONIC`` on Linux: one clock for every process of
the machine, so the child's stamps compare with the pipeline's) stay in the child until the pipeline asks for them
(:meth:`TriggerProcess.collect`), so nothing crosses between the processes while a load runs. The protocol is
line-based: the pipeline writes ``flush N`` or ``refuse N`` on the child's stdin; the child answers on its stdout,
``records [...]`` for a flush (JSON: one ``[key, rv, t_start, t_api, t_done, t_end]`` per answered trigger, ``rv``
-1 for a failed one), then ``done N`` once the command took effect. The end of its stdin (the pipeline stopped,
or died) stops the child: it refuses new triggers, lets those in flight finish, prints the records not yet
collected and exits. It also stops on SIGTERM (sent by the kernel when the pipeline dies, see
:func:`keyqueue._procs.die_with_parent`), and ignores SIGINT: it runs in a process group of its own in the
pipeline's session (a terminal's Ctrl-C reaches the pipeline only, which stops the child in order; and on Linux it
stays in the pipeline's scheduling autogroup).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import Any, Final

from keyqueue._procs import die_with_parent, wait_or_kill
from keyqueue._signals import recorded_signals
from keyqueue.lab.api_writer import ApiWriter, TriggerError, write_trigger
from keyqueue.lab.trigger_server import TriggerServer, trigger_answer

__all__ = ["TriggerProcess", "TriggerRecord", "main"]

#: (key, resourceVersion or -1 for a failed trigger, t_start, t_api, t_done, t_end) in ``perf_counter_ns``
TriggerRecord = tuple[str, int, int, int, int, int]
_MAX_RECORDS: Final = 1_000_000  # bound on records held in the child between two collections (oldest dropped)


class _ChildTriggers:
    """The child's side: what :class:`keyqueue.lab.trigger_server.TriggerServer` calls for each request."""

    def __init__(self, writer: ApiWriter, namespace: str, run_id: str) -> None:
        self.writer = writer
        self.namespace = namespace
        self.run_id = run_id
        self.names: set[str] = set()  # ConfigMaps known to exist (listed at start, then written here)
        self.seq = 0
        self.lock = threading.Lock()
        self.records: list[TriggerRecord] = []
        self.dropped = 0

    async def list_existing(self) -> None:
        """Learn which ConfigMaps exist already (one list), so that the first trigger of each is a patch."""
        status, reason, raw = await self.writer.send("GET", f"/api/v1/namespaces/{self.namespace}/configmaps",
                                                     None, "application/json")
        if not 200 <= status < 300:
            raise RuntimeError(f"listing ConfigMaps: the API server answered {status} {reason}")
        self.names.update(f"{self.namespace}/{item['metadata']['name']}" for item in json.loads(raw)["items"])

    def _record(self, record: TriggerRecord) -> None:
        with self.lock:
            if len(self.records) >= _MAX_RECORDS:
                del self.records[: len(self.records) // 2]
                self.dropped += 1
            self.records.append(record)

    def take(self) -> list[TriggerRecord]:
        with self.lock:
            records, self.records = self.records, []
        return records

    async def trigger_async(self, name: str) -> dict[str, Any]:
        t_start = time.perf_counter_ns()
        self.seq += 1  # the loop's thread only
        seq, key = self.seq, f"{self.namespace}/{name}"
        try:
            action, rv, t_api, t_done = await write_trigger(self.writer, self.namespace, name, seq, self.run_id,
                                                            self.names.__contains__)
        except TriggerError as exc:
            if exc.status >= 500:
                now = time.perf_counter_ns()
                self._record((key, -1, t_start, t_start, now, now))
            raise
        self.names.add(key)
        t_end = time.perf_counter_ns()
        self._record((key, rv, t_start, t_api, t_done, t_end))
        return trigger_answer(name, key, action, rv, seq, t_start, t_api, t_done, t_end)

    def metrics_text(self) -> bytes | None:  # not served here (endpoints=False): the pipeline process serves them
        return None

    def summary(self) -> dict[str, Any]:
        return {}


def main(argv: list[str] | None = None) -> int:
    """The child: serve ``POST /trigger/{name}`` on 127.0.0.1 until stdin ends or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m keyqueue.lab.trigger_process")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pipeline stops this process in order
    with recorded_signals(signal.SIGTERM) as terminated:  # see keyqueue._signals: no Event.set() in a handler
        return _serve(args, terminated)


def _serve(args: argparse.Namespace, terminated: list[int]) -> int:
    from kubernetes import client
    from kubernetes import config as kube_config

    stop = threading.Event()
    conf = client.Configuration()
    load: Any = kube_config.load_kube_config
    load(config_file=args.kubeconfig, client_configuration=conf)
    writer = ApiWriter(conf)
    triggers = _ChildTriggers(writer, args.namespace, args.run_id)
    server = TriggerServer(triggers, args.port, writer, endpoints=False)
    server.start()
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def flush(tag: str) -> None:
        say("records " + json.dumps(triggers.take(), separators=(",", ":")))
        say(f"done {tag}")

    def commands() -> None:
        for line in sys.stdin:
            cmd, _, tag = line.strip().partition(" ")
            if cmd == "flush":
                flush(tag)
            elif cmd == "refuse":
                server.refuse()
                say(f"done {tag}")
        stop.set()  # stdin ended: the pipeline stopped (or died)

    try:
        server.run(triggers.list_existing())
        threading.Thread(target=commands, name="trigger-process-commands", daemon=True).start()
        say(f"ready port={server.port} pid={os.getpid()}")
        while not stop.wait(0.5) and not terminated:
            pass
    finally:
        server.stop(5.0)  # triggers in flight finish first
    try:
        flush("final")
    except BrokenPipeError:  # the pipeline died: nobody reads the records; exit without a second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class TriggerProcess:
    """The pipeline's side: start the child, send it a trigger, collect its records, stop it.

    :meth:`start` returns once the child listens (raises ``RuntimeError`` with its output if it does not within
    ``timeout``). :meth:`collect` returns the records of the triggers the child answered since the last call (it
    blocks until the child has answered, up to ``timeout``). :meth:`stop` ends the child's stdin, waits for it (then
    SIGTERM, then SIGKILL) and returns the records not collected yet. The child is in a process group of its own,
    in this session, and dies with this process (its stdin reaches its end; the kernel's parent-death signal).
    """

    def __init__(self, kubeconfig: str, namespace: str, port: int, run_id: str) -> None:
        self._argv = [sys.executable, "-m", "keyqueue.lab.trigger_process", "--kubeconfig", kubeconfig,
                      "--namespace", namespace, "--port", str(port), "--run-id", run_id]
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._cond = threading.Condition()
        self._records: list[TriggerRecord] = []
        self._flushed: set[str] = set()
        self._flush_seq = 0
        self._lines: list[str] = []  # other output (errors), the first 200 lines
        self._ended = False
        self.port = 0
        self.pid = 0

    def start(self, timeout: float = 60.0) -> TriggerProcess:
        cmd, preexec = die_with_parent(self._argv)
        self._proc = proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True, preexec_fn=preexec,
                                             process_group=0)  # see the module docstring
        self.pid = proc.pid
        self._reader = threading.Thread(target=self._read, args=(proc,), name="trigger-process-output", daemon=True)
        self._reader.start()
        with self._cond:
            self._cond.wait_for(lambda: self.port or self._ended, timeout)
        if not self.port:
            self.stop()
            raise RuntimeError("the trigger process did not start:\n" + "".join(self._lines))
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, _, rest = line.partition(" ")
            with self._cond:
                if kind == "records":
                    self._records.extend(tuple(r) for r in json.loads(rest))
                elif kind == "done":
                    self._flushed.add(rest.strip())
                    self._cond.notify_all()
                elif kind == "ready" and not self.port:
                    self.port = int(rest.split()[0].split("=", 1)[1])
                    self._cond.notify_all()
                elif len(self._lines) < 200:
                    self._lines.append(line)
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _send(self, line: str) -> bool:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except (OSError, ValueError):  # the child has gone
            return False
        return True

    def _command(self, cmd: str, timeout: float) -> None:
        """Send ``cmd`` and wait until the child says it took effect (or it has gone, or ``timeout``)."""
        with self._cond:
            self._flush_seq += 1
            tag = str(self._flush_seq)
        if self._send(f"{cmd} {tag}"):
            with self._cond:
                self._cond.wait_for(lambda: tag in self._flushed or self._ended, timeout)
                self._flushed.discard(tag)

    def collect(self, timeout: float = 10.0) -> list[TriggerRecord]:
        """The records of the triggers answered since the last call (empty once the child has gone)."""
        self._command("flush", timeout)
        with self._cond:
            records, self._records = self._records, []
        return records

    def trigger(self, name: str) -> dict[str, Any]:
        """One ``POST /trigger/{name}`` to the child, as the load sends it; returns the JSON answer. Raises
        :class:`~keyqueue.lab.api_writer.TriggerError` with the child's status, or 503 when it did not answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/trigger/" + urllib.parse.quote(name, safe=""), body=b"",
                         headers={"Content-Length": "0"})
            resp = conn.getresponse()
            body = json.loads(resp.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise TriggerError(503, f"the trigger process did not answer: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        if resp.status != 200:
            raise TriggerError(resp.status, str(body.get("error", body)))
        result: dict[str, Any] = body
        return result

    def refuse(self, timeout: float = 10.0) -> None:
        """New triggers answer 503 once this returns; those in flight finish."""
        self._command("refuse", timeout)

    def stop(self, timeout: float = 10.0) -> list[TriggerRecord]:
        """Stop the child (idempotent); returns the records it had not handed over yet."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the child's signal to stop
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                wait_or_kill(proc, 5)
            if self._reader is not None:
                self._reader.join(5.0)
            if proc.stdout is not None:
                proc.stdout.close()
        with self._cond:
            records, self._records = self._records, []
        return records


if __name__ == "__main__":
    sys.exit(main())
