"""CEL source to a small syntax tree: what the checker (types, undeclared names, cost) walks.

The parser is cel-python's (``celpy``, a Lark LALR grammar of the CEL spec).  Its grammar has no optional-field
syntax, so the source is first rewritten token by token (strings and comments untouched): ``a.?b`` becomes a call
``a._kqOptField("b")``, ``a[?k]`` becomes ``a._kqOptIndex(k)``, and ``optional.of(x)``/``optional.none()``/
``optional.ofNonZeroValue(x)`` become calls of library functions.  The same rewritten text is what celpy
evaluates (:mod:`.program`), so both see one expression.
"""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Final

import celpy
import lark
from celpy.celparser import CELParseError

__all__ = ["OPT_FIELD", "OPT_INDEX", "TOO_DEEP", "CelSyntaxError", "Node", "environment", "lock", "parse",
           "rewrite"]

OPT_FIELD: Final = "_kqOptField"
OPT_INDEX: Final = "_kqOptIndex"
_OPTIONAL_CALLS: Final = {"of": "_kqOptOf", "none": "_kqOptNone", "ofNonZeroValue": "_kqOptOfNonZero"}
_MACROS: Final = ("all", "exists", "exists_one", "map", "filter")
_TOKEN: Final = re.compile(
    r"""(?P<str>[rR]?[bB]?[rR]?(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))"""
    r"""|(?P<comment>//[^\n]*)|(?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)|(?P<ws>\s+)|(?P<other>.)""")

TOO_DEEP: Final = "ERROR: <input>:1:1: expression recursion limit exceeded"
#: Held while celpy's shared environment is used.
lock = threading.Lock()
_env: celpy.Environment | None = None


class CelSyntaxError(ValueError):
    """A CEL expression that does not parse or check; the message is cel-go's form
    (``ERROR: <input>:LINE:COL: ...``)."""


@dataclass(frozen=True, eq=False)
class Node:
    """One node: ``op`` is ``lit`` (``value``, ``kind``), ``ident`` (``name``), ``select`` (``args[0]``,
    ``name``; ``test`` for ``has()``), ``call`` (``name``, ``target`` or None, ``args``), ``comp`` (macro
    ``name``, ``target`` the range, ``var``, ``args`` its expressions), ``list``, ``map`` (``args`` alternate
    keys and values) or ``object`` (a message literal, unsupported)."""

    op: str
    name: str = ""
    args: tuple[Node, ...] = ()
    target: Node | None = None
    value: Any = None
    kind: str = ""
    var: str = ""
    test: bool = False
    line: int = 1
    column: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def environment() -> celpy.Environment:
    """The one celpy environment (its parser is shared; callers hold :data:`lock`).  celpy raises the
    interpreter's recursion limit to 2500 when it is created (its evaluator recurses over the tree); a higher
    limit set before is kept."""
    global _env
    if _env is None:
        before = sys.getrecursionlimit()
        _env = celpy.Environment()
        sys.setrecursionlimit(max(before, sys.getrecursionlimit()))
    return _env


def rewrite(text: str) -> str:
    """``text`` with the optional syntax turned into calls celpy parses (see the module docstring)."""
    tokens = [(m.lastgroup or "", m.group()) for m in _TOKEN.finditer(text)]
    out: list[str] = []
    brackets: list[bool] = []  # per open "[": True if it was an optional index
    i = 0
    while i < len(tokens):
        kind, tok = tokens[i]
        nxt = _next(tokens, i)
        if tok == "." and nxt is not None and tokens[nxt][1] == "?":
            after = _next(tokens, nxt)
            if after is not None and tokens[after][0] == "ident":
                out.append(f".{OPT_FIELD}(\"{tokens[after][1]}\")")
                i = after + 1
                continue
        if tok == "[":
            if nxt is not None and tokens[nxt][1] == "?" and out and out[-1].strip() and not _opens(out):
                out.append(f".{OPT_INDEX}(")
                brackets.append(True)
                i = nxt + 1
                continue
            brackets.append(False)
        elif tok == "]" and brackets:
            out.append(")" if brackets.pop() else "]")
            i += 1
            continue
        elif kind == "ident" and tok == "optional" and nxt is not None and tokens[nxt][1] == ".":
            call = _next(tokens, nxt)
            if call is not None and tokens[call][1] in _OPTIONAL_CALLS:
                out.append(_OPTIONAL_CALLS[tokens[call][1]])
                i = call + 1
                continue
        out.append(tok)
        i += 1
    return "".join(out)


def _next(tokens: list[tuple[str, str]], i: int) -> int | None:
    for j in range(i + 1, len(tokens)):
        if tokens[j][0] not in ("ws", "comment"):
            return j
    return None


def _opens(out: list[str]) -> bool:
    """True if the last significant output token opens an expression (so ``[`` starts a list literal)."""
    for tok in reversed(out):
        if tok.strip():
            return tok in ("(", "[", ",", "{", ":", "?", "!", "-", "+", "*", "/", "%", "<", ">", "=", "&", "|")
    return True


def parse(text: str) -> tuple[str, lark.Tree[Any], Node]:
    """``(rewritten text, celpy's tree, the syntax tree)``; raises :class:`CelSyntaxError`."""
    source = rewrite(text)
    with lock:  # one shared Lark parser
        try:
            tree = environment().compile(source)
        except CELParseError as exc:
            line, column = exc.line or 1, exc.column or 1
            raise CelSyntaxError(f"ERROR: <input>:{line}:{column}: Syntax error: {_first_line(str(exc))}\n"
                                 + _pointer(text, line, column)) from None
        except RecursionError:
            raise CelSyntaxError(TOO_DEEP) from None
    try:
        return source, tree, _convert(tree)
    except RecursionError:
        raise CelSyntaxError(TOO_DEEP) from None


def _first_line(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    return "unexpected input" if not first or set(first.strip()) <= {"^", " "} else first


def _pointer(text: str, line: int, column: int) -> str:
    lines = text.splitlines() or [""]
    shown = lines[min(line, len(lines)) - 1]
    return f" | {shown}\n | {'.' * max(column - 1, 0)}^"


_BINARY: Final = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in",
    "addition_add": "_+_", "addition_sub": "_-_",
    "multiplication_mul": "_*_", "multiplication_div": "_/_", "multiplication_mod": "_%_",
}
_LITERALS: Final = {"UINT_LIT": "uint", "FLOAT_LIT": "double", "INT_LIT": "int", "MLSTRING_LIT": "string",
                    "STRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null"}



def _subtrees(tree: lark.Tree[Any]) -> list[lark.Tree[Any]]:
    return [c for c in tree.children if isinstance(c, lark.Tree)]


def _exprs(tree: lark.Tree[Any] | None) -> tuple[Node, ...]:
    if tree is None:
        return ()
    return tuple(_convert(c) for c in _subtrees(tree))


def _convert(tree: lark.Tree[Any]) -> Node:
    data = tree.data
    kids = _subtrees(tree)
    tokens = [c for c in tree.children if isinstance(c, lark.Token)]
    if data == "expr":
        if len(kids) == 3:
            return Node("call", "_?_:_", tuple(_convert(k) for k in kids))
        return _convert(kids[0])
    if data in ("conditionalor", "conditionaland"):
        if len(kids) == 2:
            return Node("call", "_||_" if data == "conditionalor" else "_&&_", (_convert(kids[0]), _convert(kids[1])),
)
        return _convert(kids[0])
    if data in ("relation", "addition", "multiplication"):
        if len(kids) == 2:
            op = kids[0]
            left = _convert(_subtrees(op)[0])
            right = _convert(kids[1])
            name = _BINARY[op.data]
            if name == "@in":
                return Node("call", "@in", (left, right))
            return Node("call", name, (left, right))
        return _convert(kids[0])
    if data == "unary":
        if len(kids) == 2:
            return Node("call", "!_" if kids[0].data == "unary_not" else "-_", (_convert(kids[1]),))
        return _convert(kids[0])
    if data in ("member", "primary"):
        return _convert(kids[0])
    if data == "member_dot":
        return Node("select", str(tokens[0]), (_convert(kids[0]),))
    if data == "member_dot_arg":
        target = _convert(kids[0])
        name = str(tokens[0])
        args = _exprs(kids[1] if len(kids) > 1 else None)
        if name in _MACROS and len(args) in (2, 3) and args[0].op == "ident":
            return Node("comp", name, args[1:], target=target, var=args[0].name)
        return Node("call", name, args, target=target)
    if data == "member_index":
        return Node("call", "_[_]", (_convert(kids[0]), _convert(kids[1])))
    if data == "member_object":
        return Node("object")
    if data in ("ident_arg", "dot_ident_arg"):
        name = str(tokens[0])
        args = _exprs(kids[0] if kids else None)
        if name == "has" and len(args) == 1 and args[0].op == "select":
            sel = args[0]
            return Node("select", sel.name, sel.args, test=True)
        return Node("call", name, args)
    if data in ("ident", "dot_ident"):
        return Node("ident", str(tokens[0]))
    if data == "paren_expr":
        return _convert(kids[0])
    if data == "list_lit":
        return Node("list", args=_exprs(kids[0] if kids else None))
    if data == "map_lit":
        return Node("map", args=_exprs(kids[0] if kids else None))
    if data == "literal":
        tok = tokens[0]
        return Node("lit", value=str(tok), kind=_LITERALS.get(tok.type, "dyn"))
    raise CelSyntaxError(f"ERROR: <input>:1:1: unsupported syntax {data}")
