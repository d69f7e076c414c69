"""Diagnostics and errors of the language path (load, schema, expressions, compile, lint).

Every problem found in a definition is a :class:`Diagnostic`: a code, a severity,
a message, a one-line hint and a location (``path:line:column``, 1-based).
Checks yield diagnostics; nothing on the language path raises a bare exception
at a user.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]

_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


@dataclasses.dataclass(frozen=True)
class Location:
    """A 1-based position in a source file."""

    path: str
    line: int = 1
    column: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One finding about a definition: what is wrong, where, and how to fix it."""

    code: str
    message: str
    location: Location
    severity: Severity = "error"
    hint: str | None = None
    #: JSON-pointer-like path of the offending value inside the document, e.g. ``steps/2/next``.
    pointer: str = ""

    def format(self) -> str:
        text = f"{self.location}: {self.severity}[{self.code}]: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.location.path,
            "line": self.location.line,
            "column": self.location.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "pointer": self.pointer,
        }

    def sort_key(self) -> tuple[str, int, int, int, str]:
        loc = self.location
        return (loc.path, _SEVERITY_RANK[self.severity], loc.line, loc.column, self.code)


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Errors before warnings, then in file order; duplicates removed."""
    seen: set[tuple[str, str, Location, Severity]] = set()
    unique = []
    for d in diagnostics:
        key = (d.code, d.message, d.location, d.severity)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return sorted(unique, key=Diagnostic.sort_key)


class DslError(Exception):
    """Root of the language path's exceptions."""


class DefinitionError(DslError):
    """A definition is invalid; carries every diagnostic found."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = sort_diagnostics(diagnostics)
        first = self.diagnostics[0].format() if self.diagnostics else "invalid definition"
        more = len(self.diagnostics) - 1
        super().__init__(first + (f" (and {more} more)" if more > 0 else ""))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]
