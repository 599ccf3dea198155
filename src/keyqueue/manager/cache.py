"""Read access to a manager's shared informer caches: :class:`Cache` (``get`` by key, ``list`` by namespace and
label selector), with label selectors in Kubernetes' string syntax."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from keyqueue.informer import NAMESPACE_INDEX, HandlerRegistration, Obj, Store
from keyqueue.manager.resources import Resource

__all__ = ["Cache", "SharedInformer", "parse_label_selector"]


class SharedInformer(Protocol):
    """What the manager needs of an informer: :class:`keyqueue.informer.Informer` (threads) and
    :class:`keyqueue.informer.aio.Informer` (asyncio) both are one."""

    store: Store

    def has_synced(self) -> bool: ...

    def add_event_handler(
        self,
        on_add: Callable[[Any], None] | None = None,
        on_update: Callable[[Any, Any], None] | None = None,
        on_delete: Callable[[Any], None] | None = None,
    ) -> HandlerRegistration: ...

_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|[^\s=!(),]+)")
Matcher = Callable[[Mapping[str, str]], bool]


def parse_label_selector(selector: str) -> Matcher:
    """A matcher for a label selector string: comma-separated ``key``, ``!key``, ``key=v``, ``key==v``,
    ``key!=v``, ``key in (a,b)``, ``key notin (a,b)`` (``!=`` and ``notin`` also match objects without the label);
    ``""`` matches everything. Raises ``ValueError`` naming the selector when it does not parse."""
    tokens = _TOKEN.findall(selector)
    if "".join(tokens).replace(" ", "") != re.sub(r"\s+", "", selector):
        raise ValueError(f"label_selector does not parse: {selector!r}")
    reqs: list[tuple[str, str, frozenset[str]]] = []
    i = 0

    def bad() -> ValueError:
        return ValueError(f"label_selector does not parse: {selector!r}")

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            if i + 1 >= len(tokens) or not _is_word(tokens[i + 1]):
                raise bad()
            key = tokens[i + 1]
            reqs.append((key, "!exists", frozenset()))
            i += 2
        elif _is_word(tok):
            key = tok
            op = tokens[i + 1] if i + 1 < len(tokens) else ","
            if op == ",":
                reqs.append((key, "exists", frozenset()))
                i += 1
            elif op in ("=", "==", "!="):
                if i + 2 >= len(tokens) or not _is_word(tokens[i + 2]):
                    raise bad()
                value = tokens[i + 2]
                reqs.append((key, "notin" if op == "!=" else "in", frozenset((value,))))
                i += 3
            elif op in ("in", "notin"):
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise bad()
                j, values = i + 3, set[str]()
                while j < len(tokens) and tokens[j] != ")":
                    if tokens[j] != ",":
                        if not _is_word(tokens[j]):
                            raise bad()
                        values.add(tokens[j])
                    j += 1
                if j >= len(tokens) or not values:
                    raise bad()
                reqs.append((key, op, frozenset(values)))
                i = j + 1
            else:
                raise bad()
        else:
            raise bad()
        if i < len(tokens):
            if tokens[i] != "," or i + 1 == len(tokens):
                raise bad()
            i += 1
    return lambda labels: all(_matches(req, labels) for req in reqs)


def _matches(req: tuple[str, str, frozenset[str]], labels: Mapping[str, str]) -> bool:
    key, op, values = req
    if op == "exists":
        return key in labels
    if op == "!exists":
        return key not in labels
    if op == "in":
        return labels.get(key) in values
    return labels.get(key) not in values  # notin, !=: also true without the label


def _is_word(token: str) -> bool:
    return token not in ("==", "!=", "=", "!", "(", ")", ",")


class Cache:
    """The local cache of one resource, read from the manager's shared informer (never from the server).

    Objects are the API's JSON dicts held by the informer: treat them as read-only. Before the informer synced the
    cache may be empty or partial (:meth:`keyqueue.Manager.start` waits for every cache to sync).
    """

    def __init__(self, resource: Resource, informer: SharedInformer) -> None:
        self.resource = resource
        self.informer = informer

    def get(self, key: str) -> Obj | None:
        """The object stored under ``key`` (``"namespace/name"``, or ``"name"`` for a cluster-scoped resource),
        or ``None``. Never blocks on the network."""
        if not isinstance(key, str):
            raise TypeError(f"key must be a str 'namespace/name' or 'name', got {type(key).__name__}: {key!r:.80}")
        return self.informer.store.get_by_key(key)

    def list(self, namespace: str | None = None, label_selector: str | Mapping[str, str] | None = None) -> list[Obj]:
        """The cached objects (sorted by key), in ``namespace`` if given, whose labels match ``label_selector``
        (a selector string as ``kubectl -l`` takes, or a dict of required labels). Raises ``ValueError`` for a
        selector that does not parse, ``TypeError`` for arguments of the wrong type."""
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or None, got {type(namespace).__name__}: {namespace!r:.80}")
        match: Matcher
        if label_selector is None:
            match = _everything
        elif isinstance(label_selector, str):
            match = parse_label_selector(label_selector)
        elif isinstance(label_selector, Mapping):
            wanted = dict(label_selector)
            match = lambda labels: all(labels.get(k) == v for k, v in wanted.items())  # noqa: E731
        else:
            raise TypeError(f"label_selector must be a str, a dict or None, got {type(label_selector).__name__}: "
                            f"{label_selector!r:.80}")
        store = self.informer.store
        objs = store.list() if namespace is None else store.by_index(NAMESPACE_INDEX, namespace)
        return [o for o in objs if match((o.get("metadata") or {}).get("labels") or {})]

    def __repr__(self) -> str:
        return f"<Cache {self.resource.name} objects={len(self.informer.store)} synced={self.informer.has_synced()}>"


def _everything(labels: Mapping[str, str]) -> bool:
    return True


