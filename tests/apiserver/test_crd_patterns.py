"""A CRD schema's ``pattern`` is Go's ``regexp`` (RE2 syntax) as in kube-apiserver, not Python's :mod:`re`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from keyqueue.apiserver import TestAPIServer
from keyqueue.apiserver.patterns import PatternError, compile_pattern, pattern_matches

from .conftest import raw_request, unique

_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_PATTERNS = {
    "strategy": "^(?i)(abort|warn)?$",  # prometheus-operator's partial_response_strategy
    "word": "^[[:alpha:]]+$",
    "letters": "^[A-Za-z]+$",
}


def _crd(group: str, patterns: dict[str, str]) -> dict[str, Any]:
    props = {name: {"type": "string", "pattern": pattern} for name, pattern in patterns.items()}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"rules.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "rules", "kind": "Rule"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": props}}}}}]},
    }


@pytest.fixture(scope="module")
def group(memory_server: TestAPIServer) -> Iterator[str]:
    name = f"{unique('re')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(name, _PATTERNS))
    assert code == 201, body
    yield name
    raw_request(memory_server, f"{_CRDS}/rules.{name}", "DELETE")


def _create(server: TestAPIServer, group: str, spec: dict[str, str]) -> tuple[int, Any]:
    obj = {"apiVersion": f"{group}/v1", "kind": "Rule", "metadata": {"name": unique("r")}, "spec": spec}
    return raw_request(server, f"/apis/{group}/v1/namespaces/default/rules", "POST", obj)


@pytest.mark.parametrize("spec", [{"strategy": "abort"}, {"strategy": "WARN"}, {"strategy": ""},
                                  {"word": "abc"}, {"letters": "Abc"}])
def test_go_patterns_accept(memory_server: TestAPIServer, group: str, spec: dict[str, str]) -> None:
    code, body = _create(memory_server, group, spec)
    assert code == 201, body


@pytest.mark.parametrize(("field", "value"), [("strategy", "never"), ("word", "ab1"), ("letters", "Abc\n"),
                                              ("letters", "Abc\nd")])
def test_go_patterns_reject_with_kubes_message(memory_server: TestAPIServer, group: str, field: str,
                                               value: str) -> None:
    code, body = _create(memory_server, group, {field: value})
    assert code == 422, body
    shown = value.replace("\n", "\\n")
    assert [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]] == [
        ("FieldValueInvalid", f"spec.{field}",
         f"Invalid value: \"{shown}\": spec.{field} in body should match '{_PATTERNS[field]}'")]


@pytest.mark.parametrize(("pattern", "error"), [
    ("(?<=a)b", "invalid or unsupported Perl syntax: `(?<=`"),
    ("a(b", "missing closing ): `a(b`"),
    ("[a", "missing closing ]: `[a`"),
    ("x{2,1}", "invalid repeat count: `{2,1}`"),
    ("a**", "invalid nested repetition operator: `**`"),
    ("\\8", "invalid escape sequence: `\\8`"),
    ("(?i)\\", "trailing backslash at end of expression: ``"),
])
def test_pattern_that_does_not_compile_is_refused_with_the_crd(memory_server: TestAPIServer, pattern: str,
                                                               error: str) -> None:
    group = f"{unique('bad')}.example.com"
    code, body = raw_request(memory_server, _CRDS, "POST", _crd(group, {"x": pattern}))
    assert code == 422, body
    assert body["reason"] == "Invalid"
    field = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x].pattern"
    quoted = pattern.replace("\\", "\\\\")
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        (field, f'Invalid value: "{quoted}": must be a valid regular expression, but isn\'t: error parsing regexp: '
                f"{error}")]
    assert raw_request(memory_server, f"{_CRDS}/rules.{group}")[0] == 404  # nothing stored


def test_each_pattern_compiles_once(memory_server: TestAPIServer, group: str) -> None:
    assert _create(memory_server, group, {"strategy": "warn"})[0] == 201  # compiled by now
    misses = compile_pattern.cache_info().misses
    for value in ("abort", "warn", "Abort"):
        assert _create(memory_server, group, {"strategy": value})[0] == 201
    assert compile_pattern.cache_info().misses == misses


def test_pattern_functions() -> None:
    assert pattern_matches("b", "abc")  # unanchored, as Go's MatchString
    assert not pattern_matches("^[A-Za-z]+$", "Abc\n")
    assert pattern_matches("(?m)^[A-Za-z]+$", "Abc\n")
    assert pattern_matches("^\\p{Greek}+$", "αβγ")
    with pytest.raises(PatternError, match=r"^error parsing regexp: missing closing \)"):
        pattern_matches("(", "x")
    with pytest.raises(TypeError, match="pattern"):
        compile_pattern(b"x")  # type: ignore[arg-type]
