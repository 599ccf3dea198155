"""The HTTP front end: Kubernetes REST paths for every resource of the registry's
:class:`~keyqueue.apiserver.catalogue.Catalogue`.

Served by aiohttp on one asyncio event loop (:mod:`keyqueue._httpserver`, which adds the connection limit, and the
header, idle and body limits), HTTP/1.1 keep-alive and ``TCP_NODELAY`` (asyncio's default).  Storage calls that
may block (etcd) run in a bounded pool of threads (:class:`~.threads._StoragePool`); the in-memory backend is called
on the loop.  Request bodies are always read in full (DELETE's too), counted as they arrive, so a keep-alive
connection never desynchronises and no body beyond 3 MiB is held.  Answers are JSON; every error, also one aiohttp
answers itself (a malformed request, an unknown method), is a ``Status`` object; watches are chunked streams of JSON
lines, each with a bounded buffer: a watcher that stops reading has its watch ended, as kube-apiserver does.

Paths: ``/api/v1/...`` for the core group and ``/apis/{group}/{version}/...`` for a resource type whose ``group``
is set, each as ``[namespaces/{ns}/]{resource}[/{name}]`` and ``watch/...`` (namespaced types also list across
namespaces at ``{resource}``).  A custom resource whose CRD version declares the ``status`` subresource also has
``{resource}/{name}/status`` (get, update, patch); ``scale`` is not served (404).  Custom resources accept JSON and
merge patches and server-side apply (a strategic merge patch is 415, as in kube).

Server-side apply (``PATCH`` with ``application/apply-patch+yaml``, :mod:`~keyqueue.apiserver.apply`) is served on
every object, its ``/status`` and a workload's ``/scale``.  Protobuf *request* bodies of ConfigMaps, Namespaces
and the self reviews are accepted (``kubectl create configmap|namespace`` and ``kubectl auth`` send them);
responses are always JSON, which every client accepts.

The package, each module importing only those listed before it.  :class:`APIServer` is assembled like the
registry: a base class with the state, one subclass per kind of request, and the class that combines them:

* :mod:`.request`: one request as the routes see it, the JSON checks of a body, JSON and ``Status`` answers;
* :mod:`.threads`: where the storage threads meet the event loop: the pool that runs blocking storage calls, and
  the wake-up of a watch response;
* :mod:`.base`: :class:`~.base.ServerBase`, the server's configuration and state, and how a storage call is run;
* :mod:`.static`: the paths that name no resource: ``/version``, discovery, OpenAPI and the health checks;
* :mod:`.reviews`: the self reviews, answered from the request and never stored;
* :mod:`.crud`: create, get, list, update, patch and delete of a collection or one object, with their options;
* :mod:`.watch`: watch requests, streamed as chunked JSON lines;
* :mod:`.routing`: from an HTTP request to its handler: the body read, the token checked, the path routed;
* :mod:`.lifecycle`: :class:`APIServer` and its start and stop.
"""

from .lifecycle import APIServer
from .request import MAX_JSON_DEPTH
from .watch import MAX_WATCH_SECONDS

__all__ = ["MAX_JSON_DEPTH", "MAX_WATCH_SECONDS", "APIServer"]
