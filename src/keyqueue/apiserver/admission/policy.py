"""ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``): CEL validations of writes, bound to requests by
ValidatingAdmissionPolicyBindings, evaluated as kube-apiserver's validating admission does.

:func:`admit` runs after the object's own validation, before it is stored: for every binding whose policy exists,
the request must match the policy's ``matchConstraints`` (``resourceRules``, ``excludeResourceRules``,
``namespaceSelector``, ``objectSelector``) and the binding's ``matchResources``; then ``paramRef`` finds the params
object (by name, or the first that ``selector`` matches), ``matchConditions`` must all hold, ``variables`` are
bound, and each of ``validations`` must be true.  A false validation is a denial the binding's
``validationActions`` answer: ``Deny`` refuses the request with kube's message and status (``reason`` decides the
code: 401, 403, 422 or 413), ``Warn`` adds a ``Warning`` header, ``Audit`` does nothing here (there is no audit
log).  An expression that fails to evaluate follows the policy's ``failurePolicy`` (``Fail``, the default: a
denial; ``Ignore``: the validation is skipped).

The CEL variables are ``object``, ``oldObject`` (``null`` on create), ``request`` (kind, resource, name,
namespace, operation, ``userInfo``, ``dryRun``), ``params``, ``namespaceObject`` and ``variables``; ``authorizer``
is not provided (an expression using it does not compile).  They are untyped (``dyn``), unlike kube's, whose types
come from the OpenAPI schemas: a misspelt field is a runtime error here, a compile error there.

A policy or binding being written is checked first: every expression must compile (422 with kube's field paths).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

from celpy import celtypes
from celpy.evaluation import CELEvalError

from .. import errors
from ..cel import CelEvalError, CelSyntaxError, Program, to_cel
from ..cel.types import DYN, CelType
from ..errors import APIError
from ..objects.resources import (
    NAMESPACES,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    ResourceType,
)
from ..selectors import LabelSelector, parse_label_selector

__all__ = ["PolicyStore", "admit"]

_Cause = tuple[str, str, str]
_CODES: Final = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
_VARIABLES: Final = ("object", "oldObject", "request", "params", "namespaceObject", "variables")
_PREFIX: Final = "validatingadmissionpolic"  # both kinds' storage names start with it


class PolicyStore(Protocol):
    """What :func:`admit` reads: the registry's backend and key layout, its served types and its objects."""

    prefix: str

    @property
    def backend(self) -> Any: ...

    @property
    def catalogue(self) -> Any: ...

    def decode(self, kv: Any, rv: int | None = None, rt: ResourceType | None = None) -> dict[str, Any]: ...

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]: ...

    def _backend_call(self, fn: Any, *args: Any) -> Any: ...


def _decls() -> dict[str, CelType]:
    return dict.fromkeys(_VARIABLES, DYN)


def _compile(text: Any, where: str, causes: list[_Cause]) -> Program | None:
    if not isinstance(text, str) or not text.strip():
        causes.append(("FieldValueRequired", where, "Required value"))
        return None
    try:
        return Program(text, _decls())
    except CelSyntaxError as exc:
        causes.append(("FieldValueInvalid", where, f"Invalid value: {json.dumps(text)}: compilation failed: {exc}"))
        return None


def _policy_causes(rt: ResourceType, obj: Mapping[str, Any]) -> list[_Cause]:
    """kube's checks of a policy's or binding's spec that matter here: expressions compile, names are set,
    actions and reasons are known."""
    spec = obj.get("spec") or {}
    causes: list[_Cause] = []
    if rt is VALIDATING_ADMISSION_POLICY_BINDINGS:
        if not spec.get("policyName"):
            causes.append(("FieldValueRequired", "spec.policyName", "Required value"))
        actions = spec.get("validationActions") or []
        if not actions:
            causes.append(("FieldValueRequired", "spec.validationActions", "Required value: at least one validation "
                           "action is required"))
        for i, action in enumerate(actions):
            if action not in ("Deny", "Warn", "Audit"):
                causes.append(("FieldValueNotSupported", f"spec.validationActions[{i}]", f"Unsupported value: "
                               f"{json.dumps(action)}: supported values: \"Audit\", \"Deny\", \"Warn\""))
        if "Deny" in actions and "Warn" in actions:
            causes.append(("FieldValueInvalid", "spec.validationActions", 'Invalid value: []string{"Deny", "Warn"}: '
                           "must not contain both Deny and Warn (repeating the same validation failure information "
                           "in the API response and headers serves no purpose)"))
        return causes
    validations = spec.get("validations") or []
    for i, v in enumerate(validations):
        _compile(v.get("expression") if isinstance(v, Mapping) else None, f"spec.validations[{i}].expression",
                 causes)
        if isinstance(v, Mapping) and v.get("messageExpression"):
            _compile(v["messageExpression"], f"spec.validations[{i}].messageExpression", causes)
        reason = v.get("reason") if isinstance(v, Mapping) else None
        if reason is not None and reason not in _CODES:
            causes.append(("FieldValueNotSupported", f"spec.validations[{i}].reason", f"Unsupported value: "
                           f"{json.dumps(reason)}: supported values: \"Forbidden\", \"Invalid\", "
                           "\"RequestEntityTooLarge\", \"Unauthorized\""))
    for i, c in enumerate(spec.get("matchConditions") or []):
        _compile(c.get("expression") if isinstance(c, Mapping) else None, f"spec.matchConditions[{i}].expression",
                 causes)
    for i, v in enumerate(spec.get("variables") or []):
        _compile(v.get("expression") if isinstance(v, Mapping) else None, f"spec.variables[{i}].expression", causes)
    if not validations and not spec.get("auditAnnotations"):
        causes.append(("FieldValueRequired", "spec.validations", "Required value: validations or auditAnnotations "
                       "must contain at least one item"))
    policy = spec.get("failurePolicy", "Fail")
    if policy not in ("Fail", "Ignore"):
        causes.append(("FieldValueNotSupported", "spec.failurePolicy", f"Unsupported value: {json.dumps(policy)}: "
                       'supported values: "Fail", "Ignore"'))
    return causes


def _matches_list(values: Any, value: str) -> bool:
    values = values or []
    return "*" in values or value in values


def _rule_matches(rule: Mapping[str, Any], rt: ResourceType, operation: str, subresource: str, name: str) -> bool:
    if not _matches_list(rule.get("operations"), operation):
        return False
    if not _matches_list(rule.get("apiGroups"), rt.group) or not _matches_list(rule.get("apiVersions"), rt.version):
        return False
    resource = f"{rt.name}/{subresource}" if subresource else rt.name
    resources = rule.get("resources") or []
    if not any(r == "*/*" or r == resource or (r == "*" and not subresource)
               or (subresource and r == f"{rt.name}/*") or (subresource and r == f"*/{subresource}")
               for r in resources):
        return False
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and rt.namespaced) or (scope == "Namespaced" and not rt.namespaced):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


def _selector(value: Any) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` (``matchLabels``/``matchExpressions``) as a :class:`LabelSelector`; None if it
    selects everything."""
    if not isinstance(value, Mapping) or not (value.get("matchLabels") or value.get("matchExpressions")):
        return None
    parts = [f"{k}={v}" for k, v in (value.get("matchLabels") or {}).items()]
    for expr in value.get("matchExpressions") or []:
        op, key, vals = expr.get("operator"), expr.get("key", ""), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(vals)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(vals)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return parse_label_selector(",".join(parts))


class _Request:
    def __init__(self, store: PolicyStore, rt: ResourceType, operation: str, obj: Mapping[str, Any] | None,
                 old: Mapping[str, Any] | None, namespace: str | None, subresource: str, dry_run: bool) -> None:
        self.store, self.rt, self.operation = store, rt, operation
        self.obj, self.old, self.namespace, self.subresource = obj, old, namespace, subresource
        self.dry_run = dry_run
        meta = (obj or old or {}).get("metadata") or {}
        self.name = str(meta.get("name", ""))
        self._namespace_obj: dict[str, Any] | bool | None = False

    def namespace_object(self) -> dict[str, Any] | None:
        if self._namespace_obj is False:
            found: dict[str, Any] | None = None
            if self.rt.namespaced and self.namespace:
                try:
                    found = self.store.get(NAMESPACES, None, self.namespace)
                except APIError:
                    found = None
            self._namespace_obj = found
        return self._namespace_obj if isinstance(self._namespace_obj, dict) else None

    def matches(self, constraints: Mapping[str, Any] | None) -> bool:
        """``matchConstraints``/``matchResources``: resource rules, exclusions, namespace and object selectors."""
        if not constraints:
            return True
        rules = constraints.get("resourceRules")
        if rules is not None and not any(_rule_matches(r, self.rt, self.operation, self.subresource, self.name)
                                         for r in rules):
            return False
        if any(_rule_matches(r, self.rt, self.operation, self.subresource, self.name)
               for r in constraints.get("excludeResourceRules") or []):
            return False
        ns_selector = _selector(constraints.get("namespaceSelector"))
        if ns_selector is not None:
            if self.rt is NAMESPACES:
                labels = ((self.obj or self.old or {}).get("metadata") or {}).get("labels")
            elif self.rt.namespaced:
                labels = ((self.namespace_object() or {}).get("metadata") or {}).get("labels")
            else:
                labels = None
            if (self.rt.namespaced or self.rt is NAMESPACES) and not ns_selector.matches(labels or {}):
                return False
        obj_selector = _selector(constraints.get("objectSelector"))
        if obj_selector is not None:
            candidates = [((o.get("metadata") or {}).get("labels") or {}) for o in (self.obj, self.old)
                          if o is not None]
            if not any(obj_selector.matches(labels) for labels in candidates):
                return False
        return True

    def cel_request(self) -> dict[str, Any]:
        rt = self.rt
        return {
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.name},
            "subResource": self.subresource,
            "requestKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.name},
            "name": self.name, "namespace": self.namespace or "", "operation": self.operation,
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "dryRun": self.dry_run,
        }


class _Denied(Exception):
    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def _evaluate(text: str, activation: dict[str, Any]) -> Any:
    try:
        program = Program(text, _decls())
    except CelSyntaxError as exc:
        raise CelEvalError(f"compilation failed: {exc}") from None
    return program.evaluate(activation)


def _params(store: PolicyStore, policy: Mapping[str, Any], binding: Mapping[str, Any], req: _Request) -> Any:
    """The params object of ``binding`` for ``policy`` (None without ``paramKind``).  Raises :class:`_Denied`."""
    kind = (policy.get("spec") or {}).get("paramKind")
    if not isinstance(kind, Mapping) or not kind:
        return None
    ref = (binding.get("spec") or {}).get("paramRef") or {}
    action = ref.get("parameterNotFoundAction", "Deny")
    rt = next((t for t in (store.catalogue.served().get(kind.get("apiVersion", "")) or {}).values()
               if t.kind == kind.get("kind")), None)
    if rt is None:
        raise _Denied(f"failed to configure binding: paramKind {kind.get('apiVersion')}/{kind.get('kind')} is not "
                      "served")
    namespace = ref.get("namespace") or (req.namespace if rt.namespaced else None)
    found: list[dict[str, Any]] = []
    if ref.get("name"):
        try:
            found = [store.get(rt, namespace, ref["name"])]
        except APIError:
            found = []
    else:
        selector = _selector(ref.get("selector"))
        prefix = f"{store.prefix}/{rt.storage_name}/" + (f"{namespace}/" if rt.namespaced and namespace else "")
        kvs, _ = store._backend_call(store.backend.range, prefix)
        for kv in kvs:
            item = store.decode(kv, rt=rt)
            labels = (item.get("metadata") or {}).get("labels") or {}
            if selector is None or selector.matches(labels):
                found.append(item)
    if not found:
        if action == "Allow":
            return _SKIP
        raise _Denied("failed to configure binding: no params found for policy binding with `Deny` "
                      "parameterNotFoundAction")
    return found


_SKIP: Final = object()


def _check(policy: Mapping[str, Any], binding: Mapping[str, Any], req: _Request, params: Any
           ) -> list[tuple[str, str]]:
    """The failed validations of ``policy`` for ``req`` with ``params`` as ``(message, reason)``; raises
    :class:`_Denied` for an error under ``failurePolicy: Fail``."""
    spec = policy.get("spec") or {}
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    activation: dict[str, Any] = {
        "object": to_cel(req.obj, None), "oldObject": to_cel(req.old, None),
        "request": to_cel(req.cel_request(), None), "params": to_cel(params, None),
        "namespaceObject": to_cel(req.namespace_object(), None),
    }
    variables: dict[Any, Any] = {}
    activation["variables"] = celtypes.MapType(variables)
    for v in spec.get("variables") or []:
        try:
            value = _evaluate(str(v.get("expression", "")), activation)
        except CelEvalError as exc:
            value = CELEvalError(str(exc))  # an error value: a failure only where the variable is used
        variables[celtypes.StringType(str(v.get("name", "")))] = value
        activation["variables"] = celtypes.MapType(variables)
    for condition in spec.get("matchConditions") or []:
        try:
            result = _evaluate(str(condition.get("expression", "")), activation)
        except CelEvalError as exc:
            if fail:
                raise _Denied(f"failed to evaluate matchCondition {json.dumps(condition.get('name', ''))}: "
                              f"{exc}") from None
            return []
        if not (isinstance(result, bool | celtypes.BoolType) and bool(result)):
            return []
    failed: list[tuple[str, str]] = []
    for validation in spec.get("validations") or []:
        expression = str(validation.get("expression", ""))
        try:
            result = _evaluate(expression, activation)
        except CelEvalError as exc:
            if fail:
                failed.append((f"expression '{expression}' resulted in error: {exc}", ""))
            continue
        if isinstance(result, bool | celtypes.BoolType) and bool(result):
            continue
        if not isinstance(result, bool | celtypes.BoolType):
            if fail:
                failed.append((f"expression '{expression}' resulted in error: expected a bool, got "
                               f"{type(result).__name__}", ""))
            continue
        message = str(validation.get("message") or "").strip() or f"failed expression: {expression.strip()}"
        if validation.get("messageExpression"):
            try:
                out = _evaluate(str(validation["messageExpression"]), activation)
            except CelEvalError:
                out = None
            if isinstance(out, str) and out.strip() and "\n" not in out.strip():
                message = out.strip()
        failed.append((message, str(validation.get("reason") or "")))
    return failed


def admit(store: PolicyStore, rt: ResourceType, operation: str, obj: Mapping[str, Any] | None,
          old: Mapping[str, Any] | None, namespace: str | None, warnings: list[str], *, subresource: str = "",
          dry_run: bool = False) -> None:
    """Validating admission by ValidatingAdmissionPolicies for a ``CREATE``/``UPDATE``/``DELETE`` of ``obj``
    (``None`` for a delete; ``old``: the stored object) of type ``rt``.  A policy or binding being written is
    checked first (422).  Raises the first ``Deny`` denial as kube does (403/422/401/413 with
    ``ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request: <message>``); ``Warn`` denials are
    appended to ``warnings``.  Blocks on backend reads only."""
    name = str(((obj or old or {}).get("metadata") or {}).get("name", ""))
    if rt in (VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS) and obj is not None:
        causes = _policy_causes(rt, obj)
        if causes:
            raise errors.invalid(f"{rt.kind}.{rt.group}", rt.qualified_name, name, causes)
    kvs, _ = store._backend_call(store.backend.range, f"{store.prefix}/{_PREFIX}")
    if not kvs:
        return
    policies: dict[str, dict[str, Any]] = {}
    bindings: list[dict[str, Any]] = []
    for kv in kvs:
        item = json.loads(kv.value)
        if item.get("kind") == "ValidatingAdmissionPolicy":
            policies[(item.get("metadata") or {}).get("name", "")] = item
        elif item.get("kind") == "ValidatingAdmissionPolicyBinding":
            bindings.append(item)
    req = _Request(store, rt, operation, obj, old, namespace, subresource, dry_run)
    for binding in sorted(bindings, key=lambda b: (b.get("metadata") or {}).get("name", "")):
        bspec = binding.get("spec") or {}
        policy = policies.get(bspec.get("policyName", ""))
        if policy is None:
            continue
        pname = policy["metadata"]["name"]
        bname = binding["metadata"]["name"]
        actions = bspec.get("validationActions") or []
        if not req.matches((policy.get("spec") or {}).get("matchConstraints")) or \
                not req.matches(bspec.get("matchResources")):
            continue
        try:
            params = _params(store, policy, binding, req)
            if params is _SKIP:
                continue
            failures: list[tuple[str, str]] = []
            for p in params if isinstance(params, list) else [params]:
                failures.extend(_check(policy, binding, req, p))
        except _Denied as denied:
            failures = [(denied.message, denied.reason)]
        except (TypeError, AttributeError, ValueError, KeyError) as exc:  # a policy this code cannot read
            if (policy.get("spec") or {}).get("failurePolicy", "Fail") == "Ignore":
                continue
            failures = [(f"failed to evaluate the policy: {exc}", "")]
        for message, reason in failures:
            warning = (f"Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': "
                       f"{message}")
            if "Warn" in actions and warning not in warnings:
                warnings.append(warning)
            if "Deny" in actions:
                _deny(rt, req.name, pname, bname, message, reason)

def _deny(rt: ResourceType, name: str, policy: str, binding: str, message: str, reason: str) -> None:
    text = f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
    reason = reason or "Invalid"
    details: dict[str, Any] = {"name": name, "kind": rt.name, "causes": [{"message": text}]}
    if rt.group:
        details["group"] = rt.group
    raise APIError(_CODES.get(reason, 422), reason, f'{rt.qualified_name} "{name}" is forbidden: {text}', details)
