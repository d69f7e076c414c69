"""The language path as one call: bytes in, diagnostics and (when valid) a Plan out.

    load (located YAML) -> schema -> Definition (pydantic) -> compile -> [lint]

Every stage reports all it finds; a later stage runs only when the earlier ones
found no error. Nothing here raises at the caller for bad input.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealflow.dsl.errors import DefinitionError, Diagnostic, Location, sort_diagnostics
from sealflow.dsl.loader import DEFAULT_LIMITS, Document, Limits, load_bytes, load_file
from sealflow.dsl.model import ActionInfo, Definition
from sealflow.dsl.plan import Plan

if TYPE_CHECKING:
    from sealflow.dsl.typecheck import ProjectFacts

LANGUAGE_VERSIONS = (1,)


@dataclasses.dataclass
class CheckResult:
    path: str
    diagnostics: list[Diagnostic]
    plan: Plan | None = None
    document: Document | None = None
    definition: Definition | None = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors


def _language_check(doc: Document) -> list[Diagnostic]:
    data = doc.data
    if isinstance(data, dict) and "sealflow" in data:
        v = data["sealflow"]
        if isinstance(v, int) and not isinstance(v, bool) and v not in LANGUAGE_VERSIONS:
            return [Diagnostic("C416", f"language version {v} is not supported by this sealflow (it reads "
                               f"{', '.join(map(str, LANGUAGE_VERSIONS))})", doc.locate(("sealflow",)),
                               hint="write 'sealflow: 1', or upgrade sealflow")]
    return []


def _model(doc: Document) -> tuple[Definition | None, list[Diagnostic]]:
    from pydantic import ValidationError

    try:
        return Definition.model_validate(doc.data), []
    except ValidationError as exc:
        diags = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p[:1].isupper() or "[" in str(p)))
            diags.append(Diagnostic("S206", f"{'.'.join(map(str, loc)) or 'document'}: {err['msg']}",
                                    doc.locate(loc), hint="see docs/language.md for this field"))
        return None, diags[:1] if diags else [Diagnostic("S206", "invalid definition", doc.locate(()))]


def check_document(doc: Document, *, actions: dict[str, ActionInfo] | None = None, lint: bool = False,
                   root: Path | None = None, facts: ProjectFacts | None = None) -> CheckResult:
    from sealflow.dsl import schema
    from sealflow.dsl.compiler import compile_definition

    result = CheckResult(doc.path, [], document=doc)
    language = _language_check(doc)
    diags = language or schema.validate(doc)
    if diags:  # the expressions' syntax too, in the same pass, when the document is YAML of this language
        result.diagnostics = sort_diagnostics(diags if language else diags + _template_syntax(doc))
        return result
    definition, diags = _model(doc)
    result.definition = definition
    if definition is None:
        result.diagnostics = sort_diagnostics(diags + _template_syntax(doc))
        return result
    def check_called(data: bytes, path: str) -> CheckResult:  # a workflow this one calls, compiled alike
        return check_bytes(data, path, actions=actions, root=root, facts=facts)

    plan, diags = compile_definition(doc, definition, actions=actions, root=root, facts=facts,
                                     check_called=check_called)
    result.plan = plan
    if lint and plan is not None:
        from sealflow.dsl.lint import lint as run_lint

        diags = diags + run_lint(doc, definition, plan, actions=actions)
    result.diagnostics = sort_diagnostics(diags)
    return result


def _template_syntax(doc: Document) -> list[Diagnostic]:
    from sealflow.dsl.expressions.static_check import template_syntax

    return template_syntax(doc)


def _guard(path: str, fn: Callable[..., CheckResult], *args: Any, **kwargs: Any) -> CheckResult:
    try:
        return fn(*args, **kwargs)
    except DefinitionError as exc:
        return CheckResult(path, exc.diagnostics)
    except Exception as exc:  # noqa: BLE001 - the contract: a result with diagnostics, never an exception
        if os.environ.get("SEALFLOW_DEBUG"):
            raise
        return CheckResult(path, [Diagnostic("E000", f"internal error: {type(exc).__name__}: {exc}",
                                             Location(path), hint="this is a bug in sealflow; please report it "
                                             "with the file (set SEALFLOW_DEBUG=1 for a traceback)")])


def check_bytes(data: bytes, path: str = "<string>", *, actions: dict[str, ActionInfo] | None = None,
                lint: bool = False, root: Path | None = None, limits: Limits = DEFAULT_LIMITS,
                facts: ProjectFacts | None = None) -> CheckResult:
    def run() -> CheckResult:
        return check_document(load_bytes(data, path, limits), actions=actions, lint=lint, root=root, facts=facts)

    return _guard(path, run)


def check_file(path: str | Path, *, actions: dict[str, ActionInfo] | None = None, lint: bool = False,
               root: Path | None = None, limits: Limits = DEFAULT_LIMITS,
               facts: ProjectFacts | None = None) -> CheckResult:
    def run() -> CheckResult:
        return check_document(load_file(path, limits), actions=actions, lint=lint, root=root, facts=facts)

    return _guard(str(path), run)


def compile_bytes(data: bytes, path: str = "<string>", **kwargs: Any) -> Plan:
    """The plan of a valid definition; raise :class:`DefinitionError` with every error otherwise."""
    result = check_bytes(data, path, **kwargs)
    if result.plan is None or result.errors:
        raise DefinitionError(result.errors or result.diagnostics)
    return result.plan


def compile_file(path: str | Path, **kwargs: Any) -> Plan:
    return compile_bytes(Path(path).read_bytes(), str(path), **kwargs)
