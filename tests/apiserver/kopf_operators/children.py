"""Like kopf's example 02-children: each KopfExample gets a Pod, adopted (owner reference, namespace, name and
labels from the parent), whose uid the handler returns into the parent's status."""

import os
from typing import Any

import kopf
from kubernetes import client, config


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.create("kopfexamples")
def create_fn(spec: kopf.Spec, **_: Any) -> Any:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {"containers": [{
            "name": "the-only-one", "image": "busybox", "command": ["sh", "-x", "-c"],
            "args": [f'echo "FIELD=$FIELD"\nsleep {spec.get("duration", 0)}\n'],
            "env": [{"name": "FIELD", "value": spec.get("field", "default-value")}],
        }]},
    }
    kopf.adopt(pod)
    configuration = client.Configuration()
    config.load_kube_config(config_file=os.environ["KUBECONFIG"], client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        created = client.CoreV1Api(api_client).create_namespaced_pod(pod["metadata"]["namespace"], pod)
    return {"children": [created.metadata.uid]}
