"""A Kubernetes-API-compatible test server for a subset of resources (ConfigMaps, Namespaces, Events, Leases,
CustomResourceDefinitions and their custom resources).

This is **not** kube-apiserver.  It serves the part of the Kubernetes REST API
that ``kubectl`` and the official Python client use for ConfigMaps,
Namespaces, Events (``v1`` and ``events.k8s.io/v1``), ``coordination.k8s.io/v1`` Leases and
``apiextensions.k8s.io/v1`` CustomResourceDefinitions with the resources they define (discovery, a minimal
OpenAPI v3, list/get/create/update/patch/delete, finalizers, watch with bookmarks, ``Status`` errors), answers the
self access reviews (everything is allowed) and stores objects in a real
etcd exactly the way kube-apiserver lays them out (keys
``/registry/<resource>/<namespace>/<name>``, resourceVersion = etcd
``mod_revision``, compare-and-swap transactions, watch from
``resourceVersion + 1``, 410 Expired after compaction).  An in-memory backend
with the same behaviour is there for fast tests.

Not supported: other built-in resources, conversion webhooks (a CRD asking for one is refused with 422), admission
beyond "the namespace must exist", authorization (RBAC).  Server-side apply and managedFields follow kube's field
manager (:mod:`.apply`, :mod:`.managedfields`).

Typical use::

    with TestAPIServer() as s:                 # starts etcd + server on free ports
        api = kubernetes.client.CoreV1Api(s.api_client())
        ...                                    # or: kubectl --kubeconfig s.kubeconfig_path ...
"""

from .errors import APIError
from .etcd import EtcdProcess, EtcdStartError, find_etcd_binary
from .registry import Registry
from .server import APIServer
from .storage import Backend, BackendWatch, CompactedError, EtcdBackend, MemoryBackend
from .testserver import TestAPIServer, kubeconfig_text

__all__ = [
    "APIError",
    "APIServer",
    "Backend",
    "BackendWatch",
    "CompactedError",
    "EtcdBackend",
    "EtcdProcess",
    "EtcdStartError",
    "MemoryBackend",
    "Registry",
    "TestAPIServer",
    "find_etcd_binary",
    "kubeconfig_text",
]
