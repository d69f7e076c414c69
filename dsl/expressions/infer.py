"""The static type of an expression (:func:`infer`), for the compiler's type checks.

Inference follows the semantics in :mod:`sealflow.dsl.expressions`: comparisons and ``and``/``or``/``not`` give
booleans, ``+`` of strings a string, of numbers a number, of lists a list; a path reads its root's type field by
field (a path that may stop at null is nullable); ``default(a, b)`` is ``a`` without null, or ``b``. Anything it
cannot tell (a dynamic index, an unknown root type) is unknown, which every check accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

from lark import ParseTree, Token, Tree

from sealflow.dsl import jsontypes as jt
from sealflow.dsl.expressions.parser import parser as _parser

#: a root's type: ``roots("input", ())``, ``roots("steps", ("fetch", "output"))`` -> (type, keys consumed)
Roots = Callable[[str, tuple[str | int, ...]], tuple[jt.Ty, int]]

_FUNCTIONS: dict[str, jt.Ty] = {
    "len": jt.INTEGER, "lower": jt.STRING, "upper": jt.STRING, "str": jt.STRING, "contains": jt.BOOLEAN,
    "startswith": jt.BOOLEAN, "endswith": jt.BOOLEAN, "int": jt.INTEGER, "float": jt.NUMBER, "now": jt.NUMBER,
    "duration": jt.NUMBER,
}


@functools.lru_cache(maxsize=4096)
def _tree(text: str) -> ParseTree:
    return _parser().parse(text)


def infer(text: str, roots: Roots) -> jt.Ty:
    """The type of the (already checked) expression ``text``; unknown if it does not parse."""
    try:
        tree = _tree(text)
    except Exception:  # noqa: BLE001 - its syntax error is reported elsewhere; nothing to say about its type
        return jt.UNKNOWN
    return _Infer(roots).visit(tree)


class _Infer:
    def __init__(self, roots: Roots):
        self.roots = roots

    def visit(self, node: ParseTree | Token) -> jt.Ty:
        if not isinstance(node, Tree):
            return jt.UNKNOWN
        method: Callable[[ParseTree], jt.Ty] | None = getattr(self, "r_" + str(node.data), None)
        if method is None:
            if len(node.children) == 1:  # a parenthesised expression
                return self.visit(node.children[0])
            return jt.UNKNOWN
        return method(node)

    def _boolean(self, node: ParseTree) -> jt.Ty:
        return jt.BOOLEAN

    r_or_test = r_and_test = r_not_ = r_comparison = _boolean

    def r_sum(self, node: ParseTree) -> jt.Ty:
        parts = [self.visit(c) for c in node.children[0::2]]
        ops = {str(_op(c)) for c in node.children[1::2]}
        if any(p.unknown for p in parts):
            return jt.UNKNOWN
        kinds = [p.kinds - {"null"} for p in parts]
        if ops == {"+"} and all(k == {"string"} for k in kinds):
            return jt.STRING
        if ops == {"+"} and all(k == {"array"} for k in kinds):
            return jt.array(jt.union(*(p.items or jt.UNKNOWN for p in parts)))
        if all(k and k <= {"integer", "number"} for k in kinds):
            whole = all(k == {"integer"} for k in kinds) and "/" not in ops
            return jt.INTEGER if whole else jt.NUMBER
        return jt.UNKNOWN

    r_product = r_sum

    def r_neg(self, node: ParseTree) -> jt.Ty:
        inner = self.visit(node.children[0])
        return inner if not inner.unknown and inner.kinds <= {"integer", "number"} else jt.UNKNOWN

    def r_postfix(self, node: ParseTree) -> jt.Ty:
        atom, segments = node.children[0], node.children[1:]
        keys = [_static_key(s) for s in segments]
        if isinstance(atom, Tree) and atom.data == "name":
            static: list[str | int] = []
            for key in keys:
                if key is _DYNAMIC:
                    break
                static.append(cast("str | int", key))  # (a static key: a field name or an index)
            ty, used = self.roots(str(atom.children[0]), tuple(static))
            rest = keys[used:]
        else:
            ty, rest = self.visit(atom), keys
        for key in rest:
            if key is _DYNAMIC:
                if "array" in ty.kinds and not ty.unknown:
                    ty = (ty.items or jt.UNKNOWN).or_null()
                else:
                    return jt.UNKNOWN
                continue
            ty, _ = jt.field(ty, key)
        return ty

    def r_name(self, node: ParseTree) -> jt.Ty:
        return self.roots(str(node.children[0]), ())[0]

    def r_call(self, node: ParseTree) -> jt.Ty:
        name, args = str(node.children[0]), node.children[1:]
        if name == "default" and len(args) == 2:
            value, fallback = self.visit(args[0]), self.visit(args[1])
            if value.unknown or fallback.unknown:
                return jt.UNKNOWN
            return jt.union(value.non_null() if value.kinds != {"null"} else fallback, fallback) \
                if "null" in value.kinds else value
        return _FUNCTIONS.get(name, jt.UNKNOWN)

    def r_null(self, node: ParseTree) -> jt.Ty:
        return jt.NULL

    def r_true(self, node: ParseTree) -> jt.Ty:
        return jt.BOOLEAN

    r_false = r_true

    def r_int(self, node: ParseTree) -> jt.Ty:
        return jt.INTEGER

    def r_float(self, node: ParseTree) -> jt.Ty:
        return jt.NUMBER

    def r_string(self, node: ParseTree) -> jt.Ty:
        return jt.STRING

    def r_list(self, node: ParseTree) -> jt.Ty:
        items = [self.visit(c) for c in node.children]
        return jt.array(jt.union(*items) if items else jt.UNKNOWN)

    def r_map(self, node: ParseTree) -> jt.Ty:
        fields = {}
        for pair in node.children:
            if isinstance(pair, Tree) and isinstance(pair.children[0], Token):
                fields[_unquote(str(pair.children[0]))] = self.visit(pair.children[1])
        return jt.obj(fields)


_DYNAMIC = object()


def _op(node: ParseTree | Token) -> str:
    if isinstance(node, Tree) and node.children:
        return str(node.children[0])
    return str(node)


def _static_key(segment: ParseTree | Token) -> object:
    if not isinstance(segment, Tree):
        return _DYNAMIC
    if segment.data == "field":
        return str(segment.children[0])
    inner = segment.children[0]
    if isinstance(inner, Tree) and inner.data == "string":
        return _unquote(str(inner.children[0]))
    if isinstance(inner, Tree) and inner.data == "int":
        return int(str(inner.children[0]))
    return _DYNAMIC


def _unquote(token: str) -> str:
    body = token[1:-1]
    return body if "\\" not in body else body.encode().decode("unicode_escape", errors="replace")
