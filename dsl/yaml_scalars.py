"""Scalars of a definition's YAML: the YAML 1.2 core schema, with numbers JSON can hold exactly.

Used by :mod:`sealflow.dsl.loader`. A plain scalar resolves to null, a boolean, an integer, a float or
a string; only the core tags are allowed. Numbers are bounded where they are read (issue 9): an
integer beyond ±(2^53 - 1) is refused before thousands of digits are converted (``Y113``), and a
number that reads as infinity or runs over 400 characters is refused (``Y110``), rather than becoming
``null`` in the plan or crashing the canonical JSON of its digest.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import yaml

CORE_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_SPECIAL_FLOAT = re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
#: the largest integer every JSON reader (and RFC 8785, which the plan digest uses) holds exactly
MAX_SAFE_INT = 2**53 - 1
#: digits read before refusing a number: more can never be a safe integer or a finite float worth keeping
_MAX_NUMBER_CHARS = 400


@dataclasses.dataclass(frozen=True)
class Pos:
    """0-based line and column and absolute character index of a mark."""

    line: int
    column: int
    index: int


class LoadError(Exception):
    """A refusal with a code, a message, where it is and a hint."""

    def __init__(self, code: str, message: str, pos: Pos, hint: str | None = None):
        super().__init__(message)
        self.code, self.message, self.pos, self.hint = code, message, pos, hint


def mark_pos(mark: Any) -> Pos:
    return Pos(mark.line, mark.column, getattr(mark, "index", 0) or 0)


def resolve_scalar(event: yaml.ScalarEvent, pos: Pos) -> Any:
    value, tag, style = event.value, event.tag, event.style
    plain_implicit = event.implicit[0]
    if tag not in (None, "!") and not (plain_implicit and tag is None):
        if tag not in CORE_TAGS:
            raise LoadError(
                "Y104",
                f"tag {tag!r} is not allowed; definitions use plain YAML data only",
                pos,
                "remove the tag: only strings, numbers, booleans, null, lists and maps are allowed",
            )
        return _construct_tagged(tag, value, pos)
    if tag == "!" or style not in (None, ""):
        return value  # quoted or non-specific tag: a string
    return _resolve_plain(value, pos)


_SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int, "float": (int, float), "bool": bool, "null": type(None),
}


def _resolve_plain(value: str, pos: Pos) -> Any:
    if _NULL.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    if _INT10.match(value):
        return _safe_int(value, value.lstrip("+-").lstrip("0"), 10, pos)
    if _INT8.match(value):
        return _safe_int(value, value[2:].lstrip("0"), 8, pos)
    if _INT16.match(value):
        return _safe_int(value, value[2:].lstrip("0"), 16, pos)
    if _FLOAT.match(value) and any(c.isdigit() for c in value):
        return _finite_float(value, pos)
    if _SPECIAL_FLOAT.match(value):
        raise LoadError(
            "Y110",
            f"{value!r} (infinity or NaN) cannot be represented in JSON",
            pos,
            "quote it if you meant the string, or use a finite number",
        )
    return value


def _short(value: str) -> str:
    return value if len(value) <= 40 else f"{value[:20]}...{value[-8:]} ({len(value)} characters)"


def _out_of_range(value: str, pos: Pos) -> LoadError:
    return LoadError(
        "Y113",
        f"integer {_short(value)} is outside the safe range ±{MAX_SAFE_INT} (2^53 - 1) that JSON holds exactly",
        pos,
        "quote it if it is an identifier or code, or use a smaller number",
    )


def _safe_int(value: str, digits: str, base: int, pos: Pos) -> int:
    """``value`` as an int, refusing it (before converting thousands of digits) beyond ±(2^53 - 1)."""
    if len(digits) > 20:  # 2^53 has 16 decimal, 18 octal, 14 hex digits: longer is surely out of range
        raise _out_of_range(value, pos)
    number = int(value if base == 10 else value[2:], base)
    if abs(number) > MAX_SAFE_INT:
        raise _out_of_range(value, pos)
    return number


def _finite_float(value: str, pos: Pos) -> float:
    if len(value) > _MAX_NUMBER_CHARS or not math.isfinite(number := float(value)):
        raise LoadError(
            "Y110",
            f"number {_short(value)} is too large (it reads as infinity) or too long "
            f"(over {_MAX_NUMBER_CHARS} characters); JSON cannot hold it",
            pos,
            "use a finite number of ordinary size, or quote it if you meant the string",
        )
    return number


def _construct_tagged(tag: str, value: str, pos: Pos) -> Any:
    short = tag.rsplit(":", 1)[-1]
    if short == "str":
        return value
    if short == "float" and _FLOAT.match(value.strip()) and any(c.isdigit() for c in value):
        # read the text as a float: a long integer is a large float here, not an out-of-range integer
        return _finite_float(value.strip(), pos)
    resolved = _resolve_plain(value, pos)
    expected = _SCALAR_TYPES[short]
    if (short == "int" and isinstance(resolved, bool)) or not isinstance(resolved, expected):
        raise LoadError("Y104", f"{value!r} is not a valid !!{short}", pos)
    if short == "float" and isinstance(resolved, (int, float)):  # always, by the check above
        return float(resolved)
    return resolved


__all__ = ["CORE_TAGS", "MAX_SAFE_INT", "LoadError", "Pos", "mark_pos", "resolve_scalar"]
