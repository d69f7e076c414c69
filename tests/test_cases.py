"""Data-driven definition cases: ``tests/cases/{valid,invalid,invalid_with_actions}/*.yaml``.

Each case file opens with comment lines that say what checking it must produce
(the format is described in ``tests/cases/README.md``):

    # expect: valid                      no diagnostic of severity "error"
    # expect: C401 line 17               a C401 diagnostic on line 17 (1-based)
    # expect: X301 line 18 col 43        ... on line 18, column 43 (1-based)
    # actions: tests/cases/actions.py    load action metadata from these files/modules
    # lint: true                         run the linter as well
    # models: default, gpt               the configured model names (C426), as a project's models: gives them

Given a case file, when ``sealflow.dsl.api.check_file`` checks it, then every expected
diagnostic is among those reported (others may be reported too), or, for a valid
case, none of them is an error.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"
FOLDERS = ("valid", "invalid", "invalid_with_actions")
DEFAULT_ACTIONS = {"invalid_with_actions": ("tests/cases/actions.py",)}

_EXPECT = re.compile(r"^(?P<code>[A-Z][0-9]{3})\s+line\s+(?P<line>[0-9]+)(?:\s+col\s+(?P<col>[0-9]+))?$")
_DIRECTIVE = re.compile(r"^#\s*(?P<key>expect|actions|lint|models)\s*:\s*(?P<value>.*?)\s*$")

# Error codes no case file can (or should) trigger, and why. Every other error code
# registered in sealflow.dsl.codes must be expected by at least one case.
NOT_COVERED = {
    "Y100": "the file cannot be read: a property of the file system, not of a definition",
    "Y108": "a file over 1 MiB is not worth keeping in the repository; unit tests cover it",
    "S206": "a generic schema mismatch; the schema's specific keywords report S201-S205 first",
    "C415": "about file names: case files are not named <name>.v<version>.yaml on purpose",
    "C417": "unknown error classes are caught by the schema's enum first (S204); see c417-*",
    "E000": "an internal error is a bug, never an expectation",
}


@dataclasses.dataclass(frozen=True)
class Expected:
    code: str
    line: int
    col: int | None = None

    def __str__(self) -> str:
        return f"{self.code} line {self.line}" + (f" col {self.col}" if self.col is not None else "")


@dataclasses.dataclass(frozen=True)
class Case:
    path: Path
    folder: str
    valid: bool
    expected: tuple[Expected, ...]
    actions: tuple[str, ...]
    lint: bool
    models: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return f"{self.folder}/{self.path.stem}"


class CaseFormatError(Exception):
    """A case file's header does not follow tests/cases/README.md."""


def parse_case(path: Path) -> Case:
    """Read the leading comment block of ``path`` (bytes: some cases are not UTF-8 on purpose)."""
    folder = path.parent.name
    text = path.read_bytes().decode("utf-8", errors="replace")
    valid, expected, actions, lint = False, [], list(DEFAULT_ACTIONS.get(folder, ())), None
    models: tuple[str, ...] | None = None
    for raw in text.splitlines():
        if not raw.startswith("#"):
            break
        m = _DIRECTIVE.match(raw)
        if m is None:
            continue
        key, value = m.group("key"), m.group("value")
        if key == "expect":
            if value == "valid":
                valid = True
                continue
            e = _EXPECT.match(value)
            if e is None:
                raise CaseFormatError(f"{path}: cannot read '{raw}' (want 'CODE line N' or 'CODE line N col M')")
            expected.append(Expected(e.group("code"), int(e.group("line")),
                                     int(e.group("col")) if e.group("col") else None))
        elif key == "actions":
            actions = [a.strip() for a in value.split(",") if a.strip()]
        elif key == "models":
            models = tuple(m.strip() for m in value.split(",") if m.strip())
        elif key == "lint":
            if value not in ("true", "false"):
                raise CaseFormatError(f"{path}: '# lint:' takes true or false, not {value!r}")
            lint = value == "true"
    if valid and expected:
        raise CaseFormatError(f"{path}: a case is either valid or expects diagnostics, not both")
    if not valid and not expected:
        raise CaseFormatError(f"{path}: no '# expect:' line in the leading comment block")
    if valid != (folder == "valid"):
        raise CaseFormatError(f"{path}: cases under {folder}/ must {'' if folder == 'valid' else 'not '}be valid")
    if lint is None:
        lint = valid  # a valid case must also be free of lint errors (L500)
    return Case(path, folder, valid, tuple(expected), tuple(actions), lint, models)


def _case_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (CASES / folder).glob("*.yaml"))


def _params():
    params = []
    for path in _case_files():
        try:
            case = parse_case(path)
        except CaseFormatError as exc:
            params.append(pytest.param(exc, id=f"{path.parent.name}/{path.stem}"))
            continue
        params.append(pytest.param(case, id=case.id))
    return params


@functools.cache
def _load_actions(specs: tuple[str, ...]):
    from sealflow.cli.actions_loader import load_actions

    return load_actions([str(ROOT / s) if (ROOT / s).exists() else s for s in specs])


def _describe(diagnostics) -> str:
    if not diagnostics:
        return "  (no diagnostics)"
    return "\n".join("  " + d.format().replace("\n", "\n  ") for d in diagnostics)


def _matches(d, e: Expected) -> bool:
    return d.code == e.code and d.location.line == e.line and (e.col is None or d.location.column == e.col)


@pytest.mark.parametrize("case", _params())
def test_case(case):
    if isinstance(case, CaseFormatError):
        pytest.fail(str(case))
    from sealflow.dsl.api import check_file

    # Given a case file and, when it asks for them, the action metadata of its modules
    actions = _load_actions(case.actions) if case.actions else None

    # When it is checked
    from sealflow.dsl.typecheck import ProjectFacts

    facts = ProjectFacts(models=frozenset(case.models)) if case.models is not None else None
    result = check_file(case.path, actions=actions, lint=case.lint, facts=facts)
    diagnostics = list(result.diagnostics)

    # Then a valid case has no error, and an invalid one has every expected diagnostic
    if case.valid:
        errors = [d for d in diagnostics if d.severity == "error"]
        assert not errors, f"{case.id} should be valid, but:\n{_describe(diagnostics)}"
        return
    missing = [e for e in case.expected if not any(_matches(d, e) for d in diagnostics)]
    assert not missing, (
        f"{case.id}: expected {', '.join(map(str, missing))}; reported:\n{_describe(diagnostics)}"
    )
    assert any(d.severity == "error" for d in diagnostics), f"{case.id}: no error reported"


def test_case_folders_hold_cases():
    # Given the case folders, then each holds cases, and the valid ones are at least ten
    counts = {folder: len(list((CASES / folder).glob("*.yaml"))) for folder in FOLDERS}
    assert counts["valid"] >= 10, counts
    assert counts["invalid"] >= 40, counts
    assert counts["invalid_with_actions"] >= 3, counts
    strays = [p.name for folder in FOLDERS for p in (CASES / folder).iterdir() if p.suffix != ".yaml"]
    assert not strays, f"only .yaml case files belong in {FOLDERS}: {strays}"


def test_every_error_code_has_a_case():
    from sealflow.dsl.codes import CODES

    # Given every expectation of every case
    expected = {e.code for p in _case_files() for e in parse_case(p).expected}
    # Then each expected code is registered
    unknown = sorted(expected - set(CODES))
    assert not unknown, f"cases expect codes that dsl/codes.py does not register: {unknown}"
    # And each error code a definition can trigger is expected somewhere
    wanted = {code for code, (severity, _) in CODES.items() if severity == "error"} - set(NOT_COVERED)
    uncovered = sorted(wanted - expected)
    assert not uncovered, f"no case expects these error codes: {uncovered}"
