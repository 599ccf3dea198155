"""End to end: POST /trigger → test API server → watch → informer → queue → controller workers.

The same-key detector used here is :class:`keyqueue.lab.race.SameKeyDetector`; its control (the identical
harness over a plain queue, which must report overlaps) is ``tests/lab/test_race.py``. The "lost" check has its
control here: a name whose reconcile always fails must be reported lost.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver import find_etcd_binary
from keyqueue.lab.api_writer import TriggerError
from keyqueue.lab.load import check_loopback_url, percentile, run_load
from keyqueue.lab.pipeline import Pipeline, PipelineConfig
from keyqueue.lab.pipeline_stages import microbench_queue

pytest.importorskip("kubernetes")

WAIT = 10.0


def make(backend: str = "memory", **kwargs: Any) -> Pipeline:
    reconcile = kwargs.pop("reconcile_hook", None)
    cfg = PipelineConfig(backend=backend, log_lines=0, stats_interval=0, unsafe_no_fsync=True,
                         **{"reconcile": 0.001, **kwargs})
    return Pipeline(cfg, reconcile=reconcile, out=io.StringIO())


@pytest.fixture
def pipelines() -> Iterator[Callable[..., Pipeline]]:
    started: list[Pipeline] = []

    def factory(backend: str = "memory", **kwargs: Any) -> Pipeline:
        p = make(backend, **kwargs).start()
        started.append(p)
        return p

    yield factory
    for p in started:
        p.stop()


def http_request(url: str, method: str, path: str) -> tuple[int, bytes]:
    host, port, _ = check_loopback_url(url)
    conn = http.client.HTTPConnection(host, port, timeout=WAIT)
    try:
        conn.request(method, path, body=b"", headers={"Content-Length": "0"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.005)


def test_every_name_is_reconciled_after_its_last_trigger(pipelines: Callable[..., Pipeline]) -> None:
    p = pipelines(workers=4)
    load = run_load(p.url, requests=120, concurrency=6, keys=8)
    assert load.errors == 0 and load.requests == 120
    assert p.wait_reconciled(WAIT)
    v = p.verify()
    assert v.ok and v.lost == 0 and v.violations == 0
    assert v.names == 8 and v.triggers == 120 and 8 <= v.reconciles <= 120
    stages = p.stages()
    assert stages["api_write"].n == 120
    assert stages["write_to_informer"].n == 120  # every write's event was matched to its write
    assert stages["reconcile"].n == v.reconciles
    stats = p.queue.stats() if p.queue is not None else None
    assert stats is not None and stats.adds == 120  # one add per watch event
    # Every add that queued a key is either one a worker was free for or one that waited behind others.
    queued, free = stages["enqueue_to_get"].n, stages["enqueue_to_get_free"].n
    assert queued > 0 and free > 0 and free + stages["enqueue_to_get_busy"].n == queued
    assert free <= stages["enqueue_to_get_idle"].n <= queued  # a worker free for the key is an idle one
    # Every gap of a worker free for the key is split up by the hand-off probe (keyqueue.lab.handoff).
    assert stages["handoff_others"].n == free and stages["handoff_idle"].n == free
    assert stages["handoff_loop"].n == free and stages["handoff_informer"].n == free
    if p.probe.linux:
        assert stages["handoff_runqueue"].n == free
        slices = p.handoff_slices()
        assert slices["n"] == free and slices["p95"] >= 1  # a worker blocked in get is put on a core to return
    assert stages["worker_busy"].n >= v.reconciles - 4  # a worker's first get has no busy time before it
    assert stages["worker_busy"].p50 >= 0.001  # it holds a key at least for the reconcile's sleep
    # The same adds replayed on instant workers (keyqueue.lab.replay), for the configured reconcile and for the
    # busy times measured.
    bound = p.replay_bound()
    assert set(bound) == {"reconcile", "measured"}
    assert bound["reconcile"].n > 0 and 0 <= bound["reconcile"].above <= bound["reconcile"].n
    report = p.report(verbose=True)
    assert "replay, instant hand-offs, exact reconcile" in report and "no worker free" in report


def test_http_endpoints(pipelines: Callable[..., Pipeline]) -> None:
    p = pipelines(workers=1)
    status, body = http_request(p.url, "POST", "/trigger/obj-1")
    assert status == 200
    answer = json.loads(body)
    assert answer["action"] == "created" and answer["key"] == "default/obj-1" and int(answer["resourceVersion"]) > 0
    status, body = http_request(p.url, "POST", "/trigger/obj-1")
    assert status == 200 and json.loads(body)["action"] == "updated"
    assert p.wait_reconciled(WAIT)
    status, body = http_request(p.url, "POST", "/trigger/Not_A_Name")
    assert status == 400 and b"not a valid ConfigMap name" in body
    assert http_request(p.url, "POST", "/nothing")[0] == 404
    assert http_request(p.url, "GET", "/healthz") == (200, b"ok\n")
    status, body = http_request(p.url, "GET", "/stats")
    assert status == 200 and json.loads(body)["verification"]["triggers"] == 2
    status, body = http_request(p.url, "GET", "/metrics")
    assert status == 200
    assert b'workqueue_adds_total{name="pipeline"}' in body
    assert b"controller_runtime_reconcile_total" in body
    assert p.apiserver is not None
    p.apiserver.stop_server()  # the API server is down: the trigger answers 502 and counts the failure
    try:
        status, body = http_request(p.url, "POST", "/trigger/obj-1")
    finally:
        p.apiserver.start_server()
    assert status == 502 and b"API request failed" in body
    assert p.summary()["trigger_errors"] == 1


def test_request_bodies_are_consumed_on_keep_alive(pipelines: Callable[..., Pipeline]) -> None:
    """Bodies (sized or chunked) are read, so the next request on the same connection is parsed correctly."""
    p = pipelines(workers=1)
    host, port, _ = check_loopback_url(p.url)
    conn = http.client.HTTPConnection(host, port, timeout=WAIT)
    try:
        conn.request("POST", "/trigger/body-a", body=b'{"ignored": true}', headers={"Content-Length": "17"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["name"] == "body-a"
        sock = conn.sock
        conn.request("POST", "/trigger/body-b", body=iter([b"some ", b"chunked ", b"body"]),
                     encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["name"] == "body-b"
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"ok\n")
        assert conn.sock is sock  # one connection throughout
    finally:
        conn.close()
    assert p.wait_reconciled(WAIT)


def test_adds_collapse_while_a_worker_holds_the_key(pipelines: Callable[..., Pipeline]) -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def hold_first(key: str, obj: Any) -> None:
        calls.append(key)
        if len(calls) == 1:
            entered.set()
            assert release.wait(WAIT)

    p = pipelines(workers=1, reconcile_hook=hold_first)
    p.trigger("hot")
    assert entered.wait(WAIT)  # the only worker now holds default/hot
    for _ in range(3):
        p.trigger("hot")
    assert p.queue is not None
    queue = p.queue
    wait_until(lambda: queue.stats().adds == 4, "the three watch events reaching the queue")
    stats = queue.stats()
    assert stats.marked == 1 and stats.deduplicated == 2  # 3 adds during processing → one pending redelivery
    release.set()
    assert p.wait_reconciled(WAIT)
    assert calls == ["default/hot", "default/hot"]  # 4 triggers, 2 reconciles
    assert queue.stats().redelivered == 1
    assert p.verify().ok


def test_an_add_with_no_worker_free_is_told_apart(pipelines: Callable[..., Pipeline]) -> None:
    """The stage table's split of enqueue → Get: a key added while the only worker holds another key waits for that
    reconcile ("no worker free"); the first key found the worker free."""
    entered, release = threading.Event(), threading.Event()

    def hold_first(key: str, obj: Any) -> None:
        if not entered.is_set():
            entered.set()
            assert release.wait(WAIT)

    p = pipelines(workers=1, reconcile_hook=hold_first)
    p.trigger("first")
    assert entered.wait(WAIT)  # the only worker now holds default/first
    p.trigger("second")
    assert p.queue is not None
    queue = p.queue
    wait_until(lambda: len(queue) == 1, "default/second waiting in the queue")
    release.set()
    assert p.wait_reconciled(WAIT)
    stages = p.stages()
    assert stages["enqueue_to_get"].n == 2
    assert stages["enqueue_to_get_free"].n == 1 and stages["enqueue_to_get_busy"].n == 1
    assert set(p.replay_bound()) == {"measured"}  # a custom reconcile: no configured duration to replay


def test_adds_collapse_when_triggers_outpace_slow_workers(pipelines: Callable[..., Pipeline]) -> None:
    p = pipelines(workers=1, reconcile=0.02)
    load = run_load(p.url, requests=60, concurrency=6, keys=3)
    assert load.errors == 0
    assert p.wait_reconciled(WAIT)
    assert p.queue is not None
    stats = p.queue.stats()
    v = p.verify()
    assert stats.deduplicated + stats.marked > 0
    assert v.ok and v.reconciles < v.triggers


def test_lost_names_are_reported(pipelines: Callable[..., Pipeline]) -> None:
    """The control of the lost-name check: a name that is never reconciled successfully is reported."""

    def fail_broken(key: str, obj: Any) -> None:
        if key.endswith("/broken"):
            raise RuntimeError("reconcile keeps failing")

    p = pipelines(workers=2, reconcile_hook=fail_broken)
    p.trigger("fine")
    p.trigger("broken")
    assert not p.wait_reconciled(0.3)
    v = p.verify()
    assert v.lost == 1 and v.lost_names == ["default/broken"] and not v.ok
    assert p.summary()["reconcile_failures"] >= 1


def test_overlap_reaches_the_verification(pipelines: Callable[..., Pipeline]) -> None:
    """The verification reads the pipeline's detector: an overlap forced on it shows up as a violation."""
    p = pipelines(workers=1)
    assert p.detector.start("default/x")
    assert not p.detector.start("default/x")
    p.detector.finish("default/x")
    p.detector.finish("default/x")
    assert p.verify().violations == 1 and not p.verify().ok


def test_stop_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    p = make(workers=3).start()
    assert run_load(p.url, requests=10, concurrency=2, keys=2).errors == 0
    assert p.wait_reconciled(WAIT)
    p.stop()
    p.stop()  # idempotent
    leftover = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert leftover == []


def test_trigger_before_start_and_bad_config() -> None:
    p = make()
    with pytest.raises(TriggerError, match="not started"):
        p.trigger("x")
    with pytest.raises(ValueError, match="workers"):
        make(workers=0)
    with pytest.raises(ValueError, match="backend"):
        make(backend="sqlite")


@pytest.mark.etcd
def test_end_to_end_on_etcd(pipelines: Callable[..., Pipeline]) -> None:
    try:
        find_etcd_binary()
    except FileNotFoundError:
        pytest.skip("no etcd binary")
    p = pipelines("etcd", workers=2)
    load = run_load(p.url, requests=40, concurrency=4, keys=5)
    assert load.errors == 0
    assert p.wait_reconciled(WAIT)
    v = p.verify()
    assert v.ok and v.names == 5 and v.triggers == 40


def test_cli_run_with_built_in_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from keyqueue.lab.__main__ import main

    out = tmp_path / "pipeline.json"
    code = main(["pipeline", "--backend", "memory", "--requests", "30", "--concurrency", "3", "--keys", "4",
                 "--workers", "2", "--reconcile", "1ms", "--log-lines", "1", "--stats-interval", "0", "--verbose",
                 "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    for marker in ("in a child process", "[TRIGGER] POST /trigger/obj-", "[ENQUEUE] key=default/obj-", "[WORKER-",
                   "[STATS]", "/trigger reqs=30", "write sent → informer handler", "lost=0", "-> OK"):
        assert marker in text
    data = json.loads(out.read_text())
    assert data["load"]["requests"] == 30 and data["load"]["errors"] == 0
    assert data["verification"]["ok"] and data["verification"]["names"] == 4
    assert data["stages"]["api_write"]["n"] == 30 and data["queue_microbench"]["cycle"] > 0
    assert set(data["replay_bound"]) == {"reconcile", "measured"} and data["replay_bound"]["reconcile"]["n"] > 0
    assert "replay, instant hand-offs, exact reconcile" in text


def test_load_cli_against_the_pipeline(pipelines: Callable[..., Pipeline], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from keyqueue.lab.__main__ import main

    p = pipelines(workers=2)
    out = tmp_path / "load.json"
    assert main(["load", "--url", p.url, "--requests", "20", "--concurrency", "2", "--keys", "3",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {"requests", "errors", "p50_ms", "p95_ms", "p99_ms"} <= set(data)
    assert data["requests"] == 20 and data["errors"] == 0 and 0 < data["p50_ms"] <= data["p99_ms"]
    assert "load: 20 requests" in capsys.readouterr().out
    assert p.wait_reconciled(WAIT)


def test_load_refuses_non_loopback_and_counts_connection_errors() -> None:
    for url in ("http://example.com:80", "http://10.0.0.1:8080", "https://127.0.0.1:1"):
        with pytest.raises(ValueError):
            check_loopback_url(url)
    assert check_loopback_url("http://localhost:8080/base/") == ("localhost", 8080, "/base")
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_load(f"http://127.0.0.1:{port}", requests=5, concurrency=2)
    assert result.errors >= 5 and result.first_error
    with pytest.raises(ValueError, match="requests"):
        run_load("http://127.0.0.1:1", requests=0, concurrency=1)


def test_percentile_and_microbench() -> None:
    assert percentile([], 50) != percentile([], 50)  # NaN
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([7.0], 0) == 7.0
    with pytest.raises(ValueError):
        percentile(values, 101)
    micro = microbench_queue(cycles=500)
    assert set(micro) == {"add", "get", "done", "cycle"} and all(v > 0 for v in micro.values())


def _children(pid: int) -> list[int]:
    from keyqueue.lab.pipeline_apiserver import _child_pids

    return _child_pids(pid)


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited


def _start_cli(tmp_path: Path, *args: str) -> tuple[Any, int]:
    """Run ``keyqueue-lab pipeline ARGS`` (memory storage, API server in a child process); return the process
    and its API server child's pid once the banner is out."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "keyqueue.lab", "pipeline", "--backend", "memory",
                             "--log-lines", "0", "--stats-interval", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("pipeline: triggers on"), line
    proc.banner = line  # type: ignore[attr-defined]
    children = [c for c in _children(proc.pid) if "keyqueue.apiserver" in _cmdline(c)]
    assert len(children) == 1, children
    return proc, children[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.skipif(not hasattr(os, "getsid"), reason="POSIX sessions")
def test_the_api_server_child_has_its_own_process_group_in_this_session(pipelines: Callable[..., Pipeline]) -> None:
    """A terminal's Ctrl-C (sent to the foreground process group) does not reach the child, which stop() ends after
    the informer; and the child stays in this session, so that on Linux it shares the pipeline's scheduling
    autogroup (in a session of its own, a woken worker waited for the API server's time slices)."""
    p = pipelines(apiserver_process=True)
    child = p.process_ids()["apiserver"]
    assert child != os.getpid()
    assert os.getpgid(child) == child != os.getpgid(0)  # a process group of its own
    assert os.getsid(child) == os.getsid(0)  # in this session
    autogroup = Path(f"/proc/{child}/autogroup")
    if autogroup.exists():  # Linux with CONFIG_SCHED_AUTOGROUP
        # The file is empty when the task's scheduling group is a cgroup rather than an autogroup (a CI runner in a
        # cpu cgroup): then both read empty and sessions do not matter to the scheduler.
        assert autogroup.read_text().split()[:1] == Path("/proc/self/autogroup").read_text().split()[:1]
    assert p.trigger("in-a-group")["action"] == "created"


def _kill_pipeline_and_expect_gone(proc: Any, children: dict[str, int]) -> None:
    """SIGKILL the pipeline ``proc`` and wait for each of its ``children`` (what → pid) to exit. No cleanup code runs
    in the pipeline: a child must notice by itself (the kernel's parent-death signal, or the end of its stdin
    pipe), stop in order, or be ended by its own watchdog (apiserver.cli.STOP_GRACE)."""
    import signal

    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
        for what, pid in children.items():
            try:
                wait_until(lambda pid=pid: _gone(pid), f"the {what} exiting after its parent was killed", 3 * WAIT)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{_diagnose(pid)}") from None
    finally:
        _reap(proc, children.values())


def _reap(proc: Any, children: Iterable[int]) -> None:
    """Cleanup after a pipeline test: kill and wait for ``proc`` if it still runs, close its output, and SIGKILL
    each of ``children`` still alive (never leak a child, even when the test failed)."""
    import signal

    if proc.poll() is None:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    for pid in children:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_pipeline_takes_its_api_server_child_along(tmp_path: Path) -> None:
    proc, child = _start_cli(tmp_path)
    _kill_pipeline_and_expect_gone(proc, {"API server child": child})


def _diagnose(pid: int) -> str:
    """What a live process is doing: its signal state and each thread's kernel wait channel."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        lines = [ln for ln in status.splitlines() if ln.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd",
                                                                         "SigBlk", "SigCgt")]
        for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
            lines.append(f"thread {task.name}: {(task / 'comm').read_text().strip()} wchan="
                         f"{(task / 'wchan').read_text().strip()}")
        return "\n".join(lines)
    except OSError as exc:
        return f"(no diagnostics: {exc})"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("where", ["--load-in-process", "child"])
def test_sigterm_during_a_built_in_load_stops_in_order_with_one_verdict(tmp_path: Path, where: str) -> None:
    """Triggers are refused first, the load stops, the pipeline settles, one verdict is printed
    and it is the exit status."""
    import signal

    extra = [where] if where.startswith("--") else []
    proc, child = _start_cli(tmp_path, "--requests", "1000000", "--concurrency", "2", *extra)
    try:
        assert proc.stdout is not None
        url = proc.banner.split("triggers on ", 1)[1].split("/trigger/", 1)[0]

        def triggered() -> bool:
            return bool(json.loads(http_request(url, "GET", "/stats")[1])["verification"]["triggers"] > 0)

        wait_until(triggered, "the load's triggers reaching the pipeline")
        loaders = [c for c in _children(proc.pid) if "keyqueue.lab.load" in _cmdline(c)]
        assert len(loaders) == (0 if extra else 1), loaders
        lines: list[str] = []
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)  # a second one while stopping is ignored
        code = proc.wait(3 * WAIT)
        text = "".join(lines) + proc.stdout.read()
        assert _gone(child)  # stopped (and waited for) before the exit, not left to the kernel
        assert all(_gone(pid) for pid in loaders)
    finally:
        _reap(proc, [child])
    verdicts = [line for line in text.splitlines() if line.startswith("verification:")]
    assert len(verdicts) == 1, text
    assert "SIGTERM during the load: no new triggers" in text
    assert text.index("SIGTERM during the load") < text.index("verification:")
    expected = {"OK": 0, "FAILED": 1, "INTERRUPTED (verified so far)": 130}
    assert code == expected[verdicts[0].rsplit("-> ", 1)[1]], text
    assert code == 130, text  # nothing was lost; the load was cut short, which is an interrupt, not a failure
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("keyqueue-pipeline-")]  # temp dir removed


def test_trigger_server_refuses_bodies_above_its_limit(pipelines: Callable[..., Pipeline]) -> None:
    """The trigger server: a 100 MiB chunked body gets 413, not 200."""
    import socket

    p = pipelines()
    host, port, _ = check_loopback_url(p.url)
    sock = socket.create_connection((host, port), timeout=WAIT)
    stop = threading.Event()

    def send() -> None:
        try:
            sock.sendall(b"POST /trigger/big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n6400000\r\n")
            block = b"x" * 65536
            for _ in range(1600):
                if stop.is_set():
                    return
                sock.sendall(block)
        except OSError:
            pass  # closed by the server after its 413

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    stop.set()
    sock.close()
    sender.join(WAIT)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert http_request(p.url, "GET", "/healthz")[0] == 200
    assert p.verify().triggers == 0


def test_trigger_writes_over_tls_with_the_kubeconfigs_token(tmp_path: Path) -> None:
    """The trigger's own HTTP client (not the official client) takes the server address, CA and bearer token from
    the kubeconfig: against a TLS server that requires a token, triggers succeed; with a wrong token in the same
    kubeconfig (the control), the same trigger is answered 401 and reported as 502."""
    from keyqueue.apiserver import TestAPIServer

    with TestAPIServer("memory", tls=True, token=True) as server:
        good = server.write_kubeconfig(tmp_path / "good")
        p = make(kubeconfig=str(good)).start()
        try:
            assert p.api_url.startswith("https://")
            first, second = p.trigger("tls-obj"), p.trigger("tls-obj")
            assert (first["action"], second["action"]) == ("created", "updated")
            assert int(second["resourceVersion"]) > int(first["resourceVersion"])
            assert p.wait_reconciled(WAIT)
            status, body = http_request(p.url, "POST", "/trigger/tls-http")
            assert status == 200 and json.loads(body)["action"] == "created"
            assert p._writer is not None
            conf = p._writer._conf  # the control: a wrong token (and no refresh hook, which would restore it)
            conf.refresh_api_key_hook = None
            conf.api_key = {"BearerToken": "Bearer not-the-token"}
            with pytest.raises(TriggerError) as info:
                p.trigger("tls-obj")
            assert info.value.status == 502 and "401" in str(info.value)
        finally:
            p.stop()


# -- the trigger server in a child process of its own ---------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "getsid"), reason="POSIX sessions")
def test_the_trigger_process_serves_triggers_and_hands_back_its_stamps(pipelines: Callable[..., Pipeline]) -> None:
    p = pipelines(apiserver_process=True, trigger_process=True, workers=1)
    pids = p.process_ids()
    child = pids["trigger"]
    assert child not in (os.getpid(), pids["apiserver"])
    assert "keyqueue.lab.trigger_process" in _cmdline(child)
    assert os.getpgid(child) == child != os.getpgid(0)  # a process group of its own: no terminal Ctrl-C
    assert os.getsid(child) == os.getsid(0)  # in this session (the scheduling autogroup, as for the API server)
    assert p.url != p.metrics_url
    assert p.trigger("first")["action"] == "created"
    status, body = http_request(p.url, "POST", "/trigger/first")
    assert status == 200 and json.loads(body)["action"] == "updated"
    status, body = http_request(p.url, "POST", "/trigger/Not_A_Name")
    assert status == 400 and b"not a valid ConfigMap name" in body
    assert p.wait_reconciled(WAIT)  # knows what to wait for only from the child's records
    v = p.verify()
    assert v.ok and v.triggers == 2 and v.names == 1
    stages = p.stages()
    assert stages["api_write"].n == 2 and stages["trigger_handler"].n == 2
    assert stages["write_to_informer"].n == 2  # the child's stamps paired with this process's events
    # This process keeps its own endpoints; it does not take triggers itself.
    status, body = http_request(p.metrics_url, "POST", "/trigger/first")
    assert status == 404 and p.url.encode() in body
    status, body = http_request(p.metrics_url, "GET", "/stats")
    assert status == 200 and json.loads(body)["verification"]["triggers"] == 2
    assert http_request(p.metrics_url, "GET", "/metrics")[0] == 200
    assert http_request(p.url, "GET", "/stats")[0] == 404
    assert http_request(p.url, "GET", "/healthz") == (200, b"ok\n")
    p.refuse_triggers()
    status, body = http_request(p.url, "POST", "/trigger/first")
    assert status == 503
    p.stop()
    assert _gone(child)  # stopped and waited for by stop()


def test_a_failed_trigger_in_the_trigger_process_is_counted(pipelines: Callable[..., Pipeline]) -> None:
    import signal

    p = pipelines(apiserver_process=True, trigger_process=True, workers=1)  # memory storage: no etcd behind it
    assert p.trigger("x")["action"] == "created"
    apiserver = p.process_ids()["apiserver"]
    os.kill(apiserver, signal.SIGTERM)  # the API server is gone: the trigger answers 502, the child records it
    wait_until(lambda: _gone(apiserver), "the API server child exiting")
    status, body = http_request(p.url, "POST", "/trigger/x")
    assert status == 502 and b"API request failed" in body
    assert p.summary()["trigger_errors"] == 1


def test_trigger_process_needs_a_kubeconfig_to_hand_over() -> None:
    with pytest.raises(ValueError, match="trigger_process needs apiserver_process"):
        make(trigger_process=True)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_killed_pipeline_takes_its_trigger_process_along(tmp_path: Path) -> None:
    proc, apiserver = _start_cli(tmp_path, "--trigger-process")
    triggers = [c for c in _children(proc.pid) if "keyqueue.lab.trigger_process" in _cmdline(c)]
    children = {"API server child": apiserver, **{f"trigger process {pid}": pid for pid in triggers}}
    try:
        assert len(triggers) == 1, triggers
    finally:
        _kill_pipeline_and_expect_gone(proc, children)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_ctrl_c_reaches_the_pipeline_only_and_it_stops_the_trigger_process_in_order(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to the foreground process group: the pipeline's. The trigger process is in a group
    of its own, so it keeps serving until the pipeline has refused new triggers and stops it; its records reach
    the verdict."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "keyqueue.lab", "pipeline", "--backend", "memory", "--log-lines",
                             "0", "--stats-interval", "0", "--trigger-process", "--requests", "1000000",
                             "--concurrency", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)}, process_group=0)  # as a terminal's job
    triggers: list[int] = []
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert banner.startswith("pipeline: triggers on"), banner
        triggers = [c for c in _children(proc.pid) if "keyqueue.lab.trigger_process" in _cmdline(c)]
        assert len(triggers) == 1, triggers
        metrics = banner.split("metrics on ", 1)[1].split("/metrics", 1)[0]

        def triggered() -> bool:
            return bool(json.loads(http_request(metrics, "GET", "/stats")[1])["verification"]["triggers"] > 0)

        wait_until(triggered, "the load's triggers reaching the pipeline")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the foreground process group, the pipeline's
        code = proc.wait(3 * WAIT)
        text = proc.stdout.read()
        assert _gone(triggers[0])  # stopped (and waited for) by the pipeline before its exit
    finally:
        _reap(proc, triggers)
    verdicts = [line for line in text.splitlines() if line.startswith("verification:")]
    assert len(verdicts) == 1 and verdicts[0].endswith("INTERRUPTED (verified so far)"), text
    assert code == 130, text
    assert "SIGINT during the load: no new triggers" in text
