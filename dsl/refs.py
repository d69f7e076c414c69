"""Files a definition refers to: JSON Schemas (``{$ref: path}``) and prompts (``{id, version}``).

Paths are relative to the repository root: the nearest ancestor directory of the
definition that holds ``.git``, else the definition's own folder (never the current
directory, which would make the plan depend on where the command ran). A path that
leaves that root (``..``, an absolute path, a symbolic link pointing out) is refused.
Referenced content is inlined into the plan, so the plan's digest covers it.

:func:`recording` collects the files a compile reads (path relative to the root -> text): a signed
definition is stored with them, so an executing process can compile the same bytes again.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sealflow.dsl.compiling import CompileContext
from sealflow.dsl.document import Pointer
from sealflow.dsl.loader import Document
from sealflow.dsl.model import SchemaRef

MAX_REF_BYTES = 1024 * 1024

_RECORDING: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sealflow_refs", default=None)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, str]]:
    """Collect every referenced file the compiles in this block read (relative path -> text)."""
    files: dict[str, str] = {}
    token = _RECORDING.set(files)
    try:
        yield files
    finally:
        _RECORDING.reset(token)


def read_recorded(root: Path, rel: str) -> str | None:
    """The text of ``root/rel`` (None: unreadable), recorded like a referenced file (a called definition, its
    signature files): an executing process verifying signed bytes finds them again among the stored files."""
    try:
        target = (root / rel).resolve()
        target.relative_to(root.resolve())
        if target.stat().st_size > MAX_REF_BYTES:
            return None
        text = target.read_bytes().decode("utf-8")  # (as written: a signature covers the exact bytes)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    files = _RECORDING.get()
    if files is not None:
        files[rel] = text
    return text


def record(rel: str, text: str) -> None:
    """Record a file a compile read (relative to its root) when a :func:`recording` is on."""
    files = _RECORDING.get()
    if files is not None:
        files[rel] = text


def repository_root(path: str | Path) -> Path:
    """The nearest ancestor of the definition holding ``.git``; without one, the definition's folder."""
    p = Path(path).resolve().parent
    for candidate in (p, *p.parents):
        if (candidate / ".git").exists():
            return candidate
    return p


class SchemaResolver:
    def __init__(self, doc: Document, root: Path | None = None):
        self.doc = doc
        self.root = Path(root) if root else repository_root(doc.path)
        self._cache: dict[str, Any] = {}

    def _read(self, rel: str, pointer: Pointer, compiler: CompileContext, what: str) -> str | None:
        target = (self.root / rel).resolve()
        try:
            target.relative_to(self.root.resolve())
        except ValueError:
            compiler.error("S207", f"{what} {rel!r} points outside the repository ({self.root})", pointer,
                           "use a path inside the repository, relative to its root (the folder holding .git, "
                           "else the definition's folder)")
            return None
        try:
            if target.stat().st_size > MAX_REF_BYTES:
                compiler.error("S207", f"{what} {rel!r} is over {MAX_REF_BYTES} bytes", pointer)
                return None
            text = target.read_text(encoding="utf-8")
            files = _RECORDING.get()
            if files is not None:
                files[rel] = text
            return text
        except (OSError, UnicodeDecodeError) as exc:
            compiler.error("S207", f"cannot read {what} {rel!r} (looked in {self.root}): "
                           f"{getattr(exc, 'strerror', None) or exc}", pointer,
                           "paths are relative to the repository root (the folder holding .git, else the "
                           "definition's folder)")
            return None

    def schema(self, spec: Any, pointer: Pointer, compiler: CompileContext) -> dict[str, Any] | None:
        """The JSON Schema at ``pointer``, with a top-level ``$ref`` to a file inlined."""
        if spec is None:
            return None
        from sealflow.dsl.schema import validate_embedded_schema

        if isinstance(spec, SchemaRef):
            rel = spec.ref
            if rel not in self._cache:
                text = self._read(rel, pointer + ("$ref",), compiler, "schema file")
                value = None
                if text is not None:
                    try:
                        value = json.loads(text)
                    except json.JSONDecodeError as exc:
                        compiler.error("S207", f"schema file {rel!r} is not valid JSON: {exc.msg} at line {exc.lineno} "
                                       f"column {exc.colno}", pointer + ("$ref",))
                    if value is not None and not isinstance(value, dict):
                        compiler.error("S207", f"schema file {rel!r} must hold a JSON object", pointer + ("$ref",))
                        value = None
                self._cache[rel] = value
            value = self._cache[rel]
            if value is None:
                return None
            where = pointer + ("$ref",)
        else:
            value, where = dict(spec), pointer
        for diag in validate_embedded_schema(value, self.doc, where):
            compiler.diagnostics.append(diag)
        return value

    def prompt(self, prompt_id: str, version: Any, pointer: Pointer, compiler: CompileContext) -> str | None:
        rel = f"prompts/{prompt_id}.v{version}.txt"
        return self._read(rel, pointer + ("id",), compiler, "prompt file")
