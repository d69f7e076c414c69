"""The functions an expression may call: :data:`FUNCTIONS`, pure and strict about types."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from sealflow.dsl.expressions.errors import EvaluationError
from sealflow.dsl.expressions.values import contains, number, sized, to_text, type_name


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
        return number(int(v))
    if isinstance(v, str) and _INT_TEXT.match(v.strip()):
        return number(int(v.strip()))
    raise EvaluationError(f"int() cannot convert {type_name(v)} {to_text(v, null='null')[:40]!r}")


def _fn_float(env: Any, v: Any) -> float:
    if isinstance(v, (bool, int, float)):
        return number(float(v))
    if isinstance(v, str) and len(v) < 400 and _FLOAT_TEXT.match(v.strip()):
        return number(float(v.strip()))
    raise EvaluationError(f"float() cannot convert {type_name(v)} {to_text(v, null='null')[:40]!r}")


def _fn_duration(env: Any, v: Any) -> float:
    match = _DURATION.match(_text_arg("duration", v).strip())
    if not match:
        raise EvaluationError(f"duration() needs text like '500ms', '30s', '15m', '24h' or '7d', not {v[:40]!r}")
    return number(float(match.group(1)) * _UNITS[match.group(2)])


#: name -> (minimum arguments, maximum arguments, implementation(env, *args))
FUNCTIONS: dict[str, tuple[int, int, Callable[..., Any]]] = {
    "len": (1, 1, _fn_len),
    "lower": (1, 1, lambda env, s: sized(_text_arg("lower", s).lower())),
    "upper": (1, 1, lambda env, s: sized(_text_arg("upper", s).upper())),
    "contains": (2, 2, lambda env, haystack, needle: contains(haystack, needle)),
    "startswith": (2, 2, lambda env, s, p: _text_arg("startswith", s).startswith(_text_arg("startswith", p))),
    "endswith": (2, 2, lambda env, s, p: _text_arg("endswith", s).endswith(_text_arg("endswith", p))),
    "default": (2, 2, lambda env, value, fallback: fallback if value is None else value),
    "int": (1, 1, _fn_int),
    "float": (1, 1, _fn_float),
    "str": (1, 1, lambda env, v: to_text(v, null="null")),
    "now": (0, 0, lambda env: number(float(env.clock()))),
    "duration": (1, 1, _fn_duration),
}
USAGE = {"len": "len(x)", "lower": "lower(text)", "upper": "upper(text)",
          "contains": "contains(haystack, needle)", "startswith": "startswith(text, prefix)",
          "endswith": "endswith(text, suffix)", "default": "default(value, fallback)",
          "int": "int(x)", "float": "float(x)", "str": "str(x)", "now": "now()",
          "duration": "duration('15m')"}
FUNCTION_ALIASES = {"length": "len", "size": "len", "count": "len", "coalesce": "default",
                     "includes": "contains", "has": "contains", "string": "str", "tostring": "str",
                     "starts_with": "startswith", "ends_with": "endswith", "number": "float"}
