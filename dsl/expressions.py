"""The expression language: parse, static references, safe evaluation.

The grammar is ``expressions.lark`` (LALR). :func:`parse` checks the text (syntax,
functions, arity, roots, bounds) and compiles the tree once into small closures;
:func:`evaluate` runs them against a context. There is no Python ``eval``, no
attribute access beyond data paths and no call but the pure functions of
:data:`FUNCTIONS`. Syntax errors with a known cause get a friendly hint from
:data:`CATALOGUE` (see :func:`_diagnose`).

Semantics
---------
* Values are JSON's: null, booleans, numbers (int, float), strings, lists, maps.
  Roots: ``input``, ``steps.<id>.output``, ``steps.<id>.status``, ``run.<field>``
  (:data:`RUN_FIELDS`) and ``output`` (in ``validate`` and ``requires_approval_if``).
* Paths ``a.b``, ``a['k']``, ``a[0]``: a missing key or an index out of range is null,
  and a path stops at null (``steps.x.output.email`` is null when ``x`` did not run),
  so ``default(a, b)`` is useful. Negative indexes count from the end. A field of a
  list, a string key of a list, a number key of a map, or any index into a number or
  a boolean is an :class:`EvaluationError`.
* Truthiness: null, false, 0, 0.0, "", [] and {} are falsy, the rest truthy.
  ``and``/``or`` short-circuit; ``and``/``or``/``not`` give booleans.
* ``==``/``!=`` are structural; values of different types are never equal, except
  numbers (1 == 1.0); true is not 1. ``< <= > >=`` compare numbers with numbers or
  strings with strings; anything else is an EvaluationError. Comparisons do not chain.
* ``x in c``: an item of a list, a substring of a string, a key of a map; ``x in null``
  is false; ``not in`` negates it. ``contains(c, x)`` is ``x in c``.
* ``+`` adds numbers, concatenates two strings or two lists (no string + number: use
  ``str(n)``); ``- * / %`` take numbers; ``/`` is true division, ``%`` takes the sign of
  the divisor; dividing by zero is an EvaluationError.
* Functions are strict about types: ``lower(null)`` is an EvaluationError (use
  ``default``). ``str`` of a map or list is compact JSON, of null ``"null"``;
  ``int('42')``, ``float('1.5')``, ``int(2.7)`` truncates. ``now()`` is epoch seconds
  from the clock; ``duration('15m')`` is seconds (units ms, s, m, h, d).
* Bounds: text up to :data:`MAX_LENGTH` characters and :data:`MAX_DEPTH` levels of
  nesting (X307); results up to 1,000,000 characters or 100,000 items, integers
  within 64 bits, floats finite; exceeding one is an EvaluationError.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import operator
import re
import time
from collections import namedtuple
from typing import Any, Callable

from lark import Lark, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput

from .errors import DslError

MAX_LENGTH = 4096
MAX_DEPTH = 64
MAX_STRING = 1_000_000
MAX_ITEMS = 100_000
MAX_INT = 2**63 - 1

ROOTS = ("input", "steps", "run", "output")
RUN_FIELDS = ("id", "workflow", "version", "initiator", "tenant", "attempt")
STEP_FIELDS = ("output", "status")


class ExpressionError(DslError):
    """A located problem in an expression's text (``offset``: 0-based character)."""

    def __init__(self, code: str, message: str, offset: int = 0, hint: str | None = None,
                 text: str | None = None):
        super().__init__(code, message, offset, hint, text)
        self.code, self.message, self.offset, self.hint, self.text = code, message, offset, hint, text

    def __str__(self) -> str:
        return f"{self.code}: {self.message} (at character {self.offset + 1})"

    def shifted(self, delta: int, text: str | None = None) -> ExpressionError:
        """The same error ``delta`` characters further on, inside ``text``."""
        return ExpressionError(self.code, self.message, self.offset + delta, self.hint,
                               self.text if text is None else text)

    def line_column(self) -> tuple[int, int]:
        """1-based line and column of the offset in ``text``."""
        before = (self.text or "")[: self.offset]
        return before.count("\n") + 1, self.offset - (before.rfind("\n") + 1) + 1

    def caret(self) -> str:
        """The offending line of the text with a caret under the offending character."""
        text = self.text or ""
        start = text.rfind("\n", 0, self.offset) + 1
        end = text.find("\n", self.offset)
        return f"{text[start:end if end >= 0 else len(text)]}\n{' ' * (self.offset - start)}^"


class EvaluationError(DslError):
    """A runtime problem evaluating an expression (type mismatch, bound exceeded, bad argument)."""

    @property
    def message(self) -> str:
        return str(self)


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
    path: tuple = dataclasses.field(default=(), compare=False)


class Expression:
    """A parsed, checked expression, compiled for evaluation; immutable."""

    __slots__ = ("text", "_run", "_refs", "_funcs")

    def __init__(self, text: str, run: Callable, refs: list, funcs: list):
        self.text, self._run, self._refs, self._funcs = text, run, tuple(refs), tuple(funcs)

    def references(self) -> list[Reference]:
        return [ref for ref, _, _ in self._refs]

    def functions(self) -> list[tuple[str, int]]:
        return list(self._funcs)

    def evaluate(self, context: dict, *, clock: Callable[[], float] | None = None) -> Any:
        return evaluate(self, context, clock=clock)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


@functools.cache
def _parser() -> Lark:
    return Lark.open("expressions.lark", rel_to=__file__, parser="lalr", propagate_positions=True)


# ---------------------------------------------------------------- values

def type_name(value: Any) -> str:
    """The language's name for the type of ``value``."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, (int, float, str, list, tuple, dict)):
        return bool(value)
    return True


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(v: Any) -> Any:
    if isinstance(v, float):
        if not math.isfinite(v):
            raise EvaluationError("number out of range (not finite)")
    elif not -MAX_INT - 1 <= v <= MAX_INT:
        raise EvaluationError("integer out of range (more than 64 bits)")
    return v


def _sized(v: Any) -> Any:
    if isinstance(v, str) and len(v) > MAX_STRING:
        raise EvaluationError(f"string longer than {MAX_STRING:,} characters")
    if isinstance(v, (list, tuple, dict)) and len(v) > MAX_ITEMS:
        raise EvaluationError(f"{type_name(v)} longer than {MAX_ITEMS:,} items")
    return v


def equal(a: Any, b: Any) -> bool:
    """Structural equality of the language: no equality across types but 1 == 1.0."""
    if _is_num(a) and _is_num(b):
        return a == b
    if type_name(a) != type_name(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return a == b


def _contains(container: Any, item: Any) -> bool:
    if container is None:
        return False
    if isinstance(container, str):
        if isinstance(item, str):
            return item in container
        raise EvaluationError(f"'in' a string needs a string, not {type_name(item)}")
    if isinstance(container, (list, tuple)):
        return any(equal(item, x) for x in container)
    if isinstance(container, dict):
        return isinstance(item, str) and item in container
    raise EvaluationError(f"'in' needs a list, map or string, not {type_name(container)}")


def _ordered(symbol: str, op: Callable) -> Callable:
    def compare(a: Any, b: Any) -> bool:
        if (_is_num(a) and _is_num(b)) or (isinstance(a, str) and isinstance(b, str)):
            return op(a, b)
        raise EvaluationError(f"cannot compare {type_name(a)} {symbol} {type_name(b)}")
    return compare


def _add(a: Any, b: Any) -> Any:
    if _is_num(a) and _is_num(b):
        return _number(a + b)
    if isinstance(a, str) and isinstance(b, str):
        if len(a) + len(b) > MAX_STRING:
            raise EvaluationError(f"string longer than {MAX_STRING:,} characters")
        return a + b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) + len(b) > MAX_ITEMS:
            raise EvaluationError(f"list longer than {MAX_ITEMS:,} items")
        return [*a, *b]
    hint = " (use str() to turn a value into text)" if isinstance(a, str) or isinstance(b, str) else ""
    raise EvaluationError(f"cannot add {type_name(a)} and {type_name(b)}{hint}")


def _arithmetic(symbol: str, op: Callable) -> Callable:
    def apply(a: Any, b: Any) -> Any:
        if not (_is_num(a) and _is_num(b)):
            raise EvaluationError(f"'{symbol}' needs numbers, not {type_name(a)} and {type_name(b)}")
        if symbol in "/%" and b == 0:
            raise EvaluationError("division by zero")
        return _number(op(a, b))
    return apply


def _negate(v: Any) -> Any:
    if not _is_num(v):
        raise EvaluationError(f"'-' needs a number, not {type_name(v)}")
    return _number(-v)


def _get(value: Any, key: Any, dotted: bool) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        if isinstance(key, str):
            return value.get(key)
        raise EvaluationError(f"a map is indexed by a string, not {type_name(key)}")
    if isinstance(value, (list, tuple, str)) and not dotted:
        if isinstance(key, int) and not isinstance(key, bool):
            return value[key] if -len(value) <= key < len(value) else None
        raise EvaluationError(f"a {type_name(value)} is indexed by an integer, not {type_name(key)}")
    what = f"read field '{key}' of" if dotted else "index"
    raise EvaluationError(f"cannot {what} a {type_name(value)}")


def to_text(value: Any, *, null: str = "") -> str:
    """Text of a value for interpolation: null -> ``null``, maps/lists -> compact JSON."""
    if value is None:
        return null
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    try:
        if isinstance(value, (int, float)):
            return repr(value) if isinstance(value, float) else str(value)
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise EvaluationError(f"cannot turn a {type_name(value)} into text: {exc}") from None
    return _sized(text)


# ---------------------------------------------------------------- functions

def _text_arg(name: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    tip = " (use default(x, '') for a value that may be null)" if v is None else ""
    raise EvaluationError(f"{name}() needs a string, not {type_name(v)}{tip}")


def _fn_len(env: Any, v: Any) -> int:
    if isinstance(v, (str, list, tuple, dict)):
        return len(v)
    tip = " (use default(x, []) for a value that may be null)" if v is None else ""
    raise EvaluationError(f"len() needs a string, list or map, not {type_name(v)}{tip}")


_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}\Z")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)\Z")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _fn_int(env: Any, v: Any) -> int:
    if isinstance(v, (bool, int)):
        return int(v)
    if isinstance(v, float) and math.isfinite(v):
        return _number(int(v))
    if isinstance(v, str) and _INT_TEXT.match(v.strip()):
        return _number(int(v.strip()))
    raise EvaluationError(f"int() cannot convert {type_name(v)} {to_text(v, null='null')[:40]!r}")


def _fn_float(env: Any, v: Any) -> float:
    if isinstance(v, (bool, int, float)):
        return _number(float(v))
    if isinstance(v, str) and len(v) < 400 and _FLOAT_TEXT.match(v.strip()):
        return _number(float(v.strip()))
    raise EvaluationError(f"float() cannot convert {type_name(v)} {to_text(v, null='null')[:40]!r}")


def _fn_duration(env: Any, v: Any) -> float:
    match = _DURATION.match(_text_arg("duration", v).strip())
    if not match:
        raise EvaluationError(f"duration() needs text like '500ms', '30s', '15m', '24h' or '7d', not {v[:40]!r}")
    return _number(float(match.group(1)) * _UNITS[match.group(2)])


#: name -> (minimum arguments, maximum arguments, implementation(env, *args))
FUNCTIONS: dict[str, tuple[int, int, Callable[..., Any]]] = {
    "len": (1, 1, _fn_len),
    "lower": (1, 1, lambda env, s: _sized(_text_arg("lower", s).lower())),
    "upper": (1, 1, lambda env, s: _sized(_text_arg("upper", s).upper())),
    "contains": (2, 2, lambda env, haystack, needle: _contains(haystack, needle)),
    "startswith": (2, 2, lambda env, s, p: _text_arg("startswith", s).startswith(_text_arg("startswith", p))),
    "endswith": (2, 2, lambda env, s, p: _text_arg("endswith", s).endswith(_text_arg("endswith", p))),
    "default": (2, 2, lambda env, value, fallback: fallback if value is None else value),
    "int": (1, 1, _fn_int),
    "float": (1, 1, _fn_float),
    "str": (1, 1, lambda env, v: to_text(v, null="null")),
    "now": (0, 0, lambda env: _number(float(env.clock()))),
    "duration": (1, 1, _fn_duration),
}
_USAGE = {"len": "len(x)", "lower": "lower(text)", "upper": "upper(text)",
          "contains": "contains(haystack, needle)", "startswith": "startswith(text, prefix)",
          "endswith": "endswith(text, suffix)", "default": "default(value, fallback)",
          "int": "int(x)", "float": "float(x)", "str": "str(x)", "now": "now()",
          "duration": "duration('15m')"}
_FUNCTION_ALIASES = {"length": "len", "size": "len", "count": "len", "coalesce": "default",
                     "includes": "contains", "has": "contains", "string": "str", "tostring": "str",
                     "starts_with": "startswith", "ends_with": "endswith", "number": "float"}

_COMPARE = {"==": equal, "!=": lambda a, b: not equal(a, b),
            "<": _ordered("<", operator.lt), "<=": _ordered("<=", operator.le),
            ">": _ordered(">", operator.gt), ">=": _ordered(">=", operator.ge),
            "in": lambda a, b: _contains(b, a), "not in": lambda a, b: not _contains(b, a)}
_BINARY = {"+": _add, "-": _arithmetic("-", operator.sub), "*": _arithmetic("*", operator.mul),
           "/": _arithmetic("/", operator.truediv), "%": _arithmetic("%", operator.mod)}


class _Env:
    __slots__ = ("ctx", "clock")

    def __init__(self, ctx: dict, clock: Callable[[], float]):
        self.ctx, self.clock = ctx, clock


# ---------------------------------------------------------------- compiler

#: JSON's escapes, plus \' and \0
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0", "\\": "\\", "'": "'",
            '"': '"', "/": "/"}
_ESCAPE = re.compile(r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.S)
_KEYWORDS = ("and", "or", "not", "in", "null", "true", "false")
_PYTHON_WORDS = {"None": "null", "NULL": "null", "nil": "null", "True": "true", "False": "false"}
_TERNARY = ("if", "else", "elif")
_TERNARY_HINT = ("expressions have no if/else: branch with a switch step, or use "
                 "default(x, fallback) for a fallback value")
_DYNAMIC = object()


def _closest(word: str, choices: Any) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1)
    return found[0] if found else None


class _Compiler:
    """Turns a Lark tree into closures ``run(env) -> value``; one method per rule."""

    def __init__(self) -> None:
        self.refs: list = []
        self.funcs: list = []

    def build(self, tree: Tree) -> Callable:
        return getattr(self, tree.data)(tree)

    def or_test(self, tree: Tree) -> Callable:
        parts = [self.build(c) for c in tree.children]
        return lambda env: any(truthy(p(env)) for p in parts)

    def and_test(self, tree: Tree) -> Callable:
        parts = [self.build(c) for c in tree.children]
        return lambda env: all(truthy(p(env)) for p in parts)

    def not_(self, tree: Tree) -> Callable:
        inner = self.build(tree.children[-1])
        return lambda env: not truthy(inner(env))

    def comparison(self, tree: Tree) -> Callable:
        left, op, right = tree.children
        a, b, fn = self.build(left), self.build(right), _COMPARE[" ".join(op.children)]
        return lambda env: fn(a(env), b(env))

    def sum(self, tree: Tree) -> Callable:
        first = self.build(tree.children[0])
        rest = [(_BINARY[op.children[0]], self.build(x))
                for op, x in zip(tree.children[1::2], tree.children[2::2])]
        if len(rest) == 1:
            (fn, second), = rest
            return lambda env: fn(first(env), second(env))

        def run(env: _Env) -> Any:
            value = first(env)
            for fn, part in rest:
                value = fn(value, part(env))
            return value
        return run

    product = sum

    def neg(self, tree: Tree) -> Callable:
        inner = self.build(tree.children[0])
        return lambda env: _negate(inner(env))

    def postfix(self, tree: Tree) -> Callable:
        atom, *segments = tree.children
        keys = [self._static_key(s) for s in segments]
        if atom.data == "name":
            static = []
            for seg, key in zip(segments, keys):
                if key is _DYNAMIC:
                    break
                static.append((key, seg))
            self._reference(atom, static)
            base = self._root_loader(atom)
        else:
            base = self.build(atom)
        ops = [(key, None, seg.data == "field") if key is not _DYNAMIC
               else (None, self.build(seg.children[0]), False) for seg, key in zip(segments, keys)]

        def run(env: _Env) -> Any:
            value = base(env)
            for key, index, dotted in ops:
                if value is None:
                    return None
                value = _get(value, key if index is None else index(env), dotted)
            return value
        return run

    def name(self, tree: Tree) -> Callable:
        self._reference(tree, [])
        return self._root_loader(tree)

    def call(self, tree: Tree) -> Callable:
        token, *args = tree.children
        _refuse_keyword(token)
        if token not in FUNCTIONS:
            guess = _FUNCTION_ALIASES.get(token.lower()) or _closest(token, FUNCTIONS)
            hint = f"did you mean {guess}()?" if guess else "functions: " + ", ".join(FUNCTIONS)
            raise ExpressionError("X305", f"unknown function '{token}'", token.start_pos, hint)
        low, high, impl = FUNCTIONS[token]
        if not low <= len(args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise ExpressionError("X306", f"{token}() takes {want} argument{'s' * (want != '1')}, "
                                  f"not {len(args)}", token.start_pos, f"usage: {_USAGE[token]}")
        self.funcs.append((str(token), token.start_pos))
        parts = [self.build(a) for a in args]
        if not parts:
            return lambda env: impl(env)
        if len(parts) == 1:
            (one,) = parts
            return lambda env: impl(env, one(env))
        return lambda env: impl(env, *[p(env) for p in parts])

    def null(self, tree: Tree) -> Callable:
        return lambda env: None

    def true(self, tree: Tree) -> Callable:
        return lambda env: True

    def false(self, tree: Tree) -> Callable:
        return lambda env: False

    def int(self, tree: Tree) -> Callable:
        token = tree.children[0]
        value = int(token)  # at most MAX_LENGTH digits: within Python's conversion limit
        if value > MAX_INT:
            raise ExpressionError("X301", "integer literal beyond 64 bits", token.start_pos,
                                  "write a float such as 1e20")
        return lambda env: value

    def float(self, tree: Tree) -> Callable:
        token = tree.children[0]
        value = float(token)
        if not math.isfinite(value):
            raise ExpressionError("X301", "number literal out of range", token.start_pos)
        return lambda env: value

    def string(self, tree: Tree) -> Callable:
        value = _unescape(tree.children[0])
        return lambda env: value

    def list(self, tree: Tree) -> Callable:
        parts = [self.build(c) for c in tree.children]
        return lambda env: [p(env) for p in parts]

    def map(self, tree: Tree) -> Callable:
        items, seen = [], set()
        for pair in tree.children:
            token, value = pair.children
            key = _unescape(token)
            if key in seen:
                raise ExpressionError("X301", f"duplicate key '{key}' in a map", token.start_pos)
            seen.add(key)
            items.append((key, self.build(value)))
        return lambda env: {k: v(env) for k, v in items}

    # helpers

    def _static_key(self, segment: Tree) -> Any:
        if segment.data == "field":
            return str(segment.children[0])
        inner = segment.children[0]
        if isinstance(inner, Tree) and inner.data in ("string", "int"):
            return _unescape(inner.children[0]) if inner.data == "string" else int(inner.children[0])
        return _DYNAMIC

    def _root_loader(self, tree: Tree) -> Callable:
        root = str(tree.children[0])
        return lambda env: env.ctx.get(root)

    def _reference(self, tree: Tree, static: list) -> None:
        token = tree.children[0]
        root = str(token)
        _refuse_keyword(token)
        if root not in ROOTS:
            if root in _PYTHON_WORDS:
                raise ExpressionError("X301", f"'{root}' is not a value here", token.start_pos,
                                      f"write {_PYTHON_WORDS[root]} (lowercase), not {root}")
            if root in _TERNARY:
                raise ExpressionError("X301", f"'{root}' is not part of the language", token.start_pos,
                                      _TERNARY_HINT)
            if root in FUNCTIONS:
                hint = f"{root} is a function: call it, e.g. {root}(x)"
            else:
                guess = _closest(root, ROOTS)
                hint = (f"did you mean '{guess}'? " if guess else "") + (
                    "data starts at input, steps.<id>.output, steps.<id>.status, run or output")
            raise ExpressionError("X302", f"unknown name '{root}'", token.start_pos, hint)
        step = field = None
        step_at = field_at = token.start_pos
        names = [(k, s) for k, s in static]
        if root == "steps" and names and isinstance(names[0][0], str):
            step, step_at = names[0][0], _key_at(names[0][1])
            field_at = step_at
            names = names[1:]
        if root in ("steps", "run") and (step is not None or root == "run") and names \
                and isinstance(names[0][0], str):
            field, field_at = names[0][0], _key_at(names[0][1])
        end = static[-1][1].meta.end_pos if static else token.end_pos
        reference = Reference(root, step, field, token.start_pos, end - token.start_pos,
                              tuple(k for k, _ in static))
        self.refs.append((reference, step_at, field_at))


def _refuse_keyword(token: Any) -> None:
    """The contextual lexer reads a keyword where none can stand as a name: refuse it."""
    if token in _KEYWORDS:
        hint = ("wrap it in parentheses: a == (not b)" if token == "not"
                else "a value or an operator is missing next to it")
        raise ExpressionError("X301", f"'{token}' cannot appear here", token.start_pos, hint)


def _key_at(segment: Tree) -> int:
    inner = segment.children[0]
    return inner.start_pos if segment.data == "field" else inner.meta.start_pos


def _unescape(token: Any) -> str:
    body = str(token)[1:-1]
    if "\\" not in body:
        return body

    def replace(match: re.Match) -> str:
        escape = match.group(1)
        if escape in _ESCAPES:
            return _ESCAPES[escape]
        if len(escape) == 11:  # a UTF-16 surrogate pair, as JSON writes it
            high, low = int(escape[1:5], 16), int(escape[7:], 16)
            return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        if len(escape) == 5 and not 0xD800 <= int(escape[1:], 16) <= 0xDFFF:
            return chr(int(escape[1:], 16))
        raise ExpressionError("X301", f"unknown escape '\\{escape[:5]}' in a string",
                              token.start_pos + 1 + match.start(),
                              "escapes: \\n \\t \\r \\b \\f \\0 \\/ \\\\ \\' \\\" \\uXXXX")
    return _ESCAPE.sub(replace, body)


def _check_depth(tree: Tree) -> None:
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExpressionError("X307", f"expression nested deeper than {MAX_DEPTH} levels",
                                  node.meta.start_pos if not node.meta.empty else 0,
                                  "split it: compute parts in a set step")
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))




# ---------------------------------------------------------------- syntax diagnosis

_Tok = namedtuple("_Tok", "kind value start end")
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<quote>['"])
  | (?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\$\{\{|===|!==|==|!=|<=|>=|&&|\|\||[-+*/%<>=!()\[\]{},.:$&|])
  | (?P<other>.)
""", re.X | re.S)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")": "(", "]": "[", "}": "{"}
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "in")
_LEXICAL = {
    "=": ("'=' is not an operator", "use == to compare: input.x == 'a'"),
    "===": ("'===' is not an operator", "use == (values of different types are never equal)"),
    "!==": ("'!==' is not an operator", "use != to test for difference"),
    "&&": ("'&&' is not an operator", "use 'and': a and b"),
    "&": ("'&' is not an operator", "use 'and': a and b"),
    "||": ("'||' is not an operator", "use 'or': a or b"),
    "|": ("'|' is not an operator", "use 'or': a or b"),
    "!": ("'!' is not an operator", "use 'not': not input.done ('!=' is fine)"),
    "$": ("'$' is not part of an expression",
          "refer to data without '$': input.x, steps.<id>.output, run.id"),
    "${{": ("'${{' inside a bare expression",
            "this field takes a bare expression: write input.x, not ${{ input.x }}"),
}

#: Known malformed inputs and the hint each one gets (all X301); tested one by one.
CATALOGUE: list[tuple[str, str]] = [
    ("input.x = 'a'", "use =="),
    ("input.a && input.b", "use 'and'"),
    ("input.a & input.b", "use 'and'"),
    ("input.a || input.b", "use 'or'"),
    ("!input.done", "use 'not'"),
    ("input.x === 'a'", "use =="),
    ("input.x !== 'a'", "use !="),
    ("input.name == 'abc", "close it with a matching '"),
    ('input.name == "abc', 'close it with a matching "'),
    ("len(input.items", "close it with ')'"),
    ("input.items[0 == 1", "close it with ']'"),
    ("{'a': 1", "close it with '}'"),
    ("(input.a or input.b))", "remove it"),
    ("[1, 2)", "close '[' with ']'"),
    ("input.x == None", "write null"),
    ("input.flag == True", "write true"),
    ("input.flag == False", "write false"),
    ("'a' if input.vip else 'b'", "no if/else"),
    ("if input.vip", "no if/else"),
    ("input.a elif input.b", "no if/else"),
    ("input.name.lower()", "lower(x), not x.lower()"),
    ("input.tags.contains('a')", "contains(x"),
    ("$input.x", "without '$'"),
    ("${{ input.x }}", "bare expression"),
    ("{lead: input.x}", "map keys are quoted"),
    ("input.x == not input.y", "(not b)"),
    ("1 < input.n < 10", "a < b and b < c"),
    ("input.a == 1 == true", "a < b and b < c"),
    ("", "write an expression"),
]


def _scan(text: str) -> list:
    return [_Tok(m.lastgroup, m.group(), m.start(), m.end())
            for m in _TOKEN.finditer(text) if m.lastgroup != "ws"]


def _check_nesting(text: str) -> None:
    depth = 0
    for tok in _scan(text):
        if tok.kind == "op" and tok.value in _OPEN:
            depth += 1
            if depth > MAX_DEPTH:
                raise ExpressionError("X307", f"brackets nested deeper than {MAX_DEPTH} levels",
                                      tok.start, "split it: compute parts in a set step")
        elif tok.kind == "op" and tok.value in _CLOSE:
            depth = max(0, depth - 1)


def _chained(toks: list, i: int) -> bool:
    depth = 0
    for tok in reversed(toks[:i]):
        if tok.value in _CLOSE:
            depth += 1
        elif tok.value in _OPEN:
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and tok.value in ("and", "or", "not", ",", ":"):
            return False
        elif depth == 0 and tok.value in _COMPARISONS:
            return True
    return False


def _diagnose(text: str, pos: int, at_end: bool) -> tuple[int, str, str] | None:
    """A friendly (offset, message, hint) for a syntax error the parser found at ``pos``."""
    toks = _scan(text)
    if not toks:
        return 0, "empty expression", "write an expression, e.g. input.x == 'a'"
    i = next((n for n, t in enumerate(toks) if t.start <= pos < t.end), None)
    here = toks[i] if i is not None else None
    if here is not None:
        if here.kind == "quote":
            return here.start, "unterminated string", (
                f"close it with a matching {here.value}; write \\{here.value} for a quote inside it")
        if here.kind == "op" and here.value in _LEXICAL:
            return (here.start, *_LEXICAL[here.value])
        if here.value == "(" and i >= 2 and toks[i - 1].kind == "name" and toks[i - 2].value == ".":
            name = toks[i - 1].value
            if name not in FUNCTIONS:
                return toks[i - 1].start, f"method calls are not supported: .{name}()", (
                    "there are no methods; call a function with the value as an argument: "
                    + ", ".join(FUNCTIONS))
            call = f"{name}(x, ...)" if FUNCTIONS[name][1] > 1 else f"{name}(x)"
            return toks[i - 1].start, f"method calls are not supported: .{name}()", (
                f"call functions with the value as an argument: {call}, not x.{name}()")
        if here.kind == "name" and here.value in _TERNARY:
            return here.start, f"'{here.value}' is not part of the language", _TERNARY_HINT
        if here.kind == "name" and i > 0 and toks[i - 1].value in ("{", ",") \
                and i + 1 < len(toks) and toks[i + 1].value == ":":
            return here.start, "map keys are quoted strings", (
                f"map keys are quoted strings: {{'{here.value}': ...}}")
        if here.kind == "name" and i >= 2 and toks[i - 1].value in _KEYWORDS and toks[i - 2].value != ".":
            word = toks[i - 1]
            return word.start, f"'{word.value}' cannot appear here", (
                "wrap it in parentheses: a == (not b)" if word.value == "not"
                else "a value or an operator is missing next to it")
        if here.value in _COMPARISONS and _chained(toks, i):
            return here.start, "comparisons do not chain", "write a < b and b < c"
    stack: list = []
    for tok in toks:
        if tok.start > pos:
            break
        if tok.kind != "op":
            continue
        if tok.value in _OPEN:
            stack.append(tok)
        elif tok.value in _CLOSE:
            if stack and stack[-1].value == _CLOSE[tok.value]:
                stack.pop()
            elif stack:
                opener = stack[-1]
                return tok.start, f"'{tok.value}' does not close '{opener.value}' (character " \
                    f"{opener.start + 1})", f"close '{opener.value}' with '{_OPEN[opener.value]}'"
            else:
                return tok.start, f"unmatched '{tok.value}'", "remove it, or add the bracket it closes"
    if at_end and stack:
        opener = stack[-1]
        return opener.start, f"unclosed '{opener.value}'", f"close it with '{_OPEN[opener.value]}'"
    for n, tok in enumerate(toks):
        if tok.start > pos:
            break
        if tok.kind == "name" and (n == 0 or toks[n - 1].value != "."):
            if tok.value in _PYTHON_WORDS:
                word = _PYTHON_WORDS[tok.value]
                return tok.start, f"'{tok.value}' is not a value here", f"write {word} (lowercase), not {tok.value}"
            if tok.value in _TERNARY:
                return tok.start, f"'{tok.value}' is not part of the language", _TERNARY_HINT
    return None


_TERMINAL_WORDS = {"NAME": "a name", "INT": "a number", "FLOAT": "a number", "STRING": "a string",
                   "$END": "the end of the expression", "_OR": "'or'", "_AND": "'and'", "NOT": "'not'",
                   "IN": "'in'", "NULL": "'null'", "TRUE": "'true'", "FALSE": "'false'"}


def _expected(names: Any) -> str:
    names = set(names or ())
    if {"NAME", "STRING"} <= names:
        return "expected a value: a name, number, string, list, map, null, true, false, '(' or '-'"
    if names == {"NAME"}:
        return "expected a field name (letters, digits, _); write x['other-key'] for any other key"
    words = set()
    for name in names:
        if name in _TERMINAL_WORDS:
            words.add(_TERMINAL_WORDS[name])
            continue
        try:
            pattern = _parser().get_terminal(name).pattern
        except (KeyError, AttributeError):
            continue
        words.add(repr(pattern.value) if pattern.type == "str" else name.lower())
    if len(words) > 6:
        return "expected an operator (==, and, or, +, ...), a closing bracket or the end of the expression"
    return "expected " + ", ".join(sorted(words)) if words else "check the syntax"


def _syntax_error(text: str, exc: UnexpectedInput) -> ExpressionError:
    if isinstance(exc, UnexpectedCharacters):
        pos, at_end = exc.pos_in_stream, False
        message, expected = f"unexpected character {text[pos]!r}", exc.allowed
    else:
        token = getattr(exc, "token", None)
        at_end = token is None or token.type == "$END"
        pos = len(text) if at_end else token.start_pos
        if at_end:
            message = "unexpected end of the expression"
        elif token.type in ("NAME", "INT", "FLOAT"):
            message = f"unexpected {_TERMINAL_WORDS[token.type][2:]} '{token}'"
        else:
            message = f"unexpected {token.value!r}"
        expected = getattr(exc, "expected", None)
    known = _diagnose(text, pos, at_end)
    if known:
        return ExpressionError("X301", known[1], known[0], known[2], text)
    return ExpressionError("X301", message, pos, _expected(expected), text)


# ---------------------------------------------------------------- API

def parse(text: str) -> Expression:
    """Parse and check ``text``; raise :class:`ExpressionError` (X301, X302, X305-X307)."""
    if not isinstance(text, str):
        raise ExpressionError("X301", f"an expression is text, not {type_name(text)}", 0)
    if len(text) > MAX_LENGTH:
        raise ExpressionError("X307", f"expression longer than {MAX_LENGTH} characters",
                              MAX_LENGTH, "split it: compute parts in a set step", text)
    try:
        _check_nesting(text)
        try:
            tree = _parser().parse(text)
        except UnexpectedInput as exc:
            raise _syntax_error(text, exc) from None
        except LarkError as exc:  # pragma: no cover - defensive
            raise ExpressionError("X301", f"syntax error: {exc}", 0) from None
        _check_depth(tree)
        compiler = _Compiler()
        run = compiler.build(tree)
    except ExpressionError as exc:
        raise exc.shifted(0, text) from None
    return Expression(text, run, compiler.refs, compiler.funcs)


@functools.lru_cache(maxsize=4096)
def compile_cached(text: str) -> Expression:
    """:func:`parse`, cached (an expression is immutable): for the runtime's hot paths."""
    return parse(text)


def check(expr: Expression, *, known_steps: set[str], ran_before: set[str],
          allow_output: bool) -> list[ExpressionError]:
    """Every static problem of the references: X303, X304, X308, X309, in text order."""
    return sorted(_check(expr, known_steps, ran_before, allow_output), key=lambda e: e.offset)


def _check(expr: Expression, known: set[str], ran: set[str], allow_output: bool):
    def error(code: str, message: str, offset: int, hint: str | None = None) -> ExpressionError:
        return ExpressionError(code, message, offset, hint, expr.text)

    for ref, step_at, field_at in expr._refs:
        if ref.root == "output" and not allow_output:
            yield error("X308", "'output' is only defined in validate and requires_approval_if",
                        ref.offset, "refer to a step's result as steps.<id>.output")
        elif ref.root == "steps":
            if ref.step is None:
                yield error("X303", "'steps' must be followed by a step id", ref.offset,
                            "write steps.<id>.output or steps.<id>.status")
                continue
            if ref.step not in known:
                guess = _closest(ref.step, known)
                yield error("X303", f"unknown step '{ref.step}'", step_at,
                            f"did you mean '{guess}'?" if guess else "steps: " + ", ".join(sorted(known)))
                continue
            if ref.step not in ran:
                yield error("X304", f"step '{ref.step}' cannot have run before this expression",
                            step_at, "only steps that run before this point on every path can be "
                            "read; move the expression or the step")
            if ref.field not in STEP_FIELDS:
                what = f"unknown field '{ref.field}' of" if ref.field else "missing field of"
                yield error("X309", f"{what} steps.{ref.step}", field_at,
                            f"write steps.{ref.step}.output or steps.{ref.step}.status")
        elif ref.root == "run" and ref.field is not None and ref.field not in RUN_FIELDS:
            guess = _closest(ref.field, RUN_FIELDS)
            yield error("X309", f"unknown field '{ref.field}' of run", field_at,
                        (f"did you mean run.{guess}? " if guess else "") + "run has: " + ", ".join(RUN_FIELDS))


def evaluate(expr: Expression, context: dict, *, clock: Callable[[], float] | None = None) -> Any:
    """The value of ``expr`` in ``context``; raise :class:`EvaluationError` on any runtime problem."""
    try:
        return expr._run(_Env(context, clock or time.time))
    except EvaluationError:
        raise
    except RecursionError:
        raise EvaluationError("evaluation nested too deeply") from None
    except (ArithmeticError, ValueError, TypeError, AttributeError, MemoryError) as exc:
        raise EvaluationError(f"cannot evaluate {expr.text[:60]!r}: {exc}") from None
