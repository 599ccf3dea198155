"""The admission webhooks of one write, called as kube-apiserver calls them.

* Mutating webhooks, one after the other in kube's order (configurations by name, webhooks in their order): each
  that matches (:mod:`.matching`, then its ``matchConditions``) gets the object as the previous ones left it, and
  its ``JSONPatch`` is applied.  When a webhook changes the object, the webhooks called before it with
  ``reinvocationPolicy: IfNeeded`` are called once more after the first round (kube's reinvocation; a second
  round happens only once).
* Validating webhooks, all at once (one thread each), on the object as it will be stored; the first refusal in
  kube's order answers the request.

A webhook that refuses (``allowed: false``) answers with kube's ``Status``: the code from ``status.code`` (400 when
unset or below 400), ``admission webhook "<name>" denied the request: <message>`` (or ``<reason>``, or ``without
explanation``).  A webhook that cannot be called or answers nonsense (:class:`~.client.CallError`) is skipped under
``failurePolicy: Ignore`` and fails the request with 500 InternalError under ``Fail``, as kube does.  A dry run
reaches only webhooks whose ``sideEffects`` is ``None`` or ``NoneOnDryRun`` (any other is a 400, as in kube).
Warnings of every webhook called go to :attr:`~.request.Attributes.warnings`.

Nothing here holds a lock while a webhook is called.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import errors
from ..errors import APIError
from ..matchconditions import ConditionError, conditions_match
from ..patch import JSON_PATCH, apply_patch
from .client import CallError, ServiceResolver, call_webhook
from .configs import Hook
from .matching import matches_rules, matches_selectors
from .request import Attributes, review_request

__all__ = ["run_mutating", "run_validating"]

log = logging.getLogger("keyqueue.apiserver.admission")

#: Reads a namespace's labels (for ``namespaceSelector``).
NamespaceLabels = Callable[[str], Mapping[str, Any]]
#: Decodes a patched object into its type's shape (as the server decodes a request body).
Decode = Callable[[dict[str, Any]], dict[str, Any]]


def _should_call(hook: Hook, attrs: Attributes, namespace_labels: NamespaceLabels) -> bool:
    """Whether ``hook`` is called for ``attrs``; a ``matchConditions`` error is a :class:`CallError` (the webhook's
    ``failurePolicy`` decides)."""
    if not matches_rules(hook.spec, attrs) or not matches_selectors(hook.spec, attrs, namespace_labels):
        return False
    conditions = hook.spec.get("matchConditions") or ()
    if not conditions:
        return True
    try:
        return conditions_match(conditions, review_request(attrs)["request"])
    except ConditionError as exc:
        raise CallError(hook.name, f"failed to evaluate match conditions: {exc}") from None


def _invalid_response(hook: Hook, why: str) -> CallError:
    return CallError(hook.name, f"received invalid webhook response: {why}")


def _denial(hook: Hook, status: Any) -> APIError:
    """kube's ``ToStatusErr`` of a webhook's refusal."""
    status = status if isinstance(status, Mapping) else {}
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 400
    code = min(code, 599)
    denied = f"admission webhook {json.dumps(hook.name)} denied the request"
    message, reason = str(status.get("message") or ""), str(status.get("reason") or "")
    text = f"{denied}: {message}" if message else f"{denied}: {reason}" if reason else f"{denied} without explanation"
    details = status.get("details")
    return APIError(code, reason, text, dict(details) if isinstance(details, Mapping) else None)


def _call(hook: Hook, attrs: Attributes, resolve: ServiceResolver, mutating: bool) -> dict[str, Any]:
    """Call ``hook`` about ``attrs``; return its checked ``response``.  Raises the denial :class:`APIError`, a 400
    for a dry run the webhook cannot take, or :class:`CallError`."""
    spec = hook.spec
    if attrs.dry_run and spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
        raise errors.bad_request(f"admission webhook {json.dumps(hook.name)} does not support dry run")
    versions = spec.get("admissionReviewVersions") or ["v1"]
    version = "v1" if "v1" in versions else "v1beta1"
    review = review_request(attrs, version)
    answer = call_webhook(spec, review, resolve)
    expected = f"admission.k8s.io/{version}"
    if answer.get("apiVersion") != expected or answer.get("kind") != "AdmissionReview":
        raise _invalid_response(hook, f"expected webhook response of {expected}, Kind=AdmissionReview, got "
                                      f"{answer.get('apiVersion', '')}, Kind={answer.get('kind', '')}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise _invalid_response(hook, "webhook response was absent")
    uid = review["request"]["uid"]
    if response.get("uid") != uid:
        raise _invalid_response(hook, f"expected response.uid={json.dumps(uid)}, got "
                                      f"{json.dumps(str(response.get('uid') or ''))}")
    if not isinstance(response.get("allowed", False), bool):
        raise CallError(hook.name, "failed to call webhook: json: cannot unmarshal response.allowed into Go value "
                                   "of type bool")
    warnings = response.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise CallError(hook.name, "failed to call webhook: json: cannot unmarshal response.warnings into Go value "
                                   "of type []string")
    patch, patch_type = response.get("patch"), response.get("patchType")
    if mutating:
        if patch and not patch_type:
            raise _invalid_response(hook, "webhook returned response.patch but not response.patchType")
        if patch_type and not patch:
            raise _invalid_response(hook, "webhook returned response.patchType but not response.patch")
    else:
        if patch:
            raise _invalid_response(hook, "validating webhook may not return response.patch")
        if patch_type:
            raise _invalid_response(hook, "validating webhook may not return response.patchType")
    if not response.get("allowed"):
        raise _denial(hook, response.get("status"))
    return response


def _patched(hook: Hook, attrs: Attributes, response: Mapping[str, Any], decode: Decode) -> dict[str, Any] | None:
    """The object with the JSON patch of ``response`` applied and decoded; ``None`` if there is no patch."""
    patch, patch_type = response.get("patch"), response.get("patchType")
    if not patch:
        return None
    if patch_type != "JSONPatch":
        raise CallError(hook.name, f"unsupported patch type {json.dumps(str(patch_type))}")
    try:
        ops = json.loads(base64.b64decode(str(patch), validate=True))
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise CallError(hook.name, f"received undecodable patch in webhook response: {exc}") from None
    if not isinstance(ops, list):
        raise CallError(hook.name, "received undecodable patch in webhook response: json: cannot unmarshal "
                                   f"{type(ops).__name__} into Go value of type jsonpatch.Patch")
    if not ops:
        return None
    if attrs.obj is None:
        raise errors.internal_error(f"admission webhook {json.dumps(hook.name)} attempted to modify the object, "
                                    "which is not supported for this operation")
    try:
        return decode(apply_patch(JSON_PATCH, attrs.obj, ops))
    except APIError as exc:  # kube: a patch that does not apply, or gives an undecodable object, is a 500
        raise errors.internal_error(exc.message) from None


def _fail(hook: Hook, exc: CallError) -> APIError | None:
    """The webhook's ``failurePolicy`` on a failed call: ``None`` to go on (``Ignore``), else kube's 500."""
    if hook.spec.get("failurePolicy") == "Ignore":
        log.warning("Failed calling webhook, failing open %s: %s", hook.name, exc)
        return None
    log.warning("Failed calling webhook, failing closed %s: %s", hook.name, exc)
    return errors.internal_error(str(exc))


def _mutate_one(hook: Hook, attrs: Attributes, resolve: ServiceResolver, decode: Decode) -> bool:
    """Call one mutating webhook; apply its patch to ``attrs.obj``.  Returns whether the object changed."""
    try:
        response = _call(hook, attrs, resolve, mutating=True)
        attrs.warnings.extend(response.get("warnings") or ())
        new = _patched(hook, attrs, response, decode)
    except CallError as exc:
        failure = _fail(hook, exc)
        if failure is not None:
            raise failure from None
        return False
    if new is None or new == attrs.obj:
        return False
    attrs.obj = new
    return True


def run_mutating(hooks: Sequence[Hook], attrs: Attributes, namespace_labels: NamespaceLabels,
                 resolve: ServiceResolver, decode: Decode) -> None:
    """Call the mutating ``hooks`` that match ``attrs`` in order (see the module docstring); ``attrs.obj`` ends as
    they left it.  Raises :class:`APIError` for a refusal or a failure under ``failurePolicy: Fail``.  Blocks on
    each webhook for at most its ``timeoutSeconds``."""
    invoked: list[str] = []  # webhooks called so far that may be called again
    again: set[str] = set()
    for hook in hooks:
        if not _checked_should_call(hook, attrs, namespace_labels):
            continue
        if _mutate_one(hook, attrs, resolve, decode):
            again.update(invoked)
        if hook.spec.get("reinvocationPolicy") == "IfNeeded":
            invoked.append(hook.uid)
    if not again:
        return
    for hook in hooks:
        if hook.uid in again and _checked_should_call(hook, attrs, namespace_labels):
            _mutate_one(hook, attrs, resolve, decode)


def _checked_should_call(hook: Hook, attrs: Attributes, namespace_labels: NamespaceLabels) -> bool:
    try:
        return _should_call(hook, attrs, namespace_labels)
    except CallError as exc:
        failure = _fail(hook, exc)
        if failure is not None:
            raise failure from None
        return False


def run_validating(hooks: Sequence[Hook], attrs: Attributes, namespace_labels: NamespaceLabels,
                   resolve: ServiceResolver) -> None:
    """Call the validating ``hooks`` that match ``attrs``, all at once (see the module docstring).  Raises the
    first refusal or failure (under ``failurePolicy: Fail``) in kube's order.  Blocks until every call ended (each
    at most its ``timeoutSeconds``)."""
    relevant = [hook for hook in hooks if _checked_should_call(hook, attrs, namespace_labels)]
    if not relevant:
        return
    outcomes: list[APIError | list[str] | None] = [None] * len(relevant)

    def run(i: int) -> None:
        hook = relevant[i]
        try:
            outcomes[i] = list(_call(hook, attrs, resolve, mutating=False).get("warnings") or ())
        except CallError as exc:
            outcomes[i] = _fail(hook, exc)
        except APIError as exc:
            outcomes[i] = exc
        except Exception as exc:  # a bug here must not leave the request without an answer
            log.exception("admission: calling webhook %s", hook.name)
            outcomes[i] = errors.internal_error(f"failed calling webhook {json.dumps(hook.name)}: {exc!r}")

    threads = [threading.Thread(target=run, args=(i,), name="apiserver-webhook", daemon=True)
               for i in range(1, len(relevant))]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, list):
            attrs.warnings.extend(outcome)
    for outcome in outcomes:
        if isinstance(outcome, APIError):
            raise outcome
