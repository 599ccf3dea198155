"""Real ``kubectl`` against the etcd-backed server through a kubeconfig."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from keyqueue.apiserver.discovery import GIT_VERSION, KUBERNETES_VERSION

from .conftest import Kubectl, unique

pytestmark = [pytest.mark.etcd, pytest.mark.kubectl]


@pytest.fixture
def kns(kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace created with ``kubectl create namespace`` (a protobuf body)."""
    name = unique("kns")
    assert kubectl.run("create", "namespace", name).stdout.strip() == f"namespace/{name} created"
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def _get(kubectl: Kubectl, ns: str, name: str) -> dict[str, object]:
    out: dict[str, object] = json.loads(kubectl.run("get", "configmap", name, "-n", ns, "-o", "json").stdout)
    return out


def _manifest(name: str, data: dict[str, str], labels: dict[str, str] | None = None, rv: str | None = None) -> str:
    meta: dict[str, object] = {"name": name}
    if labels:
        meta["labels"] = labels
    if rv:
        meta["resourceVersion"] = rv
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def test_version_and_discovery(kubectl: Kubectl) -> None:
    proc = kubectl.run("version", "-o", "json")
    versions = json.loads(proc.stdout)
    server = versions["serverVersion"]
    assert server["gitVersion"] == GIT_VERSION
    assert (int(server["major"]), int(server["minor"])) == KUBERNETES_VERSION
    # kubectl within one minor version of the server prints no skew warning (kubectl 1.37 comes with the extra)
    client_minor = int(versions["clientVersion"]["minor"])
    if abs(client_minor - KUBERNETES_VERSION[1]) <= 1:
        assert "version skew" not in proc.stderr, proc.stderr
    else:  # the control: an older kubectl on PATH does warn
        assert "version skew" in proc.stderr, proc.stderr
    resources = kubectl.run("api-resources", "--no-headers").stdout
    assert "configmaps" in resources and "namespaces" in resources


def test_create_from_literal_get_and_duplicate(kubectl: Kubectl, kns: str) -> None:
    out = kubectl.run("create", "configmap", "lit", "-n", kns, "--from-literal=a=1", "--from-literal=b=two")
    assert out.stdout.strip() == "configmap/lit created"
    obj = _get(kubectl, kns, "lit")
    assert obj["data"] == {"a": "1", "b": "two"}
    yaml_out = kubectl.run("get", "cm", "lit", "-n", kns, "-o", "yaml").stdout
    assert "name: lit" in yaml_out and 'a: "1"' in yaml_out
    assert kubectl.run("get", "cm", "lit", "-n", kns, "-o", "jsonpath={.data.b}").stdout == "two"
    table = kubectl.run("get", "cm", "-n", kns).stdout.splitlines()
    assert table[0].split() == ["NAME", "DATA", "AGE"]
    assert table[1].split()[:2] == ["lit", "2"]
    err = kubectl.fail("create", "configmap", "lit", "-n", kns, "--from-literal=a=1")
    assert 'configmaps "lit" already exists' in err


def test_create_from_file_and_label_selector(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.json"
    manifest.write_text(_manifest("filed", {"k": "v"}, {"app": "demo"}))
    assert kubectl.run("create", "-n", kns, "-f", str(manifest)).stdout.strip() == "configmap/filed created"
    kubectl.run("create", "configmap", "other", "-n", kns, "--from-literal=x=y")
    names = kubectl.run("get", "cm", "-n", kns, "-l", "app=demo", "-o", "name").stdout.split()
    assert names == ["configmap/filed"]
    names = kubectl.run("get", "cm", "-n", kns, "-l", "app!=demo", "-o", "name").stdout.split()
    assert names == ["configmap/other"]
    err = kubectl.fail("create", "-n", kns, "-f", str(manifest))
    assert "AlreadyExists" in err
    everywhere = kubectl.run("get", "cm", "-A", "-l", "app=demo", "--no-headers").stdout
    assert kns in everywhere


def test_apply_twice(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "applied.json"
    manifest.write_text(_manifest("applied", {"x": "1", "y": "1"}))
    assert kubectl.run("apply", "-n", kns, "-f", str(manifest)).stdout.strip() == "configmap/applied created"
    manifest.write_text(_manifest("applied", {"x": "2"}))  # y removed, x changed
    assert kubectl.run("apply", "-n", kns, "-f", str(manifest)).stdout.strip() == "configmap/applied configured"
    assert _get(kubectl, kns, "applied")["data"] == {"x": "2"}
    assert kubectl.run("apply", "-n", kns, "-f", str(manifest)).stdout.strip() == "configmap/applied unchanged"


def test_patch_label_annotate(kubectl: Kubectl, kns: str) -> None:
    kubectl.run("create", "configmap", "p", "-n", kns, "--from-literal=a=1")
    kubectl.run("patch", "cm", "p", "-n", kns, "--type", "merge", "-p", '{"data":{"m":"1"}}')
    kubectl.run("patch", "cm", "p", "-n", kns, "--type", "json", "-p",
                '[{"op":"add","path":"/data/j","value":"2"}]')
    kubectl.run("patch", "cm", "p", "-n", kns, "--type", "strategic", "-p", '{"data":{"s":"3","a":null}}')
    assert kubectl.run("label", "cm", "p", "-n", kns, "team=blue").stdout.strip() == "configmap/p labeled"
    assert kubectl.run("annotate", "cm", "p", "-n", kns, "note=hi").stdout.strip() == "configmap/p annotated"
    obj = _get(kubectl, kns, "p")
    assert obj["data"] == {"m": "1", "j": "2", "s": "3"}
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    assert meta["labels"] == {"team": "blue"} and meta["annotations"] == {"note": "hi"}
    kubectl.run("label", "cm", "p", "-n", kns, "team-")
    assert "labels" not in _get(kubectl, kns, "p")["metadata"]  # type: ignore[operator]


def test_replace_and_stale_replace_conflict(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    kubectl.run("create", "configmap", "r", "-n", kns, "--from-literal=a=1")
    current = _get(kubectl, kns, "r")
    rv = current["metadata"]["resourceVersion"]  # type: ignore[index]
    manifest = tmp_path / "r.json"
    manifest.write_text(_manifest("r", {"a": "2"}, rv=str(rv)))
    assert kubectl.run("replace", "-n", kns, "-f", str(manifest)).stdout.strip() == "configmap/r replaced"
    err = kubectl.fail("replace", "-n", kns, "-f", str(manifest))  # same (now stale) resourceVersion
    assert "Conflict" in err and "the object has been modified" in err
    assert _get(kubectl, kns, "r")["data"] == {"a": "2"}


def test_edit(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    kubectl.run("create", "configmap", "ed", "-n", kns, "--from-literal=key=before")
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/key: before/key: after/" "$1"\n')
    editor.chmod(0o755)
    out = kubectl.run("edit", "cm", "ed", "-n", kns, env={"EDITOR": str(editor), "KUBE_EDITOR": str(editor)})
    assert out.stdout.strip() == "configmap/ed edited"
    assert _get(kubectl, kns, "ed")["data"] == {"key": "after"}


def test_dry_run_server(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    out = kubectl.run("create", "configmap", "dry", "-n", kns, "--from-literal=a=1", "--dry-run=server", "-o", "json")
    assert json.loads(out.stdout)["data"] == {"a": "1"}
    manifest = tmp_path / "dry.json"
    manifest.write_text(_manifest("dry2", {"a": "1"}))
    kubectl.run("apply", "-n", kns, "-f", str(manifest), "--dry-run=server")
    assert "NotFound" in kubectl.fail("get", "cm", "dry", "-n", kns)
    assert "NotFound" in kubectl.fail("get", "cm", "dry2", "-n", kns)


def test_delete_and_not_found(kubectl: Kubectl, kns: str) -> None:
    kubectl.run("create", "configmap", "del", "-n", kns, "--from-literal=a=1")
    assert 'configmap "del" deleted' in kubectl.run("delete", "cm", "del", "-n", kns).stdout
    err = kubectl.fail("get", "cm", "del", "-n", kns)
    assert 'Error from server (NotFound): configmaps "del" not found' in err
    assert "NotFound" in kubectl.fail("delete", "cm", "del", "-n", kns)


def test_invalid_and_missing_namespace(kubectl: Kubectl, kns: str) -> None:
    err = kubectl.fail("create", "configmap", "Bad_Name", "-n", kns, "--from-literal=a=1")
    assert "is invalid" in err and "metadata.name" in err
    missing = unique("missing")
    err = kubectl.fail("create", "configmap", "x", "-n", missing, "--from-literal=a=1")
    assert f'namespaces "{missing}" not found' in err


def test_server_side_apply(kubectl: Kubectl, kns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "ssa.json"
    manifest.write_text(_manifest("ssa", {"a": "1"}))
    out = kubectl.run("apply", "--server-side", "-n", kns, "-f", str(manifest)).stdout
    assert "configmap/ssa serverside-applied" in out, out


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _expect(lines: queue.Queue[str | None], timeout: float = 10.0) -> str:
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"kubectl printed nothing within {timeout} s") from None
    assert line is not None, "kubectl exited"
    return line


def test_get_watch_sees_events(kubectl: Kubectl, kns: str) -> None:
    kubectl.run("create", "configmap", "w0", "-n", kns, "--from-literal=a=1")
    proc = kubectl.popen("get", "configmaps", "-n", kns, "-w", "--output-watch-events", "--no-headers")
    try:
        lines = _lines(proc)
        assert _expect(lines).split()[:2] == ["ADDED", "w0"]  # the initial list
        kubectl.run("create", "configmap", "w1", "-n", kns, "--from-literal=a=1")
        kubectl.run("label", "cm", "w1", "-n", kns, "x=y")
        kubectl.run("delete", "cm", "w1", "-n", kns)
        seen = [_expect(lines).split()[:2] for _ in range(3)]
        assert seen == [["ADDED", "w1"], ["MODIFIED", "w1"], ["DELETED", "w1"]]
    finally:
        proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_get_watch_single_object(kubectl: Kubectl, kns: str) -> None:
    kubectl.run("create", "configmap", "one", "-n", kns, "--from-literal=a=1")
    kubectl.run("create", "configmap", "two", "-n", kns, "--from-literal=a=1")
    proc = kubectl.popen("get", "cm", "one", "-n", kns, "-w", "-o", "jsonpath={.data.a}{\"\\n\"}")
    try:
        lines = _lines(proc)
        assert _expect(lines) == "1"
        kubectl.run("patch", "cm", "two", "-n", kns, "-p", '{"data":{"a":"x"}}')  # other object: not shown
        kubectl.run("patch", "cm", "one", "-n", kns, "-p", '{"data":{"a":"2"}}')
        assert _expect(lines) == "2"
    finally:
        proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
