"""A tiny protobuf encoder producing Kubernetes-style (gogo-protobuf) bodies for tests."""

from __future__ import annotations


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def _entry(number: int, key: str, value: bytes | str) -> bytes:
    return field(number, field(1, key) + field(2, value))


def encode_configmap(name: str, namespace: str = "", data: dict[str, str] | None = None,
                     labels: dict[str, str] | None = None, binary: dict[str, bytes] | None = None) -> bytes:
    """Encode a ConfigMap like gogo-protobuf does (empty strings and zero ints written explicitly)."""
    meta = field(1, name) + field(2, "") + field(3, namespace) + field(4, "") + field(5, "") + field(6, "")
    meta += field(7, 0) + field(8, b"")  # generation 0, empty creationTimestamp
    for k, v in (labels or {}).items():
        meta += _entry(11, k, v)
    cm = field(1, meta)
    for k, v in (data or {}).items():
        cm += _entry(2, k, v)
    for k, b in (binary or {}).items():
        cm += _entry(3, k, b)
    type_meta = field(1, "v1") + field(2, "ConfigMap")
    return b"k8s\x00" + field(1, type_meta) + field(2, cm) + field(3, "") + field(4, "")
