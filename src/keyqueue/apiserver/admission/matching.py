"""Whether a webhook is called for a write: its ``rules``, ``namespaceSelector`` and ``objectSelector``, as kube's
``rules.Matcher`` and the webhook's namespace and object matchers decide.

A rule matches when its ``operations`` (``*`` = all), ``apiGroups``, ``apiVersions`` (``*`` = any) and ``resources``
match, and its ``scope`` (``*``, ``Cluster``, ``Namespaced``) fits the object.  A resource entry is
``<resource>[/<subresource>]``: ``pods`` matches the main resource only, ``pods/status`` the status subresource,
``pods/*`` both, ``*`` every main resource, ``*/status`` every status subresource, ``*/*`` everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..objects import NAMESPACES
from ..objects.kind_validity import selector_matches
from .request import Attributes

__all__ = ["matches_rules", "matches_selectors"]


def _resource_matches(entries: list[str], resource: str, subresource: str) -> bool:
    for entry in entries:
        res, _, sub = entry.partition("/")
        if (res == "*" or res == resource) and (sub == "*" or sub == subresource):
            return True
    return False


def _rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    rt = attrs.rt
    operations = rule.get("operations") or []
    if "*" not in operations and attrs.operation not in operations:
        return False
    groups, versions = rule.get("apiGroups") or [], rule.get("apiVersions") or []
    if "*" not in groups and rt.group not in groups:
        return False
    if "*" not in versions and rt.version not in versions:
        return False
    if not _resource_matches(list(rule.get("resources") or ()), rt.name, attrs.subresource):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster":
        return not rt.namespaced
    if scope == "Namespaced":
        return rt.namespaced
    return True


def matches_rules(hook: Mapping[str, Any], attrs: Attributes) -> bool:
    """True if one of ``hook``'s ``rules`` matches the write."""
    return any(isinstance(rule, Mapping) and _rule_matches(rule, attrs) for rule in hook.get("rules") or ())


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def matches_selectors(hook: Mapping[str, Any], attrs: Attributes,
                      namespace_labels: Callable[[str], Mapping[str, Any]]) -> bool:
    """True if the write passes ``hook``'s ``objectSelector`` (the labels of the new or the old object match) and its
    ``namespaceSelector`` (the labels of the object's namespace; a Namespace's own labels; always for other
    cluster-scoped objects).  ``namespace_labels(name)`` reads a namespace's labels (it may raise the 404 of a
    missing namespace), and is called only when the selector is not empty.  Blocks on that read only."""
    object_selector = hook.get("objectSelector") or {}
    if object_selector and not (
        (attrs.obj is not None and selector_matches(object_selector, _labels(attrs.obj)))
        or (attrs.old is not None and selector_matches(object_selector, _labels(attrs.old)))
    ):
        return False
    namespace_selector = hook.get("namespaceSelector") or {}
    if not namespace_selector:
        return True
    if attrs.rt is NAMESPACES:
        return selector_matches(namespace_selector, _labels(attrs.obj if attrs.obj is not None else attrs.old))
    if not attrs.rt.namespaced or not attrs.namespace:
        return True
    return selector_matches(namespace_selector, namespace_labels(attrs.namespace))
