"""The built-in kinds operators create and watch (Pods, Services, Deployments, Jobs, RBAC, ...): CRUD and watch
through the official client on both backends, discovery, Table columns, unknown fields, kube's defaults and
validations, ``metadata.generation``, and the ``/status`` and ``/scale`` subresources."""

from __future__ import annotations

import http.client
import ipaddress
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from keyqueue.apiserver import TestAPIServer
from keyqueue.testing import eventually

from .conftest import WatchCollector, unique
from .conftest import raw_request as _raw

ApiException = client.ApiException
_TEMPLATE = {"metadata": {"labels": {"app": "web"}},
             "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}
_SELECTOR = {"matchLabels": {"app": "web"}}
_JOB_TEMPLATE = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}

# kind -> (client API class, the method infix, namespaced, a valid body without metadata)
KINDS: dict[str, tuple[str, str, bool, dict[str, Any]]] = {
    "Pod": ("CoreV1Api", "pod", True, {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    "Service": ("CoreV1Api", "service", True, {"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
    "Secret": ("CoreV1Api", "secret", True, {"data": {"k": "dg=="}}),
    "ServiceAccount": ("CoreV1Api", "service_account", True, {}),
    "Endpoints": ("CoreV1Api", "endpoints", True,
                  {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
    "PersistentVolumeClaim": ("CoreV1Api", "persistent_volume_claim", True, {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    "Deployment": ("AppsV1Api", "deployment", True, {"spec": {"selector": _SELECTOR, "template": _TEMPLATE}}),
    "StatefulSet": ("AppsV1Api", "stateful_set", True,
                    {"spec": {"serviceName": "web", "selector": _SELECTOR, "template": _TEMPLATE}}),
    "DaemonSet": ("AppsV1Api", "daemon_set", True, {"spec": {"selector": _SELECTOR, "template": _TEMPLATE}}),
    "ReplicaSet": ("AppsV1Api", "replica_set", True, {"spec": {"selector": _SELECTOR, "template": _TEMPLATE}}),
    "Job": ("BatchV1Api", "job", True, {"spec": {"template": _JOB_TEMPLATE}}),
    "CronJob": ("BatchV1Api", "cron_job", True,
                {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": _JOB_TEMPLATE}}}}),
    "Ingress": ("NetworkingV1Api", "ingress", True, {"spec": {"rules": [{"host": "a.example", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
    "PodDisruptionBudget": ("PolicyV1Api", "pod_disruption_budget", True,
                            {"spec": {"minAvailable": 1, "selector": _SELECTOR}}),
    "Role": ("RbacAuthorizationV1Api", "role", True,
             {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    "RoleBinding": ("RbacAuthorizationV1Api", "role_binding", True, {
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "alice"}]}),
    "ClusterRole": ("RbacAuthorizationV1Api", "cluster_role", False,
                    {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
    "ClusterRoleBinding": ("RbacAuthorizationV1Api", "cluster_role_binding", False, {
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "Group", "name": "devs"}]}),
    "EndpointSlice": ("DiscoveryV1Api", "endpoint_slice", True,
                      {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}]}),
}


@pytest.fixture
def apis(server: TestAPIServer) -> Iterator[Callable[[str], Any]]:
    api_client = server.api_client()
    yield lambda name: getattr(client, name)(api_client)
    api_client.close()


def _body(kind: str, name: str) -> dict[str, Any]:
    return json.loads(json.dumps({"metadata": {"name": name}, **KINDS[kind][3]}))


def _call(apis: Callable[[str], Any], kind: str, verb: str, ns: str, *args: Any, **kwargs: Any) -> Any:
    api_name, infix, namespaced, _ = KINDS[kind]
    method = getattr(apis(api_name), f"{verb}_{'namespaced_' if namespaced else ''}{infix}")
    if not namespaced:
        return method(*args, **kwargs)
    if verb in ("create", "list"):
        return method(ns, *args, **kwargs)
    return method(args[0], ns, *args[1:], **kwargs)


def _request(server: TestAPIServer, path: str, method: str = "GET", body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    if server.token:
        all_headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, all_headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp
    finally:
        conn.close()


_PATHS: dict[str, str] = {
    "Pod": "/api/v1/namespaces/{ns}/pods", "Service": "/api/v1/namespaces/{ns}/services",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments", "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "CronJob": "/apis/batch/v1/namespaces/{ns}/cronjobs",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "EndpointSlice": "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
}


def _create_raw(server: TestAPIServer, ns: str, kind: str, body: Any) -> tuple[int, Any]:
    """A create without the client's own checks (its models refuse bodies missing required fields)."""
    return _raw(server, _PATHS[kind].format(ns=ns), "POST", body)


def _invalid_fields(exc: ApiException) -> list[str]:
    assert exc.status == 422, exc.body
    return [c["field"] for c in json.loads(exc.body)["details"]["causes"]]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crud_and_watch_through_the_official_client(
        apis: Callable[[str], Any], ns: str, kind: str, collect: Callable[..., WatchCollector]) -> None:
    name = unique("k")
    namespaced = KINDS[kind][2]
    lister = getattr(apis(KINDS[kind][0]), f"list_{'namespaced_' if namespaced else ''}{KINDS[kind][1]}")
    first = _call(apis, kind, "list", ns) if namespaced else lister()
    watcher = collect(lister, *((ns,) if namespaced else ()), resource_version=first.metadata.resource_version)
    created = _call(apis, kind, "create", ns, _body(kind, name))
    assert type(created).__name__ == "V1" + kind and created.metadata.name == name
    assert created.metadata.uid and created.metadata.resource_version
    event = watcher.next_of({"ADDED"})
    assert event["object"].metadata.name == name and type(event["object"]).__name__ == "V1" + kind
    got = _call(apis, kind, "read", ns, name)
    assert got.metadata.resource_version == created.metadata.resource_version
    body = got.to_dict(serialize=True)
    body["metadata"]["labels"] = {"changed": "yes"}
    replaced = _call(apis, kind, "replace", ns, name, body)
    assert replaced.metadata.labels == {"changed": "yes"}
    assert watcher.next_of({"MODIFIED"})["object"].metadata.labels == {"changed": "yes"}
    listed = _call(apis, kind, "list", ns, label_selector="changed=yes") if namespaced else lister(
        label_selector="changed=yes")
    assert [i.metadata.name for i in listed.items] == [name]
    deleted = _call(apis, kind, "delete", ns, name)
    if kind in ("Pod", "Service", "ServiceAccount", "PersistentVolumeClaim"):  # kube answers with the object
        assert deleted.metadata.name == name and deleted.metadata.uid == created.metadata.uid
    else:  # a Status (the client returns it as a dict)
        assert (deleted["kind"], deleted["status"]) == ("Status", "Success")
    assert watcher.next_of({"DELETED"})["object"].metadata.name == name
    with pytest.raises(ApiException) as err:
        _call(apis, kind, "read", ns, name)
    assert err.value.status == 404


def test_discovery_lists_every_kind_with_subresources(server: TestAPIServer) -> None:
    groups = {"v1": ["pods", "services", "secrets", "serviceaccounts", "endpoints", "persistentvolumeclaims"],
              "apps/v1": ["deployments", "statefulsets", "daemonsets", "replicasets"],
              "batch/v1": ["jobs", "cronjobs"], "networking.k8s.io/v1": ["ingresses"],
              "policy/v1": ["poddisruptionbudgets"],
              "rbac.authorization.k8s.io/v1": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"],
              "discovery.k8s.io/v1": ["endpointslices"]}
    for gv, names in groups.items():
        code, doc = _raw(server, f"/api/{gv}" if gv == "v1" else f"/apis/{gv}")
        assert code == 200, doc
        served = {r["name"]: r for r in doc["resources"]}
        for name in names:
            assert name in served, (gv, name)
            assert "watch" in served[name]["verbs"] and "create" in served[name]["verbs"]
    code, apps = _raw(server, "/apis/apps/v1")
    served = {r["name"]: r for r in apps["resources"]}
    assert served["deployments"]["shortNames"] == ["deploy"] and served["deployments"]["categories"] == ["all"]
    assert served["deployments/scale"]["kind"] == "Scale" and served["deployments/scale"]["group"] == "autoscaling"
    assert served["deployments/status"]["verbs"] == ["get", "patch", "update"]
    assert "daemonsets/scale" not in served
    code, core = _raw(server, "/api/v1")
    served = {r["name"]: r for r in core["resources"]}
    assert served["pods"]["shortNames"] == ["po"] and "pods/status" in served and "secrets/status" not in served
    assert served["pods"]["namespaced"] is True and served["pods"]["categories"] == ["all"]
    code, rbac = _raw(server, "/apis/rbac.authorization.k8s.io/v1")
    assert {r["name"]: r["namespaced"] for r in rbac["resources"]}["clusterroles"] is False


def test_unknown_fields_follow_field_validation(server: TestAPIServer, ns: str) -> None:
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body = {"metadata": {"name": "strict"}, "spec": {"selector": _SELECTOR, "bogus": 1, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "imagee": "typo"}]}}}}
    code, out, _ = _request(server, path + "?fieldValidation=Strict", "POST", body)
    assert code == 400, out
    assert out["message"] == ('strict decoding error: unknown field "spec.bogus", unknown field '
                              '"spec.template.spec.containers[0].imagee"')
    code, out, resp = _request(server, path, "POST", body)  # the default (Warn): created, with warnings
    assert code == 201, out
    assert "spec.template.spec.containers[0].imagee" in (resp.getheader("Warning") or "")
    assert "imagee" not in out["spec"]["template"]["spec"]["containers"][0]
    code, out, _ = _request(server, f"/api/v1/namespaces/{ns}/pods", "POST",
                            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": 5}]}})
    assert code == 400 and "Go struct field Pod.spec.containers.image of type string" in out["message"], out


def test_pod_and_container_defaults(apis: Callable[[str], Any], server: TestAPIServer, ns: str) -> None:
    core = apis("CoreV1Api")
    code, out = _create_raw(server, ns, "Pod", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
         "resources": {"limits": {"cpu": 1, "memory": "64Mi"}}},
        {"name": "b", "image": "registry.example:5000/tool:v2", "readinessProbe": {"exec": {"command": ["x"]}}},
    ]}})
    assert code == 201, out
    pod = core.read_namespaced_pod("p", ns)
    spec = pod.spec
    assert (spec.restart_policy, spec.dns_policy, spec.termination_grace_period_seconds, spec.scheduler_name,
            spec.enable_service_links) == ("Always", "ClusterFirst", 30, "default-scheduler", True)
    a, b = spec.containers
    assert (a.image_pull_policy, b.image_pull_policy) == ("Always", "IfNotPresent")
    assert a.termination_message_path == "/dev/termination-log" and a.termination_message_policy == "File"
    assert a.ports[0].protocol == "TCP"
    assert a.resources.limits == {"cpu": "1", "memory": "64Mi"} and a.resources.requests == a.resources.limits
    assert b.readiness_probe.period_seconds == 10 and b.readiness_probe.failure_threshold == 3
    assert pod.status.phase == "Pending" and pod.status.qos_class == "Burstable"
    assert pod.metadata.generation == 1


def test_workload_defaults(apis: Callable[[str], Any], ns: str) -> None:
    apps, batch = apis("AppsV1Api"), apis("BatchV1Api")
    deploy = _call(apis, "Deployment", "create", ns, _body("Deployment", "d"))
    assert deploy.spec.replicas == 1 and deploy.spec.revision_history_limit == 10
    assert deploy.spec.progress_deadline_seconds == 600
    strategy = deploy.spec.strategy
    assert strategy.type == "RollingUpdate"
    assert (strategy.rolling_update.max_surge, strategy.rolling_update.max_unavailable) == ("25%", "25%")
    template = deploy.spec.template.spec
    assert template.restart_policy == "Always" and template.containers[0].image_pull_policy == "IfNotPresent"
    zero = apps.create_namespaced_deployment(ns, {**_body("Deployment", "zero"), "spec": {
        **_body("Deployment", "zero")["spec"], "replicas": 0}})
    assert zero.spec.replicas == 0  # an explicit zero is kept, not defaulted
    sts = _call(apis, "StatefulSet", "create", ns, _body("StatefulSet", "s"))
    assert (sts.spec.replicas, sts.spec.pod_management_policy, sts.spec.update_strategy.type,
            sts.spec.update_strategy.rolling_update.partition) == (1, "OrderedReady", "RollingUpdate", 0)
    ds = _call(apis, "DaemonSet", "create", ns, _body("DaemonSet", "ds"))
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
    job = batch.create_namespaced_job(ns, _body("Job", "j"))
    assert (job.spec.completions, job.spec.parallelism, job.spec.backoff_limit, job.spec.completion_mode,
            job.spec.suspend) == (1, 1, 6, "NonIndexed", False)
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "j"
    cron = _call(apis, "CronJob", "create", ns, _body("CronJob", "cj"))
    assert (cron.spec.concurrency_policy, cron.spec.suspend, cron.spec.successful_jobs_history_limit,
            cron.spec.failed_jobs_history_limit) == ("Allow", False, 3, 1)
    assert cron.spec.job_template.spec.backoff_limit == 6


def test_service_secret_and_binding_defaults(apis: Callable[[str], Any], ns: str) -> None:
    core = apis("CoreV1Api")
    svc = core.create_namespaced_service(ns, _body("Service", "web"))
    assert (svc.spec.type, svc.spec.session_affinity, svc.spec.internal_traffic_policy) == (
        "ClusterIP", "None", "Cluster")
    assert ipaddress.ip_address(svc.spec.cluster_ip) in ipaddress.ip_network("10.96.0.0/12")
    assert svc.spec.cluster_ips == [svc.spec.cluster_ip] and svc.spec.ip_families == ["IPv4"]
    assert svc.spec.ports[0].protocol == "TCP" and svc.spec.ports[0].target_port == 80
    headless = core.create_namespaced_service(ns, {"metadata": {"name": "headless"},
                                                   "spec": {"clusterIP": "None", "selector": {"a": "b"}}})
    assert headless.spec.cluster_ip == "None"
    other = core.create_namespaced_service(ns, _body("Service", "other"))
    assert other.spec.cluster_ip != svc.spec.cluster_ip
    secret = core.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"user": "admin"},
                                                "data": {"k": "dg=="}})
    assert secret.type == "Opaque" and secret.data == {"k": "dg==", "user": "YWRtaW4="}
    assert secret.string_data is None
    binding = _call(apis, "RoleBinding", "create", ns, _body("RoleBinding", "rb"))
    assert binding.subjects[0].api_group == "rbac.authorization.k8s.io"


@pytest.mark.parametrize(("kind", "change", "fields"), [
    ("Pod", lambda b: b["spec"].update(containers=[]), ["spec.containers"]),
    ("Pod", lambda b: b["spec"]["containers"][0].pop("image"), ["spec.containers[0].image"]),
    ("Pod", lambda b: b["spec"].update(restartPolicy="Sometimes"), ["spec.restartPolicy"]),
    ("Deployment", lambda b: b["spec"].pop("selector"), ["spec.selector"]),
    ("Deployment", lambda b: b["spec"].update(replicas=-1), ["spec.replicas"]),
    ("Deployment", lambda b: b["spec"].update(selector={"matchLabels": {"app": "other"}}),
     ["spec.template.metadata.labels"]),
    ("Deployment", lambda b: b["spec"].update(selector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
     ["spec.selector.matchExpressions[0].values"]),
    ("Job", lambda b: b["spec"]["template"]["spec"].pop("restartPolicy"), ["spec.template.spec.restartPolicy"]),
    ("CronJob", lambda b: b["spec"].pop("schedule"), ["spec.schedule"]),
    ("Service", lambda b: b["spec"].pop("ports"), ["spec.ports"]),
    ("Service", lambda b: b["spec"].update(type="Cluster"), ["spec.type"]),
    ("Role", lambda b: b["rules"][0].pop("verbs"), ["rules[0].verbs"]),
    ("RoleBinding", lambda b: b["roleRef"].update(kind="Pod"), ["roleRef.kind"]),
    ("PodDisruptionBudget", lambda b: b["spec"].update(maxUnavailable=1), ["spec"]),
    ("EndpointSlice", lambda b: b.pop("addressType"), ["addressType"]),
])
def test_invalid_objects_are_422_with_kubes_field_paths(
        server: TestAPIServer, ns: str, kind: str, change: Callable[[dict[str, Any]], Any],
        fields: list[str]) -> None:
    body = _body(kind, "bad")
    code, out = _create_raw(server, ns, kind, body)  # the control: the unchanged body is valid
    assert code == 201, out
    body = _body(kind, "bad2")
    change(body)
    code, out = _create_raw(server, ns, kind, body)
    assert code == 422 and out["reason"] == "Invalid", out
    assert [c["field"] for c in out["details"]["causes"]] == fields, out


def test_service_name_is_a_dns1035_label(server: TestAPIServer, ns: str) -> None:
    code, out = _create_raw(server, ns, "Service", _body("Service", "1web"))
    assert code == 422 and [c["field"] for c in out["details"]["causes"]] == ["metadata.name"], out
    assert "DNS-1035 label" in out["message"]
    code, out = _create_raw(server, ns, "Deployment", _body("Deployment", "1web"))  # a subdomain is enough here
    assert code == 201, out


def test_immutable_fields(apis: Callable[[str], Any], ns: str) -> None:
    apps, batch, core = apis("AppsV1Api"), apis("BatchV1Api"), apis("CoreV1Api")
    rbac = apis("RbacAuthorizationV1Api")
    _call(apis, "Deployment", "create", ns, _body("Deployment", "d"))
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment("d", ns, {"spec": {"selector": {"matchLabels": {"app": "x"}},
                                                            "template": {"metadata": {"labels": {"app": "x"}}}}})
    assert _invalid_fields(err.value) == ["spec.selector"]
    assert "field is immutable" in json.loads(err.value.body)["message"]
    batch.create_namespaced_job(ns, _body("Job", "j"))
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job("j", ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:2"}]}}}})
    assert _invalid_fields(err.value) == ["spec.template"]
    svc = core.create_namespaced_service(ns, _body("Service", "web"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("web", ns, {"spec": {"clusterIP": "10.96.0.99", "clusterIPs": ["10.96.0.99"]}})
    assert _invalid_fields(err.value) == ["spec.clusterIPs[0]"]
    # An update that leaves clusterIP unset keeps the allocated one (as kube does).
    body = core.read_namespaced_service("web", ns).to_dict(serialize=True)
    del body["spec"]["clusterIP"], body["spec"]["clusterIPs"]
    body["spec"]["ports"][0]["port"] = 81
    assert core.replace_namespaced_service("web", ns, body).spec.cluster_ip == svc.spec.cluster_ip
    _call(apis, "RoleBinding", "create", ns, _body("RoleBinding", "rb"))
    with pytest.raises(ApiException) as err:
        rbac.patch_namespaced_role_binding("rb", ns, {"roleRef": {"name": "other"}})
    assert _invalid_fields(err.value) == ["roleRef"]


def test_pod_spec_updates_are_limited_to_images_and_a_few_fields(apis: Callable[[str], Any], ns: str) -> None:
    core = apis("CoreV1Api")
    _call(apis, "Pod", "create", ns, _body("Pod", "p"))
    pod = core.patch_namespaced_pod("p", ns, {"spec": {"containers": [{"name": "c", "image": "busybox:2"}],
                                                       "activeDeadlineSeconds": 60}})
    assert pod.spec.containers[0].image == "busybox:2" and pod.metadata.generation == 2
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", ns, {"spec": {"restartPolicy": "Never"}})
    assert _invalid_fields(err.value) == ["spec"]
    assert "pod updates may not change fields other than `spec.containers[*].image`" in json.loads(
        err.value.body)["message"]


def test_generation_counts_spec_changes_only(apis: Callable[[str], Any], ns: str) -> None:
    apps = apis("AppsV1Api")
    d = _call(apis, "Deployment", "create", ns, _body("Deployment", "d"))
    assert d.metadata.generation == 1
    d = apps.patch_namespaced_deployment("d", ns, {"metadata": {"labels": {"x": "y"}}})
    assert d.metadata.generation == 1
    d = apps.patch_namespaced_deployment("d", ns, {"spec": {"replicas": 4}})
    assert d.metadata.generation == 2
    d = apps.patch_namespaced_deployment_status("d", ns, {"status": {"observedGeneration": 2, "replicas": 4}})
    assert d.metadata.generation == 2 and d.status.replicas == 4
    svc = _call(apis, "Service", "create", ns, _body("Service", "s"))
    assert svc.metadata.generation is None  # Services carry no generation, as in kube


def test_status_subresource(apis: Callable[[str], Any], ns: str) -> None:
    apps = apis("AppsV1Api")
    created = apps.create_namespaced_deployment(ns, {**_body("Deployment", "d"), "status": {"replicas": 9}})
    assert created.status is None or created.status.replicas is None  # a create's status is dropped
    d = apps.patch_namespaced_deployment("d", ns, {"status": {"replicas": 3}})
    assert d.status is None or d.status.replicas is None  # the main endpoint ignores status
    d = apps.patch_namespaced_deployment_status("d", ns, {"spec": {"replicas": 7}, "status": {"readyReplicas": 2},
                                                          "metadata": {"labels": {"ignored": "yes"}}})
    assert d.status.ready_replicas == 2 and d.spec.replicas == 1 and not (d.metadata.labels or {})
    assert apps.read_namespaced_deployment_status("d", ns).status.ready_replicas == 2
    core = apis("CoreV1Api")
    core.create_namespaced_pod(ns, _body("Pod", "p"))
    pod = core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running", "podIP": "10.1.2.3"}})
    assert (pod.status.phase, pod.status.pod_ip) == ("Running", "10.1.2.3")


def test_scale_subresource(apis: Callable[[str], Any], server: TestAPIServer, ns: str) -> None:
    apps = apis("AppsV1Api")
    for kind, infix in (("Deployment", "deployment"), ("StatefulSet", "stateful_set"),
                        ("ReplicaSet", "replica_set")):
        _call(apis, kind, "create", ns, _body(kind, "w"))
        scale = getattr(apps, f"read_namespaced_{infix}_scale")("w", ns)
        assert (scale.kind, scale.api_version, scale.spec.replicas) == ("Scale", "autoscaling/v1", 1)
        assert scale.status.selector == "app=web" and scale.status.replicas == 0
        scale = getattr(apps, f"patch_namespaced_{infix}_scale")("w", ns, {"spec": {"replicas": 3}})
        assert scale.spec.replicas == 3
        obj = getattr(apps, f"read_namespaced_{infix}")("w", ns)
        assert obj.spec.replicas == 3 and obj.metadata.generation == 2
        body = {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "w", "resourceVersion": scale.metadata.resource_version},
                "spec": {"replicas": 5}}
        assert getattr(apps, f"replace_namespaced_{infix}_scale")("w", ns, body).spec.replicas == 5
        with pytest.raises(ApiException) as err:  # the old resourceVersion is a failed precondition
            getattr(apps, f"replace_namespaced_{infix}_scale")("w", ns, body)
        assert err.value.status == 409
        with pytest.raises(ApiException) as err:
            getattr(apps, f"patch_namespaced_{infix}_scale")("w", ns, {"spec": {"replicas": -1}})
        assert _invalid_fields(err.value) == ["spec.replicas"]
    code, _ = _raw(server, f"/apis/apps/v1/namespaces/{ns}/daemonsets/w/scale")
    assert code == 404
    code, _ = _raw(server, f"/apis/apps/v1/namespaces/{ns}/deployments/missing/scale")
    assert code == 404


def test_finalizers_and_owner_references(apis: Callable[[str], Any], ns: str) -> None:
    apps, core = apis("AppsV1Api"), apis("CoreV1Api")
    pod = core.create_namespaced_pod(ns, {**_body("Pod", "held"), "metadata": {
        "name": "held", "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_pod("held", ns)
    marked = core.read_namespaced_pod("held", ns)
    assert marked.metadata.deletion_timestamp is not None and marked.metadata.uid == pod.metadata.uid
    core.patch_namespaced_pod("held", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("held", ns)
    assert err.value.status == 404
    deploy = _call(apis, "Deployment", "create", ns, _body("Deployment", "owner"))
    owned = _body("ReplicaSet", "owner-1")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "owner",
                                             "uid": deploy.metadata.uid, "controller": True,
                                             "blockOwnerDeletion": True}]
    apps.create_namespaced_replica_set(ns, owned)
    apps.delete_namespaced_deployment("owner", ns, propagation_policy="Foreground")

    def gone() -> bool:
        for read, name in ((apps.read_namespaced_replica_set, "owner-1"), (apps.read_namespaced_deployment, "owner")):
            try:
                read(name, ns)
            except ApiException as exc:
                assert exc.status == 404
                continue
            return False
        return True

    eventually(gone)


def _table(server: TestAPIServer, path: str) -> dict[str, Any]:
    code, table, _ = _request(server, path, headers={
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    assert code == 200 and table["kind"] == "Table", table
    return table


def test_table_columns_as_kubectl_shows_them(apis: Callable[[str], Any], server: TestAPIServer, ns: str) -> None:
    core = apis("CoreV1Api")
    core.create_namespaced_pod(ns, _body("Pod", "p"))
    core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running", "containerStatuses": [
        {"name": "c", "ready": True, "restartCount": 2, "image": "busybox", "imageID": "", "started": True,
         "state": {"running": {}}}]}})
    table = _table(server, f"/api/v1/namespaces/{ns}/pods")
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "1/1", "Running", "2"]
    _call(apis, "Deployment", "create", ns, _body("Deployment", "d"))
    table = _table(server, f"/apis/apps/v1/namespaces/{ns}/deployments")
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"]
    assert table["rows"][0]["cells"][:4] == ["d", "0/1", 0, 0]
    assert table["rows"][0]["cells"][5:] == ["c", "nginx:1.27", "app=web"]
    svc = core.create_namespaced_service(ns, _body("Service", "web"))
    table = _table(server, f"/api/v1/namespaces/{ns}/services/web")
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"]
    assert table["rows"][0]["cells"][:5] == ["web", "ClusterIP", svc.spec.cluster_ip, "<none>", "80/TCP"]
    apis("BatchV1Api").create_namespaced_job(ns, _body("Job", "j"))
    table = _table(server, f"/apis/batch/v1/namespaces/{ns}/jobs")
    assert table["rows"][0]["cells"][:3] == ["j", "Running", "0/1"]


def test_openapi_describes_the_kinds(server: TestAPIServer) -> None:
    code, root = _raw(server, "/openapi/v3")
    assert code == 200 and "apis/apps/v1" in root["paths"]
    code, doc = _raw(server, root["paths"]["apis/apps/v1"]["serverRelativeURL"])
    assert code == 200
    deployment = doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment["x-kubernetes-group-version-kind"] == [{"group": "apps", "version": "v1",
                                                              "kind": "Deployment"}]
    spec = deployment["properties"]["spec"]["properties"]
    assert spec["replicas"]["type"] == "integer" and spec["replicas"]["description"].startswith(
        "Number of desired pods.")
    container = spec["template"]["properties"]["spec"]["properties"]["containers"]["items"]["properties"]
    assert container["image"]["description"].startswith("Container image name.")
    assert container["name"]["description"].startswith("Name of the container")  # each field its own
    assert spec["template"]["properties"]["spec"]["properties"]["containers"]["type"] == "array"
    assert "/apis/apps/v1/namespaces/{namespace}/deployments/{name}" in doc["paths"]


def test_openapi_v2_json_and_protobuf(server: TestAPIServer) -> None:
    code, doc = _raw(server, "/openapi/v2")
    assert code == 200 and doc["swagger"] == "2.0"
    deployment = doc["definitions"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment["properties"]["metadata"]["$ref"] == \
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert deployment["x-kubernetes-group-version-kind"][0]["kind"] == "Deployment"
    assert "io.k8s.api.core.v1.ConfigMap" in doc["definitions"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Accept": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    try:
        conn.request("GET", "/openapi/v2", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert resp.status == 200 and resp.getheader("Content-Type") == headers["Accept"]
    assert body.startswith(b"\x0a\x032.0") and b"io.k8s.api.apps.v1.Deployment" in body
