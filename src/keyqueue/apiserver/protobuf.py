"""A small decoder for the Kubernetes protobuf encoding of the objects kubectl creates from the command line.

``kubectl create configmap``, ``kubectl create namespace``, ``kubectl auth can-i|whoami`` and ``kubectl create
deployment|service|secret|serviceaccount|job|cronjob|role|clusterrole|rolebinding|clusterrolebinding|pdb|ingress``
send their bodies
as ``application/vnd.kubernetes.protobuf``: the 4-byte magic ``k8s\\x00``
followed by a ``runtime.Unknown`` message (field 1 ``typeMeta``, field 2 the raw
object).  This module turns such a body into the equivalent JSON dict, which
then goes through the same decoding and validation as a JSON body.

gogo-protobuf writes empty strings, zero integers and zero timestamps
explicitly; they are skipped here so that they read as "unset", as they would in
JSON (otherwise an empty ``metadata.namespace`` would look like a mismatch and a
``generation: 0`` would appear).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Final

from .errors import bad_request

__all__ = ["PROTOBUF", "decode_object"]

PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
_MAGIC: Final = b"k8s\x00"


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise _Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """Yield ``(field number, value)``: an int for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise _Malformed("truncated field")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")


def _int64(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise _Malformed("expected a varint")
    return value - (1 << 64) if value >= 1 << 63 else value


def _str(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _Malformed("expected a string")
    return value.decode()


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise _Malformed("expected bytes")
    return value


def _map_entry(value: int | bytes, as_bytes: bool = False) -> tuple[str, Any]:
    key, item = "", b"" if as_bytes else ""
    for number, v in _fields(_bytes(value)):
        if number == 1:
            key = _str(v)
        elif number == 2:
            item = _bytes(v) if as_bytes else _str(v)
    return key, item


def _time(value: int | bytes) -> str | None:
    seconds = 0
    for number, v in _fields(_bytes(value)):
        if number == 1:
            seconds = _int64(v)
    if seconds == 0:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_reference(value: int | bytes) -> dict[str, Any]:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    out: dict[str, Any] = {}
    for number, v in _fields(_bytes(value)):
        if number in names and (s := _str(v)):
            out[names[number]] = s
        elif number == 6:
            out["controller"] = bool(v)
        elif number == 7:
            out["blockOwnerDeletion"] = bool(v)
    return out


_META_STRINGS: Final = {1: "name", 2: "generateName", 3: "namespace", 4: "selfLink", 5: "uid", 6: "resourceVersion"}


def _object_meta(value: int | bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, v in _fields(_bytes(value)):
        if number in _META_STRINGS:
            if s := _str(v):
                out[_META_STRINGS[number]] = s
        elif number in (7, 10):
            if n := _int64(v):
                out["generation" if number == 7 else "deletionGracePeriodSeconds"] = n
        elif number in (8, 9):
            if t := _time(v):
                out["creationTimestamp" if number == 8 else "deletionTimestamp"] = t
        elif number in (11, 12):
            k, item = _map_entry(v)
            out.setdefault("labels" if number == 11 else "annotations", {})[k] = item
        elif number == 13:
            out.setdefault("ownerReferences", []).append(_owner_reference(v))
        elif number == 14:
            out.setdefault("finalizers", []).append(_str(v))
        # 17 managedFields: skipped (the registry drops a client's managedFields and writes its own)
    return out


def _configmap(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1"}
    for number, v in _fields(raw):
        if number == 1:
            out["metadata"] = _object_meta(v)
        elif number == 2:
            k, item = _map_entry(v)
            out.setdefault("data", {})[k] = item
        elif number == 3:
            k, blob = _map_entry(v, as_bytes=True)
            out.setdefault("binaryData", {})[k] = base64.b64encode(blob).decode()
        elif number == 4:
            out["immutable"] = bool(v)
    return out


def _namespace(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1"}
    for number, v in _fields(raw):
        if number == 1:
            out["metadata"] = _object_meta(v)
        elif number == 2:
            finalizers = [_str(f) for n, f in _fields(_bytes(v)) if n == 1]
            if finalizers:
                out["spec"] = {"finalizers": finalizers}
        elif number == 3:
            phase = next((_str(p) for n, p in _fields(_bytes(v)) if n == 1), "")
            if phase:
                out["status"] = {"phase": phase}
    return out


# Table-driven messages: field number -> (JSON name, "string" | "meta" | a nested layout).
_Layout = dict[int, tuple[str, Any]]
_SELECTOR_ATTRIBUTES: Final[_Layout] = {1: ("rawSelector", "string")}
_RESOURCE_ATTRIBUTES: Final[_Layout] = {
    1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"), 4: ("version", "string"),
    5: ("resource", "string"), 6: ("subresource", "string"), 7: ("name", "string"),
    8: ("fieldSelector", _SELECTOR_ATTRIBUTES), 9: ("labelSelector", _SELECTOR_ATTRIBUTES),
}
_ACCESS_REVIEW: Final[_Layout] = {
    1: ("metadata", "meta"),
    2: ("spec", {1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                 2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")})}),
}
_RULES_REVIEW: Final[_Layout] = {1: ("metadata", "meta"), 2: ("spec", {1: ("namespace", "string")})}
_SUBJECT_REVIEW: Final[_Layout] = {1: ("metadata", "meta")}


def _int_or_string(raw: bytes) -> int | str:
    """``intstr.IntOrString``: type 1 (0 int, 1 string), intVal 2, strVal 3."""
    kind, number, text = 0, 0, ""
    for n, v in _fields(raw):
        if n == 1:
            kind = _int64(v)
        elif n == 2:
            number = _int64(v)
        elif n == 3:
            text = _str(v)
    return text if kind == 1 else number


def _value(kind: Any, v: int | bytes) -> Any:
    """One field's value, or ``None`` for an empty one (gogo writes zero scalars of non-pointer fields; JSON's
    ``omitempty`` drops them, and so is done here)."""
    if kind == "string":
        return _str(v) or None
    if kind == "int":
        return _int64(v) or None
    if kind == "int0":  # a pointer field: an explicit 0 is a value
        return _int64(v)
    if kind == "bool":
        return bool(_int64(v)) or None
    if kind == "meta":
        return _object_meta(v)
    if kind == "intstr":
        return _int_or_string(_bytes(v))
    if kind == "quantity":  # resource.Quantity: its string (field 1)
        return next((_str(q) for n, q in _fields(_bytes(v)) if n == 1), "")
    if kind == "bytes":
        return base64.b64encode(_bytes(v)).decode()
    return _message(_bytes(v), kind)


def _message(raw: bytes, layout: _Layout) -> dict[str, Any]:
    """Decode a message of ``layout``; unknown fields (a review's status, ...) are skipped, empty values too.

    A layout maps field numbers to ``(JSON name, kind)``; a kind is ``"string"``, ``"int"``, ``"int0"``,
    ``"bool"``, ``"meta"``, ``"intstr"``, ``"quantity"``, ``"bytes"``, a nested layout, ``("list", kind)``,
    ``("map", kind)`` (entries key 1, value 2) or ``("inline", layout)`` (a Go embedded struct: its fields
    join the parent's in JSON)."""
    out: dict[str, Any] = {}
    for number, v in _fields(raw):
        if number not in layout:
            continue
        name, kind = layout[number]
        if isinstance(kind, tuple) and kind[0] == "list":
            item = _value(kind[1], v)
            out.setdefault(name, []).append("" if item is None else item)
        elif isinstance(kind, tuple) and kind[0] == "map":
            key, item = "", None
            for n, entry in _fields(_bytes(v)):
                if n == 1:
                    key = _str(entry)
                elif n == 2:
                    item = _value(kind[1], entry)
            out.setdefault(name, {})[key] = "" if item is None else item
        elif isinstance(kind, tuple) and kind[0] == "inline":
            out.update(_message(_bytes(v), kind[1]))
        elif (value := _value(kind, v)) is not None:
            out[name] = value
    return out


_STRINGS: Final = ("list", "string")
_LABEL_SELECTOR: Final[_Layout] = {
    1: ("matchLabels", ("map", "string")),
    2: ("matchExpressions", ("list", {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", _STRINGS)})),
}
_CONTAINER: Final[_Layout] = {
    1: ("name", "string"), 2: ("image", "string"), 3: ("command", _STRINGS), 4: ("args", _STRINGS),
    5: ("workingDir", "string"),
    6: ("ports", ("list", {1: ("name", "string"), 2: ("hostPort", "int"), 3: ("containerPort", "int"),
                           4: ("protocol", "string"), 5: ("hostIP", "string")})),
    7: ("env", ("list", {1: ("name", "string"), 2: ("value", "string")})),
    8: ("resources", {1: ("limits", ("map", "quantity")), 2: ("requests", ("map", "quantity"))}),
    13: ("terminationMessagePath", "string"), 14: ("imagePullPolicy", "string"), 16: ("stdin", "bool"),
    17: ("stdinOnce", "bool"), 18: ("tty", "bool"), 20: ("terminationMessagePolicy", "string"),
}
_POD_TEMPLATE: Final[_Layout] = {1: ("metadata", "meta"), 2: ("spec", {
    2: ("containers", ("list", _CONTAINER)), 3: ("restartPolicy", "string"),
    4: ("terminationGracePeriodSeconds", "int0"), 6: ("dnsPolicy", "string"),
    7: ("nodeSelector", ("map", "string")), 8: ("serviceAccountName", "string"), 10: ("nodeName", "string"),
    19: ("schedulerName", "string"), 20: ("initContainers", ("list", _CONTAINER)),
})}
_JOB_SPEC: Final[_Layout] = {
    1: ("parallelism", "int0"), 2: ("completions", "int0"), 3: ("activeDeadlineSeconds", "int0"),
    4: ("selector", _LABEL_SELECTOR), 5: ("manualSelector", "bool"), 6: ("template", _POD_TEMPLATE),
    7: ("backoffLimit", "int0"), 8: ("ttlSecondsAfterFinished", "int0"), 9: ("completionMode", "string"),
    10: ("suspend", "bool"),
}
_SUBJECT: Final[_Layout] = {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                            4: ("namespace", "string")}
_ROLE_REF: Final[_Layout] = {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}
_RULES: Final = ("list", {1: ("verbs", _STRINGS), 2: ("apiGroups", _STRINGS), 3: ("resources", _STRINGS),
                          4: ("resourceNames", _STRINGS), 5: ("nonResourceURLs", _STRINGS)})
_INGRESS_BACKEND: Final[_Layout] = {4: ("service", {1: ("name", "string"),
                                                    2: ("port", {1: ("name", "string"), 2: ("number", "int")})})}
#: The kinds ``kubectl create <kind>`` builds (field numbers of k8s.io/api's ``generated.proto``): the fields
#: those commands set, not every field of the type.
_KIND_LAYOUTS: Final[dict[tuple[str, str], _Layout]] = {
    ("apps/v1", "Deployment"): {1: ("metadata", "meta"), 2: ("spec", {
        1: ("replicas", "int0"), 2: ("selector", _LABEL_SELECTOR), 3: ("template", _POD_TEMPLATE),
        4: ("strategy", {1: ("type", "string"),
                         2: ("rollingUpdate", {1: ("maxUnavailable", "intstr"), 2: ("maxSurge", "intstr")})}),
        5: ("minReadySeconds", "int"), 6: ("revisionHistoryLimit", "int0"), 9: ("progressDeadlineSeconds", "int0"),
    })},
    ("v1", "Service"): {1: ("metadata", "meta"), 2: ("spec", {
        1: ("ports", ("list", {1: ("name", "string"), 2: ("protocol", "string"), 3: ("port", "int"),
                               4: ("targetPort", "intstr"), 5: ("nodePort", "int")})),
        2: ("selector", ("map", "string")), 3: ("clusterIP", "string"), 4: ("type", "string"),
        7: ("sessionAffinity", "string"), 10: ("externalName", "string"), 18: ("clusterIPs", _STRINGS),
    })},
    ("v1", "Secret"): {1: ("metadata", "meta"), 2: ("data", ("map", "bytes")), 3: ("type", "string"),
                       4: ("stringData", ("map", "string")), 5: ("immutable", "bool")},
    ("v1", "ServiceAccount"): {1: ("metadata", "meta"), 2: ("secrets", ("list", {3: ("name", "string")})),
                               3: ("imagePullSecrets", ("list", {1: ("name", "string")}))},
    ("batch/v1", "Job"): {1: ("metadata", "meta"), 2: ("spec", _JOB_SPEC)},
    ("batch/v1", "CronJob"): {1: ("metadata", "meta"), 2: ("spec", {
        1: ("schedule", "string"), 2: ("startingDeadlineSeconds", "int0"), 3: ("concurrencyPolicy", "string"),
        4: ("suspend", "bool"), 5: ("jobTemplate", {1: ("metadata", "meta"), 2: ("spec", _JOB_SPEC)}),
        6: ("successfulJobsHistoryLimit", "int0"), 7: ("failedJobsHistoryLimit", "int0"), 8: ("timeZone", "string"),
    })},
    ("rbac.authorization.k8s.io/v1", "Role"): {1: ("metadata", "meta"), 2: ("rules", _RULES)},
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {1: ("metadata", "meta"), 2: ("rules", _RULES)},
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {
        1: ("metadata", "meta"), 2: ("subjects", ("list", _SUBJECT)), 3: ("roleRef", _ROLE_REF)},
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): {
        1: ("metadata", "meta"), 2: ("subjects", ("list", _SUBJECT)), 3: ("roleRef", _ROLE_REF)},
    ("policy/v1", "PodDisruptionBudget"): {1: ("metadata", "meta"), 2: ("spec", {
        1: ("minAvailable", "intstr"), 2: ("selector", _LABEL_SELECTOR), 3: ("maxUnavailable", "intstr"),
        4: ("unhealthyPodEvictionPolicy", "string")})},
    ("networking.k8s.io/v1", "Ingress"): {1: ("metadata", "meta"), 2: ("spec", {
        1: ("defaultBackend", _INGRESS_BACKEND),
        2: ("tls", ("list", {1: ("hosts", _STRINGS), 2: ("secretName", "string")})),
        3: ("rules", ("list", {1: ("host", "string"), 2: ("", ("inline", {1: ("http", {1: ("paths", ("list", {
            1: ("path", "string"), 2: ("backend", _INGRESS_BACKEND), 3: ("pathType", "string")}))})}))})),
        4: ("ingressClassName", "string"),
    })},
}


def _typed(api_version: str, kind: str, layout: _Layout) -> Callable[[bytes], dict[str, Any]]:
    def decode(raw: bytes) -> dict[str, Any]:
        return {"kind": kind, "apiVersion": api_version, **_message(raw, layout)}
    return decode


_DECODERS: Final[dict[tuple[str, str], Callable[[bytes], dict[str, Any]]]] = {
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Namespace"): _namespace,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"):
        _typed("authorization.k8s.io/v1", "SelfSubjectAccessReview", _ACCESS_REVIEW),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"):
        _typed("authorization.k8s.io/v1", "SelfSubjectRulesReview", _RULES_REVIEW),
    ("authentication.k8s.io/v1", "SelfSubjectReview"):
        _typed("authentication.k8s.io/v1", "SelfSubjectReview", _SUBJECT_REVIEW),
    **{key: _typed(key[0], key[1], layout) for key, layout in _KIND_LAYOUTS.items()},
}


def decode_object(body: bytes) -> dict[str, Any]:
    """Decode a ``k8s\\x00``-enveloped ConfigMap, Namespace, SelfSubjectAccessReview, SelfSubjectRulesReview,
    SelfSubjectReview or one of the kinds ``kubectl create <kind>`` sends (the fields it sets) into its JSON form.

    Raises a 400 :class:`~keyqueue.apiserver.errors.APIError` for a malformed
    body or another kind.
    """
    if not body.startswith(_MAGIC):
        raise bad_request("provided protobuf body does not start with the k8s magic prefix")
    try:
        api_version = kind = ""
        raw = b""
        for number, v in _fields(body[len(_MAGIC) :]):
            if number == 1:
                for n, tv in _fields(_bytes(v)):
                    if n == 1:
                        api_version = _str(tv)
                    elif n == 2:
                        kind = _str(tv)
            elif number == 2:
                raw = _bytes(v)
        decoder = _DECODERS.get((api_version or "v1", kind))
        if decoder is None:
            raise bad_request(f"protobuf bodies of kind {api_version}/{kind} are not supported by this server")
        return decoder(raw)
    except (_Malformed, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed protobuf body: {exc}") from None
