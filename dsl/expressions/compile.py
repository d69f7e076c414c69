"""The compiler: a checked Lark tree becomes closures ``run(env) -> value``.

:class:`Compiler` has one method per grammar rule. On the way it refuses what the grammar
lets through but the language does not (unknown functions or names, wrong arity, literals
out of range, bad escapes, duplicate map keys) and records every data path it reads as a
:class:`Reference` with its offset, so :func:`sealflow.dsl.expressions.check` can locate problems.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from lark import ParseTree, Token, Tree

from sealflow.dsl.expressions.catalogue import KEYWORDS, PYTHON_WORDS, TERNARY, TERNARY_HINT, closest
from sealflow.dsl.expressions.errors import ExpressionError
from sealflow.dsl.expressions.functions import FUNCTION_ALIASES, FUNCTIONS, USAGE
from sealflow.dsl.expressions.values import BINARY, COMPARE, MAX_INT, Env, lookup, negate, truthy

ROOTS = ("input", "steps", "run", "output", "item", "index", "event")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A data path in an expression; ``offset``/``length`` cover its static part.

    ``steps.fetch.output.email`` is ``Reference("steps", "fetch", "output", 0, 26)`` with
    ``path == ("fetch", "output", "email")``; ``run.id`` has ``field == "id"``.
    """

    root: str
    step: str | None
    field: str | None
    offset: int
    length: int
    path: tuple[str | int, ...] = dataclasses.field(default=(), compare=False)
    #: where each key of ``path`` starts in the expression (for errors about one field of a path)
    at: tuple[int, ...] = dataclasses.field(default=(), compare=False)


#: JSON's escapes, plus \' and \0
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0", "\\": "\\", "'": "'",
            '"': '"', "/": "/"}
_ESCAPE = re.compile(r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.S)
_DYNAMIC = object()

#: a compiled expression or part of one: its value in an environment
Run = Callable[[Env], Any]


class Compiler:
    """Turns a Lark tree into closures ``run(env) -> value``; one method per rule."""

    def __init__(self) -> None:
        #: each data path read, with where its step and its field start
        self.refs: list[tuple[Reference, int, int]] = []
        #: each function called, with where its name starts
        self.funcs: list[tuple[str, int]] = []

    def build(self, tree: ParseTree | Token) -> Run:
        rule: Callable[[ParseTree], Run] = getattr(self, _tree(tree).data)
        return rule(_tree(tree))

    def or_test(self, tree: ParseTree) -> Run:
        parts = [self.build(c) for c in tree.children]
        return lambda env: any(truthy(p(env)) for p in parts)

    def and_test(self, tree: ParseTree) -> Run:
        parts = [self.build(c) for c in tree.children]
        return lambda env: all(truthy(p(env)) for p in parts)

    def not_(self, tree: ParseTree) -> Run:
        inner = self.build(tree.children[-1])
        return lambda env: not truthy(inner(env))

    def comparison(self, tree: ParseTree) -> Run:
        left, op, right = tree.children
        a, b, fn = self.build(left), self.build(right), COMPARE[" ".join(str(w) for w in _tree(op).children)]
        return lambda env: fn(a(env), b(env))

    def sum(self, tree: ParseTree) -> Run:
        first = self.build(tree.children[0])
        rest = [(BINARY[_token(_tree(op))], self.build(x))
                for op, x in zip(tree.children[1::2], tree.children[2::2], strict=True)]
        if len(rest) == 1:
            (fn, second), = rest
            return lambda env: fn(first(env), second(env))

        def run(env: Env) -> Any:
            value = first(env)
            for fn, part in rest:
                value = fn(value, part(env))
            return value
        return run

    product = sum

    def neg(self, tree: ParseTree) -> Run:
        inner = self.build(tree.children[0])
        return lambda env: negate(inner(env))

    def postfix(self, tree: ParseTree) -> Run:
        atom, segments = _tree(tree.children[0]), [_tree(s) for s in tree.children[1:]]
        keys = [self._static_key(s) for s in segments]
        if atom.data == "name":
            static = []
            for seg, key in zip(segments, keys, strict=True):
                if key is _DYNAMIC:
                    break
                static.append((key, seg))
            self._reference(atom, static)
            base = self._root_loader(atom)
        else:
            base = self.build(atom)
        ops = [(key, None, seg.data == "field") if key is not _DYNAMIC
               else (None, self.build(seg.children[0]), False) for seg, key in zip(segments, keys, strict=True)]

        def run(env: Env) -> Any:
            value = base(env)
            for key, index, dotted in ops:
                if value is None:
                    return None
                value = lookup(value, key if index is None else index(env), dotted)
            return value
        return run

    def name(self, tree: ParseTree) -> Run:
        self._reference(tree, [])
        return self._root_loader(tree)

    def call(self, tree: ParseTree) -> Run:
        token, args = _token(tree), tree.children[1:]
        _refuse_keyword(token)
        if token not in FUNCTIONS:
            guess = FUNCTION_ALIASES.get(token.lower()) or closest(token, FUNCTIONS)
            hint = f"did you mean {guess}()?" if guess else "functions: " + ", ".join(FUNCTIONS)
            raise ExpressionError("X305", f"unknown function '{token}'", _start(token), hint)
        low, high, impl = FUNCTIONS[token]
        if not low <= len(args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise ExpressionError("X306", f"{token}() takes {want} argument{'s' * (want != '1')}, "
                                  f"not {len(args)}", _start(token), f"usage: {USAGE[token]}")
        self.funcs.append((str(token), _start(token)))
        parts = [self.build(a) for a in args]
        if not parts:
            return lambda env: impl(env)
        if len(parts) == 1:
            (one,) = parts
            return lambda env: impl(env, one(env))
        return lambda env: impl(env, *[p(env) for p in parts])

    def null(self, tree: ParseTree) -> Run:
        return lambda env: None

    def true(self, tree: ParseTree) -> Run:
        return lambda env: True

    def false(self, tree: ParseTree) -> Run:
        return lambda env: False

    def int(self, tree: ParseTree) -> Run:
        token = _token(tree)
        value = int(token)  # at most MAX_LENGTH digits: within Python's conversion limit
        if value > MAX_INT:
            raise ExpressionError("X301", "integer literal beyond 64 bits", _start(token),
                                  "write a float such as 1e20")
        return lambda env: value

    def float(self, tree: ParseTree) -> Run:
        token = _token(tree)
        value = float(token)
        if not math.isfinite(value):
            raise ExpressionError("X301", "number literal out of range", _start(token))
        return lambda env: value

    def string(self, tree: ParseTree) -> Run:
        value = _unescape(_token(tree))
        return lambda env: value

    def list(self, tree: ParseTree) -> Run:
        parts = [self.build(c) for c in tree.children]
        return lambda env: [p(env) for p in parts]

    def map(self, tree: ParseTree) -> Run:
        items, seen = [], set()
        for pair in tree.children:
            token, value = _token(_tree(pair)), _tree(pair).children[1]
            key = _unescape(token)
            if key in seen:
                raise ExpressionError("X301", f"duplicate key '{key}' in a map", _start(token))
            seen.add(key)
            items.append((key, self.build(value)))
        return lambda env: {k: v(env) for k, v in items}

    # helpers

    def _static_key(self, segment: ParseTree) -> Any:
        if segment.data == "field":
            return str(segment.children[0])
        inner = segment.children[0]
        if isinstance(inner, Tree) and inner.data in ("string", "int"):
            return _unescape(_token(inner)) if inner.data == "string" else int(_token(inner))
        return _DYNAMIC

    def _root_loader(self, tree: ParseTree) -> Run:
        root = str(tree.children[0])
        return lambda env: env.ctx.get(root)

    def _reference(self, tree: ParseTree, static: Sequence[tuple[Any, ParseTree]]) -> None:
        token = _token(tree)
        root = str(token)
        _refuse_keyword(token)
        if root not in ROOTS:
            if root in PYTHON_WORDS:
                raise ExpressionError("X301", f"'{root}' is not a value here", _start(token),
                                      f"write {PYTHON_WORDS[root]} (lowercase), not {root}")
            if root in TERNARY:
                raise ExpressionError("X301", f"'{root}' is not part of the language", _start(token),
                                      TERNARY_HINT)
            if root in FUNCTIONS:
                hint = f"{root} is a function: call it, e.g. {root}(x)"
            else:
                guess = closest(root, ROOTS)
                hint = (f"did you mean '{guess}'? " if guess else "") + (
                    "data starts at input, steps.<id>.output, steps.<id>.status, run, output, item and index in a "
                    "map's steps, or event in a wait's match")
            raise ExpressionError("X302", f"unknown name '{root}'", _start(token), hint)
        step = field = None
        step_at = field_at = _start(token)
        names = [(k, s) for k, s in static]
        if root == "steps" and names and isinstance(names[0][0], str):
            step, step_at = names[0][0], _key_at(names[0][1])
            field_at = step_at
            names = names[1:]
        if root in ("steps", "run") and (step is not None or root == "run") and names \
                and isinstance(names[0][0], str):
            field, field_at = names[0][0], _key_at(names[0][1])
        end = static[-1][1].meta.end_pos if static else _end(token)
        reference = Reference(root, step, field, _start(token), end - _start(token),
                              tuple(k for k, _ in static), tuple(_key_at(s) for _, s in static))
        self.refs.append((reference, step_at, field_at))


def _refuse_keyword(token: Any) -> None:
    """The contextual lexer reads a keyword where none can stand as a name: refuse it."""
    if token in KEYWORDS:
        hint = ("wrap it in parentheses: a == (not b)" if token == "not"
                else "a value or an operator is missing next to it")
        raise ExpressionError("X301", f"'{token}' cannot appear here", _start(token), hint)


def _key_at(segment: ParseTree) -> int:
    inner = segment.children[0]
    return _start(inner) if isinstance(inner, Token) else inner.meta.start_pos


# Lark types a tree's children as rules or terminals and a token's position as optional; the grammar fixes
# which one each child is, and the parser positions every token. These narrow to what the grammar says.

def _tree(node: ParseTree | Token) -> ParseTree:
    """``node``, which the grammar makes a rule (a subtree)."""
    if not isinstance(node, Tree):
        raise TypeError(f"expected a subtree, got the token {node!r}")
    return node


def _token(tree: ParseTree, index: int = 0) -> Token:
    """The child at ``index`` of ``tree``, which the grammar makes a terminal (a token)."""
    child = tree.children[index]
    if not isinstance(child, Token):
        raise TypeError(f"{tree.data}: child {index} is a subtree, not a token")
    return child


def _start(token: Token) -> int:
    """Where ``token`` starts in the expression."""
    if token.start_pos is None:
        raise TypeError(f"the token {token!r} carries no position")
    return token.start_pos


def _end(token: Token) -> int:
    """Where ``token`` ends in the expression."""
    if token.end_pos is None:
        raise TypeError(f"the token {token!r} carries no position")
    return token.end_pos


def _unescape(token: Token) -> str:
    body = str(token)[1:-1]
    if "\\" not in body:
        return body

    def replace(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape in _ESCAPES:
            return _ESCAPES[escape]
        if len(escape) == 11:  # a UTF-16 surrogate pair, as JSON writes it
            high, low = int(escape[1:5], 16), int(escape[7:], 16)
            return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        if len(escape) == 5 and not 0xD800 <= int(escape[1:], 16) <= 0xDFFF:
            return chr(int(escape[1:], 16))
        raise ExpressionError("X301", f"unknown escape '\\{escape[:5]}' in a string",
                              _start(token) + 1 + match.start(),
                              "escapes: \\n \\t \\r \\b \\f \\0 \\/ \\\\ \\' \\\" \\uXXXX")
    return _ESCAPE.sub(replace, body)
