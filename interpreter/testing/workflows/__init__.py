"""``sealflow test``: workflow test files, run on the real engine in virtual time (docs/testing.md).

:func:`run_file` loads a test file (:mod:`.spec`), compiles the definition it names and runs each case
(:mod:`.runner`); :mod:`.report` prints the verdicts as text or JSON and writes JUnit XML.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sealflow.dsl.api import compile_file
from sealflow.dsl.errors import DefinitionError, Diagnostic
from sealflow.dsl.model import ActionInfo
from sealflow.dsl.plan import Plan
from sealflow.execution.actions import REGISTRY, Registry
from sealflow.testing.workflows.runner import CaseResult, World, run_case
from sealflow.testing.workflows.spec import TestFileError, discover, load, unknown_names

__all__ = ["FileResult", "run_file", "discover"]


@dataclasses.dataclass
class FileResult:
    """A test file's cases' results, or the diagnostics that kept it from running."""

    path: Path
    definition: Path | None = None
    plan: Plan | None = None
    cases: list[CaseResult] = dataclasses.field(default_factory=list)
    errors: list[Diagnostic] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.errors and all(c.passed for c in self.cases)


def run_file(path: Path, *, actions: dict[str, ActionInfo] | None = None, registry: Registry = REGISTRY,
             world: World | None = None) -> FileResult:
    """Every case of the test file at ``path``; a file or definition error is reported, not raised."""
    try:
        spec = load(path)
    except TestFileError as exc:
        return FileResult(path, errors=exc.diagnostics)
    try:
        plan = compile_file(spec.definition, actions=actions)
    except DefinitionError as exc:
        return FileResult(path, spec.definition, errors=list(exc.diagnostics))
    unknown = unknown_names(spec, plan)
    if unknown:
        return FileResult(path, spec.definition, plan, errors=unknown)
    return FileResult(path, spec.definition, plan,
                      [run_case(plan, case, registry=registry, world=world) for case in spec.cases])
