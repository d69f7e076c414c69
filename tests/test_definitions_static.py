"""Every workflow under ``definitions/`` is valid, lint-clean and properly named.

These are the project's real examples: each must pass ``sealflow validate`` and
``sealflow lint`` with no error and no warning, be named ``<name>.v<version>.yaml``
after the name and version it holds, and open with a comment block saying what
it demonstrates. ``lead-qualification.v1.yaml`` is the language contract's full
example, byte for byte.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = ROOT / "definitions"
FILE_NAME = re.compile(r"^(?P<name>[a-z][a-z0-9-]{1,62})\.v(?P<version>[1-9][0-9]*)\.yaml$")
REQUIRED = ("lead-qualification.v1.yaml", "image-upload-pipeline.v1.yaml", "document-ingestion.v1.yaml",
            "weekly-report.v1.yaml")
# The language contract (a copy of the design brief's DSL.md, shipped so that a user's clone runs this test)
DSL_MD = (ROOT / "tests" / "fixtures" / "DSL.md",)


def _definitions() -> list[Path]:
    return sorted(DEFINITIONS.glob("*.yaml"))


def _header(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def _describe(diagnostics) -> str:
    return "\n".join("  " + d.format().replace("\n", "\n  ") for d in diagnostics)


def test_the_example_workflows_exist():
    names = {p.name for p in _definitions()}
    assert set(REQUIRED) <= names, f"missing from definitions/: {sorted(set(REQUIRED) - names)}"
    signatures = (".dsse.json", ".sigstore.json")  # bundles live beside the files they sign (docs/trust.md)
    strays = [p.name for p in DEFINITIONS.iterdir()
              if p.is_file() and p.suffix in (".yml", ".json") and not p.name.endswith(signatures)]
    assert not strays, f"definitions/ holds workflows as <name>.v<version>.yaml only: {strays}"


@pytest.mark.parametrize("path", _definitions(), ids=lambda p: p.name)
def test_file_name_matches_name_and_version(path: Path):
    from sealflow.dsl.loader import load_file

    # Given a definition file name
    m = FILE_NAME.match(path.name)
    assert m, f"{path.name} is not named <name>.v<version>.yaml"
    # When it is loaded
    data = load_file(path).data
    # Then its name and version are the ones in the file name
    assert (data.get("name"), data.get("version")) == (m.group("name"), int(m.group("version")))


@pytest.mark.parametrize("path", _definitions(), ids=lambda p: p.name)
def test_opens_with_a_comment_saying_what_it_demonstrates(path: Path):
    header = _header(path.read_text(encoding="utf-8"))
    assert len(header) >= 3, f"{path.name}: open with a comment block saying what it demonstrates"
    assert any("demonstrates" in line.lower() for line in header), f"{path.name}: say what it demonstrates"


@pytest.mark.parametrize("path", _definitions(), ids=lambda p: p.name)
def test_validates_and_lints_clean(path: Path):
    from sealflow.dsl.api import check_file

    # When the definition is validated, compiled and linted
    result = check_file(path, lint=True)

    # Then nothing is worse than info
    loud = [d for d in result.diagnostics if d.severity in ("error", "warning")]
    assert not loud, f"{path.name}:\n{_describe(loud)}"
    assert result.plan is not None


@pytest.mark.parametrize("path", _definitions(), ids=lambda p: p.name)
def test_validates_and_lints_clean_against_the_shipped_actions(path: Path):
    from sealflow.cli.actions_loader import load_actions
    from sealflow.dsl.api import check_file

    # Given the metadata of the actions the runtime ships (the demo world)
    actions = load_actions(["sealflow.demo"])
    # When the definition is checked with it: unknown actions, permissions, effects, L501
    result = check_file(path, actions=actions, lint=True)
    # Then nothing is worse than info, and every action it calls is known
    loud = [d for d in result.diagnostics if d.severity in ("error", "warning")]
    assert not loud, f"{path.name}:\n{_describe(loud)}"
    assert not [d for d in result.diagnostics if d.code == "L507"]


def test_lead_qualification_is_the_contract_example_byte_for_byte():
    contract = next((p for p in DSL_MD if p.is_file()), None)
    if contract is None:
        pytest.skip("DSL.md (the language contract) is not available here")
    # Given the YAML of the contract's "full example"
    section = contract.read_text(encoding="utf-8").split("## The full example", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    # When the header comment of the definition is set aside
    text = (DEFINITIONS / "lead-qualification.v1.yaml").read_text(encoding="utf-8")
    header = _header(text)
    body = text[sum(len(line) + 1 for line in header):]
    # Then what remains is the example, byte for byte
    assert header, "lead-qualification.v1.yaml opens with a comment block"
    assert body == example
