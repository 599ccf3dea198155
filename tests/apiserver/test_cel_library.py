"""The CEL engine without a server: the Kubernetes libraries' results, schema typing of ``self``, the optional
syntax, compile errors, and the cost estimate's shape (kube's bounds, multiplied through comprehensions)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from keyqueue.apiserver.cel import CelEvalError, CelSyntaxError, Program, schema_type, to_cel, to_json
from keyqueue.apiserver.cel.syntax import rewrite
from keyqueue.apiserver.cel.types import DYN

_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "items": {"type": "array", "items": {"type": "integer"}},
    "name": {"type": "string"},
    "ratio": {"type": "number"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "namespace": {"type": "string"},
    "dash-ed": {"type": "string"},
    "port": {"x-kubernetes-int-or-string": True},
}}
_VALUE = {"items": [3, 1, 2], "name": "Hello World", "ratio": 2, "labels": {"app": "web"}, "namespace": "ns",
          "dash-ed": "d", "port": "http"}


def _eval(text: str, value: Any = None) -> Any:
    t = schema_type(_SCHEMA)
    program = Program(text, {"self": t})
    return to_json(program.evaluate({"self": to_cel(_VALUE if value is None else value, t)}))


@pytest.mark.parametrize(("expression", "expected"), [
    ("self.items.isSorted()", False), ("[1, 2, 2].isSorted()", True), ("self.items.sum()", 6),
    ("self.items.min()", 1), ("self.items.max()", 3), ("self.items.indexOf(2)", 2), ("[1, 2, 1].lastIndexOf(1)", 2),
    ("self.name.charAt(4)", "o"), ("self.name.indexOf('o')", 4), ("self.name.lastIndexOf('o')", 7),
    ("self.name.lowerAscii()", "hello world"), ("self.name.upperAscii()", "HELLO WORLD"),
    ("self.name.replace('o', '0')", "Hell0 W0rld"), ("self.name.replace('o', '0', 1)", "Hell0 World"),
    ("self.name.split(' ')", ["Hello", "World"]), ("self.name.substring(6)", "World"),
    ("self.name.substring(0, 5)", "Hello"), ("'  x '.trim()", "x"), ("['a', 'b'].join('/')", "a/b"),
    ("'%s has %d items, ratio %.1f'.format([self.name, size(self.items), self.ratio])",
     "Hello World has 3 items, ratio 2.0"),
    ("'%x %o %b %s'.format([255, 8, 5, [true, null]])", "ff 10 101 [true, null]"),
    ("self.name.matches('^H.*d$')", True), ("'ab\\n'.matches('^ab$')", False),
    ("self.name.find('[A-Z][a-z]+')", "Hello"), ("self.name.findAll('[A-Z]')", ["H", "W"]),
    ("isURL('https://example.com:8443/a/b?x=1')", True), ("isURL('example.com')", False),
    ("url('https://user@example.com:8443/a%20b?x=1&x=2').getHost()", "example.com:8443"),
    ("url('https://example.com:8443/p').getHostname()", "example.com"),
    ("url('https://[::1]:80/p').getHostname()", "::1"), ("url('https://example.com/p').getPort()", ""),
    ("url('https://example.com/a%20b').getEscapedPath()", "/a%20b"),
    ("url('https://e.com/?x=1&x=2&y=').getQuery()", {"x": ["1", "2"], "y": [""]}),
    ("url('https://e.com').getScheme()", "https"),
    ("quantity('1Gi').compareTo(quantity('1024Mi'))", 0), ("quantity('100m').isLessThan(quantity('1'))", True),
    ("quantity('2k').isGreaterThan(quantity('1Ki'))", True), ("quantity('1.5Gi').asInteger()", 1610612736),
    ("quantity('1.5').asApproximateFloat()", 1.5), ("quantity('-3').sign()", -1),
    ("quantity('1.5').isInteger()", False), ("quantity('1').add(quantity('500m')).isInteger()", False),
    ("quantity('1').sub(1).sign()", 0), ("quantity('5e3').asInteger()", 5000),
    ("isQuantity('1Zi')", False), ("isQuantity('250Mi')", True),
    ("isIP('10.0.0.1') && isIP('::1') && !isIP('10.0.0.01') && !isIP('::ffff:1.2.3.4')", True),
    ("isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0')", True),
    ("self.?labels.?app.orValue('none')", "web"), ("self.labels[?'missing'].orValue('none')", "none"),
    ("self.?labels.hasValue()", True), ("optional.of(1).value() + 1", 2), ("optional.none().hasValue()", False),
    ("optional.ofNonZeroValue('').hasValue()", False), ("optional.none().or(optional.of(2)).value()", 2),
    ("self.ratio == 2.0", True), ("type(self.ratio) == double", True), ("self.__namespace__", "ns"),
    ("self.dash__dash__ed", "d"), ("type(self.port) == string", True),
    ("self.items.all(x, x > 0) && self.items.exists_one(x, x == 1)", True),
    ("self.items.map(x, x * 2).filter(x, x > 2)", [6, 4]), ("self.labels.all(k, k == 'app')", True),
    ("'.?x' + \"[?y]\"", ".?x[?y]"),  # the optional syntax is not rewritten inside strings
])
def test_library(expression: str, expected: Any) -> None:
    assert _eval(expression) == expected


@pytest.mark.parametrize(("expression", "error"), [
    ("self.labels.missing == 'x'", "no such key: missing"),
    ("1 / 0 == 1", "division by zero"),
    ("self.port + 1 > 0", "no such overload"),
    ("quantity('nope').sign() == 1", "quantities must match the regular expression"),
    ("self.name.charAt(99) == 'x'", "index out of range: 99"),
    ("optional.none().value() == 1", "optional.none() dereference"),
    ("self.name.matches('(') ", "error parsing regexp: missing closing ): `(`"),
])
def test_runtime_errors(expression: str, error: str) -> None:
    with pytest.raises(CelEvalError) as info:
        _eval(expression)
    assert error in str(info.value)


@pytest.mark.parametrize(("expression", "error"), [
    ("self.items.", "Syntax error"),
    ("self.nope == 1", "undefined field 'nope'"),
    ("selff.name == 'x'", "undeclared reference to 'selff'"),
    ("self.name.nope()", "undeclared reference to 'nope'"),
    ("self.ratio + 1 > 0", "found no matching overload for '_+_' applied to '(double, int)'"),
    ("has(self.nope)", "undefined field 'nope'"),
    ("(" * 400 + "true" + ")" * 400, "expression recursion limit exceeded"),
])
def test_compile_errors(expression: str, error: str) -> None:
    with pytest.raises(CelSyntaxError) as info:
        Program(expression, {"self": schema_type(_SCHEMA) or DYN})
    assert error in str(info.value)
    assert str(info.value).startswith("ERROR: <input>:")


def test_rewrite_keeps_strings_and_turns_optionals_into_calls() -> None:
    assert rewrite("a.?b[?'k'] == optional.of('.?c')") == 'a._kqOptField("b")._kqOptIndex(\'k\') == _kqOptOf(\'.?c\')'
    assert rewrite("[?x, 1]") == "[?x, 1]"  # an optional list element is not an index


def test_cost_follows_the_schemas_bounds() -> None:
    unbounded = {"type": "array", "items": {"type": "string"}}
    bounded = {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 16}}
    rule = "self.all(x, x.matches('^[a-z]+$'))"
    big = Program(rule, {"self": schema_type(unbounded) or DYN}).cost
    small = Program(rule, {"self": schema_type(bounded) or DYN}).cost
    assert small < 1000 < 10_000_000 < big
    nested = Program("self.all(x, self.exists(y, x == y))", {"self": schema_type(bounded) or DYN}).cost
    flat = Program("self.all(x, x == 'a')", {"self": schema_type(bounded) or DYN}).cost
    assert nested > 5 * flat  # a comprehension inside a comprehension multiplies by the list's bound
    program = Program(rule, {"self": schema_type(unbounded) or DYN})
    assert program.runtime_cost({"self": ["a", "b"]}) < 100 < program.cost  # the actual sizes


def test_one_program_evaluated_from_many_threads() -> None:
    """A compiled program is shared by every request: concurrent evaluations see only their own variables."""
    t = schema_type(_SCHEMA)
    program = Program("self.items.map(x, x * 2).sum() == size(self.name) * 2 && self.name.startsWith('n')",
                      {"self": t})
    wrong: list[int] = []
    start = threading.Barrier(8)

    def work(k: int) -> None:
        start.wait()
        for i in range(40):
            n = k * 1000 + i + 1
            value = {"items": [n], "name": "n" * n}
            if to_json(program.evaluate({"self": to_cel(value, t)})) is not True:
                wrong.append(n)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wrong == []
