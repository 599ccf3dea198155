"""A namespace's own finalizers: ``spec.finalizers`` (``kubernetes`` removed by the server once the content is gone,
as kube's namespace controller does; others through ``/finalize``) and ``metadata.finalizers``; the namespace goes
only when both are empty."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer

from .conftest import raw_request, unique


def _gone(api: Any, name: str) -> bool:
    try:
        api.read_namespace(name)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_both_finalizer_lists_hold_the_namespace(api: Any) -> None:
    name = unique("nsf")
    created = api.create_namespace({"metadata": {"name": name, "finalizers": ["example.com/meta"]},
                                    "spec": {"finalizers": ["example.com/spec"]}})
    assert created.spec.finalizers == ["example.com/spec", "kubernetes"]  # the server adds its own
    # an update cannot change spec.finalizers (only /finalize can)
    assert api.patch_namespace(name, {"spec": {"finalizers": []}}).spec.finalizers == [
        "example.com/spec", "kubernetes"]
    api.delete_namespace(name)
    ns = api.read_namespace(name)
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    assert ns.spec.finalizers == ["example.com/spec"]  # empty: "kubernetes" is done
    finalized = api.replace_namespace_finalize(name, {"metadata": {"name": name}, "spec": {"finalizers": []}})
    assert not finalized.spec.finalizers and not _gone(api, name)  # metadata.finalizers still hold it
    api.patch_namespace(name, {"metadata": {"finalizers": None}})
    assert _gone(api, name)


def test_kubernetes_finalizer_waits_for_the_content(api: Any) -> None:
    name = unique("nsc")
    api.create_namespace({"metadata": {"name": name}})
    api.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    api.delete_namespace(name)
    assert api.read_namespace(name).spec.finalizers == ["kubernetes"]  # content remains
    api.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    assert _gone(api, name)


def test_finalize_removing_the_last_spec_finalizer_deletes_a_terminating_namespace(api: Any) -> None:
    name = unique("nsz")
    api.create_namespace({"metadata": {"name": name}, "spec": {"finalizers": ["example.com/spec"]}})
    api.delete_namespace(name)
    assert api.read_namespace(name).spec.finalizers == ["example.com/spec"]
    api.replace_namespace_finalize(name, {"metadata": {"name": name}, "spec": {}})
    assert _gone(api, name)


def test_finalizer_names_are_validated(server: TestAPIServer, api: Any) -> None:
    name = unique("nsv")
    code, status = raw_request(server, "/api/v1/namespaces", "POST",
                               {"metadata": {"name": name}, "spec": {"finalizers": ["plain"]}})
    assert code == 422, status
    assert status["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.finalizers",
        "message": 'Invalid value: "plain": name is neither a standard finalizer name nor is it fully qualified'}]
    api.create_namespace({"metadata": {"name": name}})
    code, status = raw_request(server, f"/api/v1/namespaces/{name}/finalize", "PUT",
                               {"metadata": {"name": name}, "spec": {"finalizers": ["bad name/x"]}})
    assert code == 422 and status["details"]["causes"][0]["field"] == "spec.finalizers", status
    code, _ = raw_request(server, f"/api/v1/namespaces/{name}/finalize", "GET")
    assert code == 405
    api.delete_namespace(name)
    assert _gone(api, name)


@pytest.mark.parametrize("system", ["default", "kube-system"])
def test_system_namespaces_keep_their_finalizer(api: Any, system: str) -> None:
    assert api.read_namespace(system).spec.finalizers == ["kubernetes"]
