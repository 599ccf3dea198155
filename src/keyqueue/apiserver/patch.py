"""The three patch formats of ``PATCH`` requests.

* ``application/json-patch+json``: RFC 6902, applied with the ``jsonpatch``
  package.
* ``application/merge-patch+json``: RFC 7386, implemented here.
* ``application/strategic-merge-patch+json``: a merge patch plus the parts of
  Kubernetes' strategic merge that ConfigMaps and Namespaces can use: the
  ``$patch: replace|delete`` map directives, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>`` (accepted,
  order is not enforced), and list merging for the few lists of these types that
  have a merge strategy (``metadata.finalizers`` merges as a set,
  ``metadata.ownerReferences`` by ``uid``, ``status.conditions`` by ``type``, a Service's ``spec.ports`` by
  ``port``, a pod spec's containers and volumes by ``name``, a container's ports, env and mounts by their keys).
  Every other list is replaced, as their schemas say.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import jsonpatch
import jsonpointer

from .errors import APIError, bad_request

__all__ = ["JSON_PATCH", "MERGE_PATCH", "PATCH_TYPES", "STRATEGIC_MERGE_PATCH", "apply_patch", "merge_lists"]

JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
PATCH_TYPES: Final = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# Lists with a merge strategy: None = set of primitives, otherwise the merge key.  Paths run through objects only
# (a list item's fields continue the list's path): the pod spec's lists are listed where a Pod, a workload's
# template and a CronJob's job template hold them, with kube's patch merge keys.
_POD_SPEC_LISTS: Final[dict[tuple[str, ...], str | None]] = {
    ("containers",): "name", ("initContainers",): "name", ("ephemeralContainers",): "name",
    ("volumes",): "name", ("imagePullSecrets",): "name", ("hostAliases",): "ip",
    **{(containers, field): key for containers in ("containers", "initContainers", "ephemeralContainers")
       for field, key in (("ports", "containerPort"), ("env", "name"), ("volumeMounts", "mountPath"),
                          ("volumeDevices", "devicePath"))},
}
_POD_SPECS: Final = (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec"))
_MERGE_LISTS: Final[dict[tuple[str, ...], str | None]] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("spec", "ports"): "port",  # a Service's
    **{(*prefix, *path): key for prefix in _POD_SPECS for path, key in _POD_SPEC_LISTS.items()},
}


def merge_lists() -> dict[tuple[str, ...], str | None]:
    """The lists a strategic merge patch merges (by path from the object's root; a list item's fields continue the
    list's path), with their merge key (``None``: a set of primitives)."""
    return dict(_MERGE_LISTS)


def _unprocessable(why: str) -> APIError:
    return APIError(422, "Invalid", f"the server rejected our request due to an error in our request: {why}", {})


def apply_patch(patch_type: str, original: dict[str, Any], patch: Any) -> Any:
    """Return ``original`` with ``patch`` applied; ``original`` is not modified.

    Raises a 400 :class:`APIError` for a patch of the wrong shape and a 422 one
    when a JSON patch cannot be applied (failed ``test``, missing path, ...).
    """
    if patch_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        doc = copy.deepcopy(original)
        for op in patch:  # one at a time (as a whole patch would be applied), so that an error can name its op
            try:
                doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
            except jsonpatch.JsonPatchTestFailed:
                path = op.get("path", "") if isinstance(op, dict) else ""
                # kube (evanphx/json-patch) names the path only; jsonpatch's text holds Python type names
                raise _unprocessable(f"testing value {path} failed: test failed") from None
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as exc:
                raise _unprocessable(str(exc)) from None
        return doc
    if not isinstance(patch, dict):
        raise bad_request("the patch must be a JSON object")
    if patch_type == MERGE_PATCH:
        return merge_patch(original, patch)
    return strategic_merge_patch(original, patch)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


_DELETE: Final = object()  # a map asked to be deleted with $patch: delete


def strategic_merge_patch(original: Any, patch: dict[str, Any]) -> Any:
    """A strategic merge patch restricted to what ConfigMaps and Namespaces need (see module doc)."""
    merged = _merge_map(original, patch, ())
    return {} if merged is _DELETE else merged


def _merge_map(original: Any, patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip_directives(patch)
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive}")
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():  # deletions from primitive lists first
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [x for x in result[field] if x not in value]
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        if isinstance(value, dict):
            merged = _merge_map(result.get(key), value, sub)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and sub in _MERGE_LISTS:
            result[key] = _merge_list(result.get(key), value, _MERGE_LISTS[sub], sub)
        else:
            result[key] = _strip_directives(value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: Any, patch: list[Any], merge_key: str | None, path: tuple[str, ...]) -> list[Any]:
    current = list(original) if isinstance(original, list) else []
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip_directives(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if merge_key is None:
        return current + [p for p in patch if p not in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
        index = next((i for i, c in enumerate(current)
                      if isinstance(c, dict) and c.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
        elif index is None:
            current.append(_strip_directives(item))
        else:
            merged = _merge_map(current[index], item, path)
            current[index] = merged
    return current
