"""Restart, cleanup, the CLI, and TLS with a bearer token."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client

from keyqueue.apiserver import EtcdProcess, TestAPIServer
from keyqueue.apiserver.objects import CONFIGMAPS
from keyqueue.apiserver.registry import WriteOptions
from keyqueue.apiserver.tls import openssl_available

from .conftest import Kubectl, WatchCollector, kubectl_binary, unique


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server restarting there would
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _process_gone(pid: int) -> bool:
    """True if ``pid`` does not exist or is a zombie (exited, not yet reaped by its new parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("apiserver", "etcd-watch"))]


@pytest.mark.etcd
def test_restart_api_server_and_resume_watch(etcd_proc: EtcdProcess, collect: Callable[..., WatchCollector]) -> None:
    with TestAPIServer("etcd", etcd=etcd_proc, prefix=f"/{unique('restart')}") as s:
        port = s.port
        api_client = s.api_client()
        api = client.CoreV1Api(api_client)
        ns = unique("rs")
        api.create_namespace({"metadata": {"name": ns}})
        rv = api.list_namespaced_config_map(ns).metadata.resource_version
        w = collect(api.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=60)
        api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"v": "1"}})
        seen = w.next()
        assert (seen["type"], seen["object"].metadata.name) == ("ADDED", "a")
        last_rv = w.watch.resource_version

        s.stop_server()
        assert w.done.wait(10), "the watch stream did not end when the server stopped"
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            api.read_namespace(ns, _request_timeout=2)
        # meanwhile another writer (straight to storage, as a second API server would)
        reg = s.registry
        reg.patch(CONFIGMAPS, ns, "a", "application/merge-patch+json", {"data": {"v": "2"}}, WriteOptions())
        reg.create(CONFIGMAPS, ns, {"metadata": {"name": "b"}}, WriteOptions())
        reg.delete(CONFIGMAPS, ns, "a", None, WriteOptions())

        s.start_server()
        assert s.port == port
        resumed = collect(api.list_namespaced_config_map, ns, resource_version=last_rv, timeout_seconds=60)
        got = [resumed.next() for _ in range(3)]
        assert [(e["type"], e["object"].metadata.name) for e in got] == [
            ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
        assert got[0]["object"].data == {"v": "2"}
        api.delete_namespace(ns)
        api_client.close()


class _BodyFailed(Exception):
    """The deliberate failure of a test body (so that a real startup error is not swallowed with it)."""


@pytest.mark.etcd
@pytest.mark.parametrize("fail", [False, True])
def test_everything_stops_and_ports_are_freed(fail: bool) -> None:
    before = set(_server_threads())
    with contextlib.suppress(_BodyFailed), TestAPIServer("etcd") as s:
        assert s.etcd is not None and s.etcd.running
        pid = s.etcd.pid
        ports = [s.port, s.etcd.client_port, s.etcd.peer_port, s.etcd.metrics_port]
        tmpdir = s.etcd.tmpdir
        api_client = s.api_client()
        api = client.CoreV1Api(api_client)
        api.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
        w = WatchCollector(api.list_namespaced_config_map, "default", timeout_seconds=60)
        assert w.next()["type"] == "ADDED"
        if fail:
            raise _BodyFailed("test body failed")
    assert pid is not None and _process_gone(pid)
    assert all(_port_is_free(p) for p in ports), ports
    assert tmpdir is not None and not Path(tmpdir).exists()
    assert w.done.wait(10)
    api_client.close()
    assert set(_server_threads()) <= before


@pytest.mark.etcd
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_etcd_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = (
        "from keyqueue.apiserver import EtcdProcess\n"
        "import sys, time\n"
        "e = EtcdProcess().start()\n"
        "print(e.pid, e.tmpdir, flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        pid_text, tmpdir = proc.stdout.readline().split()
        etcd_pid = int(pid_text)
        assert not _process_gone(etcd_pid)
        proc.kill()  # SIGKILL: no atexit, no finalizers
        proc.wait(10)
        deadline = time.monotonic() + 15
        while not _process_gone(etcd_pid):  # an external process: poll its state, bounded
            assert time.monotonic() < deadline, "etcd outlived its killed parent"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stdin.close()
    import shutil

    shutil.rmtree(tmpdir, ignore_errors=True)  # a SIGKILLed parent cannot clean up its temp dir


def test_memory_server_stops_cleanly() -> None:
    before = set(_server_threads())
    with TestAPIServer("memory") as s:
        port = s.port
        kubeconfig = s.kubeconfig_path
        assert kubeconfig.exists()
    assert _port_is_free(port)
    assert not kubeconfig.exists()
    assert set(_server_threads()) <= before


@pytest.mark.etcd
def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "keyqueue.apiserver", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        while not any(line.startswith("kubeconfig:") for line in lines):
            line = proc.stdout.readline()
            assert line, f"CLI exited early: {''.join(lines)}"
            lines.append(line)
            assert time.monotonic() < deadline
        text = "".join(lines)
        assert "not kube-apiserver" in text
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", text)
        etcd_pid = re.search(r"pid (\d+)", text)
        assert url and etcd_pid, text
        assert f"server: \"{url.group(1)}\"" in kubeconfig.read_text()
        kubectl = kubectl_binary()
        if kubectl is not None:
            out = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "c"),
                                  "get", "namespaces", "-o", "name"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
            assert "namespace/kube-system" in out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert _process_gone(int(etcd_pid.group(1)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")
def test_tls_and_bearer_token(tmp_path: Path) -> None:
    with TestAPIServer("memory", tls=True, token=True, user="alice") as s:
        assert s.url.startswith("https://127.0.0.1:")
        api_client = s.api_client()
        names = {n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items}
        assert "default" in names
        api_client.close()

        config = s.configuration()
        config.api_key = {"authorization": "wrong"}
        bad = client.ApiClient(config)
        with pytest.raises(client.ApiException) as info:
            client.CoreV1Api(bad).list_namespace()
        assert info.value.status == 401
        bad.close()

        from kubernetes import config as kube_config

        loaded = client.Configuration()
        kube_config.load_kube_config(config_file=str(s.kubeconfig_path), client_configuration=loaded)
        with client.ApiClient(loaded) as from_kubeconfig:
            assert client.CoreV1Api(from_kubeconfig).read_namespace("default").metadata.name == "default"

        kubectl = kubectl_binary()
        if kubectl is not None:
            k = Kubectl(kubectl, s.kubeconfig_path, tmp_path)
            assert "namespace/default" in k.run("get", "ns", "-o", "name").stdout
            k.run("create", "configmap", "secure", "--from-literal=a=1")
            assert k.run("get", "cm", "secure", "-o", "jsonpath={.data.a}").stdout == "1"
            # the user is the token's (kubectl sends a token only over TLS)
            assert k.run("auth", "whoami").stdout.split() == [
                "ATTRIBUTE", "VALUE", "Username", "alice", "Groups",
                "[system:masters", "system:authenticated]"]
            assert k.run("auth", "can-i", "get", "configmaps").stdout.strip() == "yes"


def test_api_client_helpers_are_typed_enough() -> None:
    with TestAPIServer("memory") as s:
        cfg: Any = s.configuration()
        assert cfg.host == s.url
        assert s.kubeconfig_path.read_text().count("server:") == 1


def test_periodic_compaction() -> None:
    with TestAPIServer("memory", compaction_interval=0.05) as s:
        api_client = s.api_client()
        api = client.CoreV1Api(api_client)
        rv = api.list_namespaced_config_map("default").metadata.resource_version
        api.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
        deadline = time.monotonic() + 10
        while True:  # the compactor works on its own clock: poll its observable effect, bounded
            try:
                api.list_namespaced_config_map("default", resource_version=rv, resource_version_match="Exact")
            except client.ApiException as exc:
                assert exc.status == 410
                break
            assert time.monotonic() < deadline, "no compaction within 10 s"
            time.sleep(0.02)
        api_client.close()
    assert not any(t.name == "apiserver-compactor" for t in threading.enumerate())


def _busy_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.etcd
def test_failed_start_stops_etcd_and_removes_temp_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The API server cannot bind its port: the etcd already started for it is stopped, temp dirs are removed."""
    import tempfile

    from keyqueue.apiserver import testserver

    started: list[tuple[int, str]] = []

    class RecordingEtcd(EtcdProcess):
        def start(self) -> RecordingEtcd:
            super().start()
            assert self.pid is not None and self.tmpdir is not None
            started.append((self.pid, self.tmpdir))
            return self

    monkeypatch.setattr(testserver, "EtcdProcess", RecordingEtcd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # every temp dir of this test goes here
    before = set(_server_threads())
    with _busy_port() as busy:
        s = TestAPIServer("etcd", port=busy.getsockname()[1])
        with pytest.raises(OSError):
            s.start()
    assert len(started) == 1, "etcd should have been started before the port clash"
    pid, etcd_dir = started[0]
    assert _process_gone(pid)
    assert not Path(etcd_dir).exists()
    assert list(tmp_path.iterdir()) == []
    assert set(_server_threads()) <= before


def test_etcd_that_exits_at_start_is_reported_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from keyqueue.apiserver import EtcdStartError

    fake = tmp_path / "fake-etcd"
    fake.write_text("#!/bin/sh\necho 'fake etcd: refusing to start' >&2\nexit 3\n")
    fake.chmod(0o755)
    dirs = tmp_path / "tmp"
    dirs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(dirs))
    etcd = EtcdProcess(binary=str(fake))
    with pytest.raises(EtcdStartError, match="exited with code 3") as info:
        etcd.start()
    assert "fake etcd: refusing to start" in str(info.value)
    assert not etcd.running and etcd.pid is None
    assert list(dirs.iterdir()) == []  # its data dir is gone


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown backend 'sqlite'"):
        TestAPIServer("sqlite")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"port must be an int within 0\.\.65535"):
        TestAPIServer("memory", port=70000)
    with pytest.raises(ValueError, match="bookmark_interval"):
        TestAPIServer("memory", bookmark_interval=0)
    with pytest.raises(ValueError, match="compaction_interval"):
        TestAPIServer("memory", compaction_interval=-1.0)


def test_cli_reports_a_start_failure_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from keyqueue.apiserver import cli

    with _busy_port() as busy:
        code = cli.main(["--kubeconfig", str(tmp_path / "kc"), "--backend", "memory",
                         "--port", str(busy.getsockname()[1])])
    err = capsys.readouterr().err
    assert code == 2
    assert "could not start" in err and "Traceback" not in err
    assert not (tmp_path / "kc").exists()
    with pytest.raises(SystemExit) as info:
        cli.main(["--kubeconfig", str(tmp_path / "kc"), "--port", "70000"])
    assert info.value.code == 2
    assert "port must be within 0..65535" in capsys.readouterr().err


def test_cli_stops_when_its_stdin_ends(tmp_path: Path) -> None:
    """``--stop-on-stdin-eof``: a parent that dies closes the pipe, and the server stops on its own (the
    pipeline lab relies on it besides the kernel's parent-death signal)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "keyqueue.apiserver", "--backend", "memory", "--stop-on-stdin-eof",
         "--kubeconfig", str(tmp_path / "kubeconfig")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            if line.startswith("stop with"):
                break
        else:
            raise AssertionError("the server never printed its banner")
        assert proc.poll() is None  # serving
        proc.stdin.close()  # what the death of the parent would do
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_cli_exits_anyway_when_an_orderly_stop_hangs(tmp_path: Path) -> None:
    """A stop that does not finish within the grace period ends the process (exit 3) with the threads' stacks on
    stderr, instead of leaving a server nobody owns. The hang is simulated by a stop() that never returns."""
    import subprocess
    import sys

    script = (
        "import sys, threading\n"
        "import keyqueue.apiserver.cli as cli\n"
        "cli.STOP_GRACE = 0.5\n"
        "cli.TestAPIServer.stop = lambda self: threading.Event().wait()\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "--backend", "memory", "--stop-on-stdin-eof",
         "--kubeconfig", str(tmp_path / "kubeconfig")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            if line.startswith("stop with"):
                break
        proc.stdin.close()  # ask for the stop; it hangs; the watchdog must end the process
        assert proc.wait(20) == 3
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "stopping took longer than 0.5 s" in err
        assert "Thread" in err  # faulthandler's stack dump
        assert _temp_dirs_of(proc.pid) == []  # the forced exit removed them too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _temp_dirs_of(pid: int) -> list[str]:
    import glob
    import tempfile

    return [p for prefix in ("keyqueue-apiserver-", "keyqueue-etcd-")
            for p in glob.glob(f"{tempfile.gettempdir()}/{prefix}{pid}-*")]


@pytest.mark.etcd
def test_cli_with_stop_on_stdin_eof_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM while the stdin watcher is blocked in its read exits 0 (it aborted with "Fatal
    Python error: _enter_buffered_busy"), and the server's and etcd's temp dirs are gone."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "keyqueue.apiserver", "--stop-on-stdin-eof", "--token",
         "--kubeconfig", str(tmp_path / "kubeconfig")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.startswith("stop with"):
                break
        else:
            raise AssertionError("the server never printed its banner: " + proc.stderr.read())
        assert len(_temp_dirs_of(proc.pid)) == 2  # control: the check below can see them
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        err = proc.stderr.read()
        assert "Fatal Python error" not in err, err
        assert _temp_dirs_of(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_temp_dirs_of_a_killed_process_are_swept_by_the_next_one() -> None:
    import os
    import tempfile

    from keyqueue._tempdirs import owned_tempdir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tempfile.mkdtemp(prefix=f"keyqueue-pipeline-{dead.pid}-")
    alive = tempfile.mkdtemp(prefix=f"keyqueue-pipeline-{os.getppid()}-")  # a live process's: kept
    try:
        mine = owned_tempdir("keyqueue-pipeline-")
        assert not os.path.exists(stale) and os.path.isdir(alive)
        assert os.path.basename(mine).startswith(f"keyqueue-pipeline-{os.getpid()}-")
        os.rmdir(mine)
    finally:
        os.rmdir(alive)
