"""Unit tests: selectors, patches, the protobuf decoder, validation and formatting."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue.apiserver.errors import APIError
from keyqueue.apiserver.objects import CONFIGMAPS, NAMESPACES, age, canonical, decode_typed, validate
from keyqueue.apiserver.patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, apply_patch
from keyqueue.apiserver.protobuf import decode_object
from keyqueue.apiserver.selectors import parse_field_selector, parse_label_selector

from .pb import encode_configmap, field


def test_protobuf_configmap_decodes_and_skips_zero_values() -> None:
    body = encode_configmap("demo", data={"a": "1", "b": ""}, labels={"x": "y"}, binary={"bin": b"\x00\xff"})
    obj = decode_object(body)
    assert obj == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "demo", "labels": {"x": "y"}},
        "data": {"a": "1", "b": ""},
        "binaryData": {"bin": "AP8="},
    }


def test_protobuf_namespace() -> None:
    meta = field(1, field(1, "team-a") + field(3, ""))
    body = b"k8s\x00" + field(1, field(1, "v1") + field(2, "Namespace")) + field(2, meta + field(2, b""))
    assert decode_object(body) == {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "team-a"}}


@pytest.mark.parametrize("body", [b"nope", b"k8s\x00\x0a\xff", b"k8s\x00" + field(1, field(2, "Node"))])
def test_protobuf_rejects_bad_bodies(body: bytes) -> None:
    with pytest.raises(APIError) as info:
        decode_object(body)
    assert info.value.code == 400


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a!=1", {"a": "1"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("a in (1, 2),b", {"a": "2", "b": "x"}, True),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {}, True),
        ("a>5", {"a": "7"}, True),
        ("a<5", {"a": "7"}, False),
        ("a=", {"a": ""}, True),
        (" a = 1 , b != 2 ", {"a": "1", "b": "3"}, True),
        ("app.kubernetes.io/name=x", {"app.kubernetes.io/name": "x"}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize("selector", ["a in (1", "=1", "a b", "a>x", "a,,b", "a=1 b=2"])
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(APIError) as info:
        parse_label_selector(selector)
    assert info.value.code == 400


def test_field_selector() -> None:
    fields = frozenset({"metadata.name", "metadata.namespace"})
    sel = parse_field_selector("metadata.name=a,metadata.namespace!=kube-system", fields)
    assert sel.matches({"metadata.name": "a", "metadata.namespace": "default"})
    assert not sel.matches({"metadata.name": "a", "metadata.namespace": "kube-system"})
    assert sel.value_of("metadata.name") == "a"
    with pytest.raises(APIError):
        parse_field_selector("spec.x=1", fields)


# --------------------------------------------------------------------------- patches

BASE: dict[str, Any] = {
    "metadata": {"name": "x", "labels": {"a": "1", "b": "2"}, "finalizers": ["f1"],
                 "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "K", "apiVersion": "v1"}]},
    "data": {"k": "v", "other": "o"},
}


def test_merge_patch_rfc7386() -> None:
    out = apply_patch(MERGE_PATCH, BASE, {"data": {"k": None, "n": "1"}, "metadata": {"finalizers": ["f2"]}})
    assert out["data"] == {"other": "o", "n": "1"}
    assert out["metadata"]["finalizers"] == ["f2"]  # lists are replaced
    assert BASE["data"] == {"k": "v", "other": "o"}  # input untouched


def test_strategic_merge_directives() -> None:
    out = apply_patch(STRATEGIC_MERGE_PATCH, BASE, {
        "metadata": {
            "finalizers": ["f2"],
            "$deleteFromPrimitiveList/finalizers": ["f1"],
            "ownerReferences": [{"uid": "u1", "name": "renamed"}, {"uid": "u2", "name": "o2"}],
            "$setElementOrder/ownerReferences": [{"uid": "u1"}, {"uid": "u2"}],
        },
        "data": {"$patch": "replace", "only": "this"},
    })
    assert out["metadata"]["finalizers"] == ["f2"]
    assert [(o["uid"], o["name"]) for o in out["metadata"]["ownerReferences"]] == [("u1", "renamed"), ("u2", "o2")]
    assert out["data"] == {"only": "this"}
    out = apply_patch(STRATEGIC_MERGE_PATCH, BASE, {"metadata": {"labels": {"$patch": "delete"}},
                                                   "data": {"$retainKeys": ["k"], "k": "w"}})
    assert "labels" not in out["metadata"]
    assert out["data"] == {"k": "w"}
    out = apply_patch(STRATEGIC_MERGE_PATCH, BASE,
                      {"metadata": {"ownerReferences": [{"uid": "u1", "$patch": "delete"}]}})
    assert out["metadata"]["ownerReferences"] == []


def test_json_patch_and_errors() -> None:
    out = apply_patch(JSON_PATCH, BASE, [{"op": "add", "path": "/data/new", "value": "1"},
                                         {"op": "remove", "path": "/data/other"}])
    assert out["data"] == {"k": "v", "new": "1"}
    with pytest.raises(APIError) as info:
        apply_patch(JSON_PATCH, BASE, [{"op": "add", "path": "/data/x", "value": "1"},
                                       {"op": "test", "path": "/data/k", "value": "nope"}])
    assert info.value.code == 422
    # kube's words: the path, no values with Python type names
    assert info.value.message.endswith("error in our request: testing value /data/k failed: test failed")
    assert "class" not in info.value.message and "x" not in BASE["data"]
    with pytest.raises(APIError) as info:
        apply_patch(JSON_PATCH, BASE, [{"op": "test", "path": "/data/missing", "value": "v"}])
    assert info.value.message.endswith("testing value /data/missing failed: test failed")
    for bad in ([1], [{"op": "frobnicate", "path": "/data"}], [{"op": "remove", "path": "/nope/x"}]):
        with pytest.raises(APIError) as info:
            apply_patch(JSON_PATCH, BASE, bad)
        assert info.value.code == 422, bad
    with pytest.raises(APIError) as info:
        apply_patch(JSON_PATCH, BASE, {"not": "a list"})
    assert info.value.code == 400


# --------------------------------------------------------------------------- objects


def test_decode_typed_drops_unknown_and_empty_fields() -> None:
    obj, unknown = decode_typed(CONFIGMAPS, {
        "metadata": {"name": "x", "labels": {}, "generation": 0, "creationTimestamp": None, "zzz": 1},
        "data": {}, "immutable": False, "extra": [1],
    })
    assert obj == {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}, "immutable": False}
    assert sorted(unknown) == ["extra", "metadata.zzz"]


def test_canonical_order() -> None:
    obj = {"data": {"b": "1", "a": "2"}, "metadata": {"uid": "u", "name": "n"}, "apiVersion": "v1",
           "kind": "ConfigMap"}
    out = canonical(CONFIGMAPS, obj)
    assert list(out) == ["kind", "apiVersion", "metadata", "data"]
    assert list(out["metadata"]) == ["name", "uid"] and list(out["data"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("rt", "obj", "ok"),
    [
        (CONFIGMAPS, {"metadata": {"name": "a.b-c"}}, True),
        (CONFIGMAPS, {"metadata": {"name": "-a"}}, False),
        (CONFIGMAPS, {"metadata": {"name": "x" * 254}}, False),
        (NAMESPACES, {"metadata": {"name": "a.b"}}, False),
        (CONFIGMAPS, {"metadata": {"name": "a"}, "data": {"..x": "1"}}, False),
        (CONFIGMAPS, {"metadata": {"name": "a"}, "data": {"k": "1"}, "binaryData": {"k": "AA=="}}, False),
        (CONFIGMAPS, {"metadata": {"name": "a", "labels": {"example.com/app": "v"}}}, True),
        (CONFIGMAPS, {"metadata": {"name": "a", "labels": {"bad/key/x": "v"}}}, False),
        (CONFIGMAPS, {"metadata": {"name": "a", "annotations": {"Note": "anything at all!"}}}, True),
        (CONFIGMAPS, {"metadata": {}}, False),
    ],
)
def test_validation(rt: Any, obj: dict[str, Any], ok: bool) -> None:
    if ok:
        validate(rt, obj)
    else:
        with pytest.raises(APIError) as info:
            validate(rt, obj)
        assert info.value.code == 422


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (0, "0s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600, "3h"),
     (3 * 3600 + 120, "3h2m"), (10 * 3600, "10h"), (3 * 86400 + 3600, "3d1h"), (30 * 86400, "30d"),
     (3 * 365 * 86400, "3y"), (10 * 365 * 86400, "10y")],
)
def test_age(seconds: int, text: str) -> None:
    assert age(seconds) == text
