""":class:`APIServer`, assembled from the routes, and its lifecycle: start and stop of its threads."""

from __future__ import annotations

from keyqueue._httpserver import BackgroundHTTPServer

from ..gc import GarbageCollector
from .request import _status_body
from .routing import Router
from .threads import _StoragePool

__all__ = ["APIServer"]


class APIServer(Router):
    """Serves the Kubernetes REST API subset for one :class:`Registry` on one loopback port.

    :meth:`start` binds and serves from a background thread (an asyncio loop); :meth:`stop` stops accepting, ends
    open watches (their streams end cleanly with the last chunk), closes every connection and waits for the
    server's thread and its storage threads.  A stopped server can be started again; with ``port`` fixed it binds
    the same port.

    ``token``: if set, every request except ``/version`` and the health checks
    needs ``Authorization: Bearer <token>`` (401 otherwise).  ``ssl_context``:
    serve HTTPS.  ``bookmark_interval``: how often an idle watch that asked for
    bookmarks gets a BOOKMARK.  ``max_watch_seconds``: watches without
    ``timeoutSeconds`` end after this long (kube-apiserver: 30-60 min).
    ``limits``: connection, header, idle and body limits (:class:`~keyqueue._httpserver.HTTPLimits`).
    ``watch_buffer``: events one watch may hold undelivered before the server ends it (a client that stops
    reading).  ``storage_threads``: the bound of the thread pool that runs blocking storage calls.

    ``user``: the user name a request with the token is authenticated as (in the groups ``system:masters`` and
    ``system:authenticated``), as ``SelfSubjectReview`` (``kubectl auth whoami``) reports it; without a token
    every request is ``system:anonymous``.  Nothing is authorized: every ``SelfSubjectAccessReview``
    (``kubectl auth can-i``) answers allowed.

    ``/healthz`` and ``/livez`` answer 200 while the server runs; ``/readyz`` answers 200 only if storage answers
    within 2 s (503 otherwise).
    """

    def start(self) -> None:
        """Bind (port 0 = a free port, remembered for restarts) and serve in a daemon thread."""
        with self._lock:
            if self._http is not None:
                raise RuntimeError("API server already running")
            self.stopping = False
            self.registry.serve_stored_crds()  # a server (re)started on storage that has CRDs serves them
            executor = _StoragePool(self.storage_threads, "apiserver-storage")
            http = BackgroundHTTPServer(self._handle, self.host, self.port, limits=self.limits,
                                        ssl_context=self.ssl_context, error_body=_status_body,
                                        name="apiserver", before_stop=self._end_streams)
            try:
                http.start()
            except BaseException:
                executor.shutdown()
                raise
            self.port = http.port
            self._http, self._executor = http, executor
            self._gc = GarbageCollector(self.registry)
            self._gc.start()
            self.registry.admission.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving; blocks until the server's threads ended (up to ``timeout`` s each).  Idempotent."""
        with self._lock:
            http, executor, gc = self._http, self._executor, self._gc
            self._http = self._executor = self._gc = None
            if http is None:
                return
            self.stopping = True
        if gc is not None:
            gc.stop(timeout)
        self.registry.admission.stop(timeout)
        http.stop(timeout)
        if executor is not None:
            executor.shutdown()
