"""The trigger's write to the API server (``POST /trigger/{name}`` of ``keyqueue-lab pipeline``, in the pipeline's
process or in :mod:`keyqueue.lab.trigger_process`): plain HTTP with aiohttp's client (:class:`ApiWriter`), and one
trigger's merge patch or create of a ConfigMap (:func:`write_trigger`), which raises :class:`TriggerError` with the
HTTP status to answer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["ApiWriter", "TriggerError", "write_trigger"]

_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class TriggerError(Exception):
    """A trigger could not be carried out; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApiWriter:
    """The trigger's write to the API server: plain HTTP with aiohttp's client (a keep-alive connection pool), on
    the trigger server's loop, with the address, CA, client certificate and credentials of a
    ``kubernetes.client.Configuration`` (its ``auth_settings()``, read for every request, so a kubeconfig's refresh
    hook still works). The answer body is returned as bytes; nothing is decoded into the official client's models.
    Create its session lazily on the loop that uses it; :meth:`close` on that loop."""

    def __init__(self, conf: Any) -> None:
        import ssl

        self._conf = conf
        self.base = str(conf.host).rstrip("/")
        self._ssl: ssl.SSLContext | bool | None = None
        if self.base.startswith("https:"):
            if conf.verify_ssl:
                ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
                if not conf.assert_hostname and conf.assert_hostname is not None:
                    ctx.check_hostname = False
            else:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if conf.cert_file:
                ctx.load_cert_chain(conf.cert_file, conf.key_file or None)
            self._ssl = ctx
        self._session: Any = None

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for setting in self._conf.auth_settings().values():  # the official client's own source of credentials
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    async def send(self, method: str, path: str, body: dict[str, Any] | None,
                   content_type: str) -> tuple[int, str, bytes]:
        """One request (``body`` sent as JSON; ``None``: no body); returns (status, reason, body). Raises
        ``aiohttp.ClientError`` / ``OSError`` on failure."""
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(limit=64, ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        async with self._session.request(method, self.base + path, data=data,
                                         headers=self._headers(content_type)) as resp:
            return resp.status, str(resp.reason or ""), await resp.read()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def write_trigger(writer: ApiWriter, namespace: str, name: str, seq: int, run_id: str,
                        exists: Callable[[str], bool]) -> tuple[str, int, int, int]:
    """A trigger's write: a merge patch of ConfigMap ``namespace/name`` with a new ``trigger-seq`` (a create if
    ``exists(key)`` says it is missing; a 404 to the patch creates, a 409 to the create patches). Returns
    ``(action, resourceVersion, t_api, t_done)`` (``perf_counter_ns`` around the request). Raises
    :class:`TriggerError` (400 for a bad name, 502 when the API server refused or failed)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise TriggerError(400, f"not a valid ConfigMap name: {name!r}")
    key = f"{namespace}/{name}"
    data = {"trigger-seq": str(seq), "trigger-run": run_id}  # never a no-op write (which keeps the RV)
    known = exists(key)
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    patch = ("PATCH", f"{collection}/{name}", {"data": data}, "application/merge-patch+json")
    create = ("POST", collection, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                   "data": data}, "application/json")
    t_api = time.perf_counter_ns()
    try:
        action, (status, reason, raw) = ("updated", await writer.send(*patch)) if known else (
            "created", await writer.send(*create))
        if status == 404 and known:  # deleted meanwhile
            action, (status, reason, raw) = "created", await writer.send(*create)
        elif status == 409 and not known:  # created meanwhile (another trigger or client)
            action, (status, reason, raw) = "updated", await writer.send(*patch)
        t_done = time.perf_counter_ns()
        if not 200 <= status < 300:
            raise TriggerError(502, f"API server answered {status} {reason}")
        obj = json.loads(raw)
        rv = int(obj["metadata"]["resourceVersion"])
    except TriggerError:
        raise
    except Exception as exc:  # connection refused/reset, timeout, an answer that is not an object
        raise TriggerError(502, f"API request failed: {type(exc).__name__}: {exc}") from exc
    return action, rv, t_api, t_done
