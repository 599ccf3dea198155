"""Lists and watches: :meth:`ListWatch.list_objects` (kube's ``resourceVersion`` rules, pages with ``continue``
tokens) and :meth:`ListWatch.watch`, which opens an :class:`~.objectwatch.ObjectWatch` and keeps it in the registry's
open watches until it is closed."""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from .. import errors
from ..objects import ResourceType
from ..selectors import parse_field_selector, parse_label_selector
from ..storage import DEFAULT_WATCH_BUFFER, BackendUnavailableError, CompactedError, FutureRevisionError, KeyValue
from .base import RegistryBase
from .objectwatch import ObjectWatch
from .options import MAX_RESOURCE_VERSION, Matcher, parse_resource_version

__all__ = ["ListWatch"]

#: A paged list that skips objects its selectors do not match reads on in chunks that double, up to this many keys
#: or about this many bytes at the sizes seen (kube-apiserver doubles up to 10000 keys).
_MAX_PAGE_KEYS: Final = 10000
_PAGE_BYTES: Final = 4 * 1024 * 1024


class ListWatch(RegistryBase):
    """The reads of many objects: lists and watches."""

    # ------------------------------------------------------------------ lists
    def matcher(self, rt: ResourceType, label_selector: str | None, field_selector: str | None) -> Matcher:
        """Parse ``labelSelector`` and ``fieldSelector`` (400 if malformed or on an unsupported field)."""
        fields = parse_field_selector(field_selector, rt.field_selectors)
        return Matcher(rt, parse_label_selector(label_selector), fields)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        matcher: Matcher,
        resource_version: str = "",
        resource_version_match: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """List objects; returns ``(items, list metadata)``.

        ``resourceVersion``/``resourceVersionMatch``/``limit``/``continue``
        follow the Kubernetes rules: unset = most recent; ``0`` = any (here: most
        recent); ``N`` = not older than N, or exactly N with
        ``resourceVersionMatch=Exact`` or with ``limit`` (410 Expired if N was
        compacted).  ``limit`` pages with a ``continue`` token that reads the
        next page at the same revision.
        """
        prefix = self.collection_prefix(rt, namespace)
        start_key = ""
        read_rev = 0
        if continue_token:
            if resource_version not in ("", "0") or resource_version_match:
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            read_rev, start_key = self._decode_continue(continue_token, prefix)
        elif resource_version_match not in ("", "Exact", "NotOlderThan"):
            raise errors.bad_request(f'invalid resourceVersionMatch: "{resource_version_match}"')
        elif resource_version_match and resource_version == "":
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        elif resource_version not in ("", "0"):
            rv = parse_resource_version(resource_version)
            if resource_version_match == "Exact" or (not resource_version_match and limit > 0):
                read_rev = rv
            else:
                current = self._backend_call(self.backend.revision)
                if rv > current:
                    raise errors.too_large_resource_version(rv, current)
        elif resource_version_match == "Exact":
            raise errors.bad_request("resourceVersionMatch=Exact is forbidden for resourceVersion \"0\"")
        try:
            return self._read_list(rt, prefix, matcher, read_rev, start_key, limit)
        except CompactedError:
            if continue_token:  # as kube: a fresh token (revision -1 = the latest) continues inconsistently
                exc = errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list."
                )
                exc.list_meta = {"continue": self._encode_continue(-1, start_key, prefix)}
                raise exc from None
            raise errors.expired("The resourceVersion for the provided list is too old.") from None
        except FutureRevisionError:
            raise errors.too_large_resource_version(read_rev, self._backend_call(self.backend.revision)) from None
        except BackendUnavailableError as exc:
            raise errors.internal_error(str(exc)) from None

    def _read_list(self, rt: ResourceType, prefix: str, matcher: Matcher, read_rev: int, start_key: str,
                   limit: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The items of a list from ``start_key`` on and its metadata.  Without ``limit``, the whole range (which
        the backend reads in chunks of bounded size); with it, as kube-apiserver pages: bounded reads from
        ``start_key`` until ``limit`` items matched or the range ended, the continue token set when keys remain
        after the last one read (so with selectors, the last page may come back empty)."""
        items: list[dict[str, Any]] = []

        def take(kv: KeyValue) -> None:
            obj = self.decode(kv, rt=rt)
            if matcher.matches(obj):
                obj.pop("kind", None)
                obj.pop("apiVersion", None)
                items.append(obj)

        if limit <= 0:
            kvs, rev = self.backend.range(prefix, read_rev)
            for kv in kvs:
                if kv.key >= start_key:
                    take(kv)
            return items, {"resourceVersion": str(rev)}
        rev, key, want = read_rev, start_key, limit
        while True:
            page = self.backend.range_page(prefix, rev, key, want)
            rev = page.revision
            for i, kv in enumerate(page.kvs):
                if len(items) == limit:  # full: the rest of this page is the next page's
                    return items, self._page_meta(rev, kv.key, prefix, page.count - i, matcher)
                take(kv)
            if not page.more or not page.kvs:
                return items, {"resourceVersion": str(rev)}
            key = page.kvs[-1].key + "\x00"
            if len(items) == limit:
                return items, self._page_meta(rev, key, prefix, page.count - len(page.kvs), matcher)
            size = sum(len(kv.value) for kv in page.kvs) // len(page.kvs) + 1
            want = max(1, min(2 * want, _MAX_PAGE_KEYS, _PAGE_BYTES // size))  # selective: read on in larger chunks

    def _page_meta(self, rev: int, next_key: str, prefix: str, remaining: int, matcher: Matcher) -> dict[str, Any]:
        """The metadata of a full page whose next page starts at ``next_key`` (``remaining`` keys from there)."""
        meta: dict[str, Any] = {"resourceVersion": str(rev), "continue": self._encode_continue(rev, next_key, prefix)}
        if matcher.match_all:
            meta["remainingItemCount"] = remaining
        return meta

    @staticmethod
    def _encode_continue(rev: int, next_key: str, prefix: str) -> str:
        token = {"v": "meta.k8s.io/v1", "rv": rev, "start": next_key[len(prefix) :]}
        return base64.urlsafe_b64encode(json.dumps(token, separators=(",", ":")).encode()).decode()

    @staticmethod
    def _decode_continue(token: str, prefix: str) -> tuple[int, str]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rev, start = data["rv"], data["start"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise errors.bad_request("continue key is not valid: invalid token") from None
        if (not isinstance(rev, int) or isinstance(rev, bool) or not isinstance(start, str)
                or not (0 < rev <= MAX_RESOURCE_VERSION or rev == -1) or ".." in start or start.startswith("/")):
            raise errors.bad_request("continue key is not valid: invalid token")
        return max(rev, 0), prefix + start  # -1 (a token handed out with 410): continue at the latest revision

    # ------------------------------------------------------------------ watches
    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        matcher: Matcher,
        resource_version: str = "",
        allow_bookmarks: bool = False,
        send_initial_events: bool | None = None,
        max_pending: int = DEFAULT_WATCH_BUFFER,
    ) -> ObjectWatch:
        """Start a watch.

        ``resourceVersion`` unset or ``0``: ADDED events for the current state,
        then changes (as kube-apiserver does).  ``N``: changes after N.
        ``sendInitialEvents=true`` also sends the current state first, ended by a
        BOOKMARK annotated ``k8s.io/initial-events-end``.  ``max_pending``: events the watch may hold
        undelivered; a consumer further behind gets its watch ended (:meth:`ObjectWatch.next` raises EOFError and
        ``overflowed`` is set), as kube-apiserver ends the watch of an unresponsive client.
        """
        prefix = self.collection_prefix(rt, namespace)
        initial: list[dict[str, Any]] = []
        rv = parse_resource_version(resource_version) if resource_version not in ("", "0") else 0
        if send_initial_events and not allow_bookmarks:
            raise errors.bad_request("sendInitialEvents requires allowWatchBookmarks=true")
        if resource_version in ("", "0") or send_initial_events:
            kvs, rev = self._backend_call(self.backend.range, prefix, 0)
            for kv in kvs:
                obj = self.decode(kv, rt=rt)
                if matcher.matches(obj):
                    initial.append({"type": "ADDED", "object": obj})
            if send_initial_events:
                initial.append(
                    {"type": "BOOKMARK", "object": {
                        "kind": rt.kind, "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(rev),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}}
                )
            rv = rev
        backend_watch = self._backend_call(self.backend.watch, prefix, rv + 1, max_pending)
        w = ObjectWatch(self, rt, matcher, backend_watch, rv, initial, allow_bookmarks)
        with self._lock:
            self._watches.add(w)
        return w

    def close_watches(self) -> None:
        """Close every open watch (their :meth:`ObjectWatch.next` then raises EOFError)."""
        with self._lock:
            watches = list(self._watches)
        for w in watches:
            w.close()

    def _forget(self, w: ObjectWatch) -> None:
        with self._lock:
            self._watches.discard(w)

