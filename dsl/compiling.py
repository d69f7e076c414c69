"""What the compiler's helpers (schema references, static expression checks) see of a compilation.

:class:`~sealflow.dsl.compiler.Compiler` satisfies :class:`CompileContext`; the helpers are typed
against this protocol so that they need not import the compiler that calls them.
"""

from __future__ import annotations

from typing import Protocol

from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.loader import Document
from sealflow.dsl.model import Definition


class CompileContext(Protocol):
    """The document being compiled, its definition, and where diagnostics go."""

    doc: Document
    d: Definition
    diagnostics: list[Diagnostic]

    def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
              key: bool = False) -> None: ...
