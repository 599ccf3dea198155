"""kubectl's JSONPath (client-go's ``util/jsonpath``) as the server evaluates it for printer columns: parsing, its
errors, evaluation and printing."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue.apiserver.jsonpath import JSONPathError, parse, print_value

DATA: dict[str, Any] = {
    "metadata": {"name": "web", "annotations": {"cert-manager.io/issuer": "ca", "plain": "p", "a": {"b": "ab"}}},
    "spec": {"list": [10, 20, 30, 40], "n": 2, "flag": True, "ratio": 0.5,
             "items": [{"name": "x", "port": 1}, {"name": "y", "port": 2, "tls": {}}]},
    "status": {"conditions": [{"type": "Issuing", "status": "False", "message": "m1"},
                              {"type": "Ready", "status": "True", "message": "up to date"}]},
}

CASES: list[tuple[str, list[list[Any]]]] = [
    ('{.status.conditions[?(@.type=="Ready")].status}', [["True"]]),
    ('{.status.conditions[?(@.type == "Ready")].message}', [["up to date"]]),  # cert-manager writes spaces
    ("{.status.conditions[?(@.type=='Issuing')].status}", [["False"]]),
    ('{.status.conditions[?(@.type!="Ready")].type}', [["Issuing"]]),
    ('{.status.conditions[?(@.type=="Gone")].status}', [[]]),
    ("{.spec.items[?(@.port > 1)].name}", [["y"]]),
    ("{.spec.items[?(@.port <= 1)].name}", [["x"]]),
    ("{.spec.items[?(@.tls)].name}", [["y"]]),
    ("{.spec.list[*]}", [[10, 20, 30, 40]]),
    ("{.spec.list[-1:]}", [[40]]),
    ("{.spec.list[-1]}", [[40]]),
    ("{.spec.list[1:3]}", [[20, 30]]),
    ("{.spec.list[::2]}", [[10, 30]]),
    ("{.spec.list[0,2]}", [[10, 30]]),
    ("{.spec.list[3:3]}", [[]]),
    ("{.spec.items[*].name}", [["x", "y"]]),
    ("{.metadata.annotations.cert-manager\\.io/issuer}", [["ca"]]),
    ("{.metadata.annotations['plain']}", [["p"]]),
    ("{.metadata.annotations['a.b']}", [["ab"]]),  # as client-go: the key is split at its dot
    ("{.metadata['name','annotations'].plain}", [["p"]]),
    ("{..port}", [[1, 2]]),
    ("{.metadata.missing}", [[]]),
    ("{.spec.list.missing}", [[]]),
    ("{$.spec.n}", [[2]]),
    ("name={.metadata.name} n={.spec.n}", [["name="], ["web"], [" n="], [2]]),
    ("{range .spec.items[*]}[{.name}]{end}", [["["], ["x"], ["]"], ["["], ["y"], ["]"]]),
    ("{.spec.flag}{true}{1.5}{-3}", [[True], [True], [1.5], [-3]]),
]


@pytest.mark.parametrize(("template", "expected"), CASES, ids=[c[0] for c in CASES])
def test_find_results(template: str, expected: list[list[Any]]) -> None:
    assert parse(template).find_results(DATA) == expected


def test_missing_keys_error_unless_allowed() -> None:
    with pytest.raises(JSONPathError, match=r"^missing is not found$"):
        parse("{.metadata.missing}").find_results(DATA, allow_missing_keys=False)


@pytest.mark.parametrize(("template", "error"), [
    ("{.spec.list[9]}", "array index out of bounds: index 9, length 4"),
    ("{.spec.list[3:1]}", "starting index 3 is greater than ending index 1"),
    ("{.spec.list[::0]}", "step must be > 0"),
    ("{.spec.n[0]}", "int64 is not array or slice"),
    ('{.spec.items[?(@.port=="1")].name}', "incompatible types for comparison"),
    ("{.spec.items[?(@.name>true)].name}", "invalid type for comparison"),
    ("{.spec.items[?(@.port=~1)].name}", "unrecognized filter operator =~"),
    ("{end}", "not in range, nothing to end"),
    ("{foo}", "unrecognized identifier foo"),
])
def test_evaluation_errors(template: str, error: str) -> None:
    with pytest.raises(JSONPathError) as info:
        parse(template).find_results(DATA)
    assert str(info.value) == error
    assert parse(template).first(DATA) == (False, None)  # a printer column shows nothing


@pytest.mark.parametrize(("template", "error"), [
    ("{.a", "unclosed action"),
    ("{.a[1}", "unterminated array"),
    ('{.a[?(@.x=="y"}', "unterminated filter"),
    ('{.a[?(@.x=="y")}', "unclosed array expect ]"),
    ("{.a[x]}", "invalid array index x"),
    ("{.a[1:x]}", "invalid array index 1:x"),
    ("{.a[-]}", "array index - is not a number"),
    ("{#}", "unrecognized character in action: U+0023 '#'"),
    ('{"abc}', "unterminated quoted string"),
    ('{"a\\qb"}', 'unquote string "a\\qb" error invalid syntax'),
    ("{....a}", "invalid multiple recursive descent"),
    ("{1.2.3}", "cannot parse number 1.2.3"),
])
def test_parse_errors(template: str, error: str) -> None:
    with pytest.raises(JSONPathError) as info:
        parse(template)
    assert str(info.value) == error


def test_long_paths_parse_without_recursion() -> None:
    path = "{" + ".a" * 5000 + "}"
    deep: Any = "leaf"
    for _ in range(5000):
        deep = {"a": deep}
    assert parse(path).find_results(deep) == [["leaf"]]
    assert len(parse("{..a}").find_results(deep)[0]) == 5000


@pytest.mark.parametrize(("value", "printed"), [
    ("text", "text"),
    (None, "<no value>"),
    (True, "true"),
    (3, "3"),
    (2.0, "2"),
    (0.5, "0.5"),
    (1e6, "1e+06"),
    (123456.0, "123456"),
    (0.00001, "1e-05"),
    ({"b": [1, 2.5, None], "a": "<&>"}, '{"a":"\\u003c\\u0026\\u003e","b":[1,2.5,null]}'),
    ([1e21, 1e-7, 100.0], "[1e+21,1e-7,100]"),
])
def test_print_value_as_go(value: Any, printed: str) -> None:
    assert print_value(value) == printed


def test_arguments_checked() -> None:
    with pytest.raises(TypeError, match="template"):
        parse(b"{.a}")  # type: ignore[arg-type]
