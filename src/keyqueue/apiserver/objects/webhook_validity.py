"""The 422 checks of the ``admissionregistration.k8s.io/v1`` webhook configurations (Validating- and
MutatingWebhookConfiguration), with kube-apiserver's field paths and messages (its
``ValidateValidatingWebhookConfiguration``/``ValidateMutatingWebhookConfiguration`` for v1).

Checked for each of ``webhooks[i]``: a unique, fully qualified ``name``; ``clientConfig`` with exactly one of ``url``
(``https``, a host, no user, query or fragment) and ``service`` (``namespace``, ``name``, a ``path`` starting with
``/``, a ``port`` in 1..65535), a ``caBundle`` that is base64; each rule's ``operations``, ``apiGroups``,
``apiVersions``, ``resources`` (required; ``*`` alone) and ``scope``; ``failurePolicy``, ``matchPolicy``,
``sideEffects`` (required: ``None`` or ``NoneOnDryRun``), ``timeoutSeconds`` (1..30), ``admissionReviewVersions``
(required, with ``v1`` or ``v1beta1``), ``reinvocationPolicy`` (mutating), the two label selectors, and
``matchConditions`` (at most 64, unique qualified names, an expression each that compiles:
:mod:`~keyqueue.apiserver.matchconditions`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from ..matchconditions import compile_error
from ..validation import qualified_name_causes
from .kind_validity import selector_causes
from .resources import MUTATING_WEBHOOK_CONFIGURATIONS, ResourceType

__all__ = ["webhook_configuration_causes"]

_Cause = tuple[str, str, str]
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_OPERATIONS: Final = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
_SCOPES: Final = ("*", "Cluster", "Namespaced")
_REVIEW_VERSIONS: Final = ("v1", "v1beta1")
MAX_MATCH_CONDITIONS: Final = 64


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> _Cause:
    listed = ", ".join(json.dumps(s) for s in supported)
    return ("FieldValueNotSupported", field, f"Unsupported value: {json.dumps(value)}: supported values: {listed}")


def _invalid(field: str, value: Any, message: str) -> _Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {json.dumps(value)}: {message}")


def _required(field: str, detail: str = "") -> _Cause:
    return ("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def _url_causes(at: str, url: str) -> list[_Cause]:
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        return [_invalid(at, url, f"url must be a valid URL: {exc}")]
    causes: list[_Cause] = []
    if parts.scheme != "https":
        causes.append(_invalid(at, url, "'https' is the only allowed URL scheme"))
    if not parts.hostname:
        causes.append(_invalid(at, url, "host must be specified"))
    if parts.username is not None or parts.password is not None:
        causes.append(_invalid(at, url, "user information is not permitted in the URL"))
    if parts.fragment or url.endswith("#"):
        causes.append(_invalid(at, url, "fragments are not permitted in the URL"))
    if parts.query or "?" in url:
        causes.append(_invalid(at, url, "query parameters are not permitted in the URL"))
    return causes


def _client_config_causes(at: str, config: Any) -> list[_Cause]:
    if not isinstance(config, Mapping):
        return [_required(at, "exactly one of url or service is required")]
    url, service = config.get("url"), config.get("service")
    causes: list[_Cause] = []
    if (url is None) == (service is None):
        causes.append(_required(at, "exactly one of url or service is required"))
    if isinstance(url, str):
        causes.extend(_url_causes(f"{at}.url", url))
    if isinstance(service, Mapping):
        for key in ("namespace", "name"):
            if not service.get(key):
                causes.append(_required(f"{at}.service.{key}", f"service {key} is required"))
        path = service.get("path")
        if path is not None and not str(path).startswith("/"):
            causes.append(_invalid(f"{at}.service.path", path, "must start with a '/'"))
        port = service.get("port")
        if isinstance(port, int) and not 1 <= port <= 65535:
            causes.append(_invalid(f"{at}.service.port", port,
                                   "port is not valid: must be between 1 and 65535, inclusive"))
    bundle = config.get("caBundle")
    if isinstance(bundle, str) and bundle:
        try:
            base64.b64decode(bundle, validate=True)
        except (binascii.Error, ValueError):
            causes.append(_invalid(f"{at}.caBundle", bundle[:32], "must be base64-encoded PEM data"))
    return causes


def _rule_causes(at: str, rule: Any) -> list[_Cause]:
    if not isinstance(rule, Mapping):
        return []
    causes: list[_Cause] = []
    operations = rule.get("operations") or []
    if not operations:
        causes.append(_required(f"{at}.operations"))
    if "*" in operations and len(operations) > 1:
        causes.append(_invalid(f"{at}.operations", operations, "if '*' is present, must not specify other operations"))
    for k, op in enumerate(operations):
        if op not in _OPERATIONS:
            causes.append(_unsupported(f"{at}.operations[{k}]", op, _OPERATIONS))
    for key in ("apiGroups", "apiVersions", "resources"):
        values = rule.get(key) or []
        if not values:
            causes.append(_required(f"{at}.{key}"))
        elif "*" in values and len(values) > 1:
            causes.append(_invalid(f"{at}.{key}", values, "if '*' is present, must not specify other "
                                   + {"apiGroups": "API groups", "apiVersions": "API versions",
                                      "resources": "resources"}[key]))
    for k, version in enumerate(rule.get("apiVersions") or ()):
        if not version:
            causes.append(_required(f"{at}.apiVersions[{k}]", "version must be non-empty"))
    for k, resource in enumerate(rule.get("resources") or ()):
        if not resource:
            causes.append(_required(f"{at}.resources[{k}]", "resource must be non-empty"))
    scope = rule.get("scope", "*")
    if scope not in _SCOPES:
        causes.append(_unsupported(f"{at}.scope", scope, _SCOPES))
    return causes


def _review_version_causes(at: str, versions: Any) -> list[_Cause]:
    if not versions:
        return [_required(at, "must specify one of v1, v1beta1")]
    causes: list[_Cause] = []
    seen: set[str] = set()
    for k, version in enumerate(versions):
        if version in seen:
            causes.append(_invalid(f"{at}[{k}]", version, "duplicate version"))
        seen.add(version)
        if not _DNS1035.fullmatch(str(version)) or len(str(version)) > 63:
            causes.append(_invalid(f"{at}[{k}]", version, "a DNS-1035 label must consist of lower case "
                                   "alphanumeric characters or '-', start with an alphabetic character, and end "
                                   "with an alphanumeric character"))
    if not seen & set(_REVIEW_VERSIONS):
        causes.append(_invalid(at, list(versions), "must include at least one of v1, v1beta1"))
    return causes


def _match_condition_causes(at: str, conditions: Any) -> list[_Cause]:
    conditions = conditions or []
    causes: list[_Cause] = []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.append(("FieldValueTooMany", at,
                       f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items"))
    names: set[str] = set()
    for k, condition in enumerate(conditions):
        if not isinstance(condition, Mapping):
            continue
        name, expression = str(condition.get("name") or ""), str(condition.get("expression") or "")
        if not name:
            causes.append(_required(f"{at}[{k}].name"))
        else:
            causes.extend(qualified_name_causes(f"{at}[{k}].name", name))
            if name in names:
                causes.append(("FieldValueDuplicate", f"{at}[{k}].name", f"Duplicate value: {json.dumps(name)}"))
            names.add(name)
        if not expression.strip():
            causes.append(_required(f"{at}[{k}].expression"))
        else:
            problem = compile_error(expression)
            if problem is not None:
                causes.append(_invalid(f"{at}[{k}].expression", expression, f"compilation failed: {problem}"))
    return causes


def _webhook_causes(at: str, hook: Mapping[str, Any], mutating: bool) -> list[_Cause]:
    causes: list[_Cause] = []
    name = str(hook.get("name") or "")
    if not name:
        causes.append(_required(f"{at}.name"))
    elif len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        causes.append(_invalid(f"{at}.name", name, "a lowercase RFC 1123 subdomain must consist of lower case "
                               "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                               "character (e.g. 'example.com', regex used for validation is "
                               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"))
    elif name.count(".") < 2:
        causes.append(_invalid(f"{at}.name", name, "should be a domain with at least three segments separated "
                               "by dots"))
    for j, rule in enumerate(hook.get("rules") or ()):
        causes.extend(_rule_causes(f"{at}.rules[{j}]", rule))
    for key, allowed in (("failurePolicy", ("Fail", "Ignore")), ("matchPolicy", ("Equivalent", "Exact"))):
        if key in hook and hook[key] not in allowed:
            causes.append(_unsupported(f"{at}.{key}", hook[key], allowed))
    if mutating and "reinvocationPolicy" in hook and hook["reinvocationPolicy"] not in ("Never", "IfNeeded"):
        causes.append(_unsupported(f"{at}.reinvocationPolicy", hook["reinvocationPolicy"], ("IfNeeded", "Never")))
    side_effects = hook.get("sideEffects")
    if side_effects is None:
        causes.append(_required(f"{at}.sideEffects"))
    elif side_effects not in ("None", "NoneOnDryRun"):
        causes.append(_unsupported(f"{at}.sideEffects", side_effects, ("None", "NoneOnDryRun")))
    timeout = hook.get("timeoutSeconds")
    if isinstance(timeout, int) and not 1 <= timeout <= 30:
        causes.append(("FieldValueInvalid", f"{at}.timeoutSeconds",
                       f"Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"))
    causes.extend(_review_version_causes(f"{at}.admissionReviewVersions", hook.get("admissionReviewVersions")))
    causes.extend(_client_config_causes(f"{at}.clientConfig", hook.get("clientConfig")))
    for key in ("namespaceSelector", "objectSelector"):
        causes.extend(selector_causes(f"{at}.{key}", hook.get(key)))
    causes.extend(_match_condition_causes(f"{at}.matchConditions", hook.get("matchConditions")))
    return causes


def webhook_configuration_causes(rt: ResourceType, obj: Mapping[str, Any]) -> list[_Cause]:
    """The 422 causes of a Validating- or MutatingWebhookConfiguration ``obj`` (decoded and defaulted, of ``rt``);
    ``[]`` if it is valid."""
    mutating = rt is MUTATING_WEBHOOK_CONFIGURATIONS
    causes: list[_Cause] = []
    names: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or ()):
        if not isinstance(hook, Mapping):
            continue
        causes.extend(_webhook_causes(f"webhooks[{i}]", hook, mutating))
        name = str(hook.get("name") or "")
        if name and name in names:
            causes.append(("FieldValueDuplicate", f"webhooks[{i}].name", f"Duplicate value: {json.dumps(name)}"))
        names.add(name)
    return causes
