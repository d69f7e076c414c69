"""Values of the expression language: types, truthiness, equality, operators, text.

Values are JSON's (null, booleans, numbers, strings, lists, maps); the semantics are
described in :mod:`sealflow.dsl.expressions`. Every operation here checks its operand types and
the bounds below and raises :class:`EvaluationError` rather than a Python error.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from typing import Any, TypeVar

from sealflow.dsl.expressions.errors import EvaluationError

_T = TypeVar("_T")
_Number = TypeVar("_Number", int, float)

MAX_STRING = 1_000_000
MAX_ITEMS = 100_000
MAX_INT = 2**63 - 1


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


def number(v: _Number) -> _Number:
    """``v`` if it is a finite float or a 64-bit integer, else an :class:`EvaluationError`."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise EvaluationError("number out of range (not finite)")
    elif not -MAX_INT - 1 <= v <= MAX_INT:
        raise EvaluationError("integer out of range (more than 64 bits)")
    return v


def sized(v: _T) -> _T:
    """``v`` if it is within the bounds of strings and collections, else an :class:`EvaluationError`."""
    if isinstance(v, str) and len(v) > MAX_STRING:
        raise EvaluationError(f"string longer than {MAX_STRING:,} characters")
    if isinstance(v, (list, tuple, dict)) and len(v) > MAX_ITEMS:
        raise EvaluationError(f"{type_name(v)} longer than {MAX_ITEMS:,} items")
    return v


def equal(a: Any, b: Any) -> bool:
    """Structural equality of the language: no equality across types but 1 == 1.0."""
    if _is_num(a) and _is_num(b):
        return bool(a == b)
    if type_name(a) != type_name(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return bool(a == b)


def contains(container: Any, item: Any) -> bool:
    """``item in container``: an item of a list, a substring of a string, a key of a map; false in null."""
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


def _ordered(symbol: str, op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if (_is_num(a) and _is_num(b)) or (isinstance(a, str) and isinstance(b, str)):
            return bool(op(a, b))
        raise EvaluationError(f"cannot compare {type_name(a)} {symbol} {type_name(b)}")
    return compare


def _add(a: Any, b: Any) -> Any:
    if _is_num(a) and _is_num(b):
        return number(a + b)
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


def _arithmetic(symbol: str, op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        if not (_is_num(a) and _is_num(b)):
            raise EvaluationError(f"'{symbol}' needs numbers, not {type_name(a)} and {type_name(b)}")
        if symbol in "/%" and b == 0:
            raise EvaluationError("division by zero")
        return number(op(a, b))
    return apply


def negate(v: Any) -> Any:
    """``-v`` of a number."""
    if not _is_num(v):
        raise EvaluationError(f"'-' needs a number, not {type_name(v)}")
    return number(-v)


def lookup(value: Any, key: Any, dotted: bool) -> Any:
    """One step of a path, ``value.key`` (``dotted``) or ``value[key]``: null where nothing is."""
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


def _check_text_size(value: Any) -> None:
    """Refuse ``value`` if its JSON text would surely exceed :data:`MAX_STRING`, without building it.

    Counts a lower bound of the text's length (strings, numbers and punctuation), stopping as soon
    as the bound passes the limit, so the walk costs at most about MAX_STRING steps.
    """
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            for key, sub in item.items():
                total += len(key) if isinstance(key, str) else 0
                stack.append(sub)
        elif isinstance(item, (list, tuple)):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += 1
        if total > MAX_STRING:
            raise EvaluationError(f"text of this {type_name(value)} would be longer than {MAX_STRING:,} characters")


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
        _check_text_size(value)  # before building it: 500 references to a 4 MB string are 2 GB of JSON
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise EvaluationError(f"cannot turn a {type_name(value)} into text: {exc}") from None
    return sized(text)


# ---------------------------------------------------------------- operators

COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": equal, "!=": lambda a, b: not equal(a, b),
    "<": _ordered("<", operator.lt), "<=": _ordered("<=", operator.le),
    ">": _ordered(">", operator.gt), ">=": _ordered(">=", operator.ge),
    "in": lambda a, b: contains(b, a), "not in": lambda a, b: not contains(b, a)}
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add, "-": _arithmetic("-", operator.sub), "*": _arithmetic("*", operator.mul),
    "/": _arithmetic("/", operator.truediv), "%": _arithmetic("%", operator.mod)}


class Env:
    """What a compiled expression runs against: the context and the clock."""

    __slots__ = ("ctx", "clock")

    def __init__(self, ctx: dict[str, Any], clock: Callable[[], float]):
        self.ctx, self.clock = ctx, clock
