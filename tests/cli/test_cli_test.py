"""`sealflow test` on the command line: exit codes, formats, JUnit XML, the default folder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "definitions", tmp_path / "definitions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")  # the definitions' $ref'd input schemas
    (tmp_path / ".git").mkdir()  # $ref paths are relative to the repository root
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_shipped_tests_pass_from_the_default_folder_and_write_junit(project: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Given a project with definitions/tests
    # When `sealflow test` runs with no path
    code = main(["test", "--junit", "out.xml"])
    out = capsys.readouterr().out
    # Then every case passes, exit 0, and the JUnit XML holds them
    assert code == 0, out
    assert out.strip().endswith("0 failed")
    assert len(ET.parse(project / "out.xml").findall(".//testcase")) >= 5


def test_a_failing_case_exits_1_and_json_says_which(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a test file with a case expecting the wrong state
    bad = project / "definitions" / "tests" / "bad.test.yaml"
    bad.write_text("sealflow_test: 1\ndefinition: ../lead-qualification.v1.yaml\ncases:\n"
                   "  - name: wrong\n    input: {lead_id: lead_midco}\n    answers: {classify: {classification: low, "
                   "reason: r}}\n    expect: {state: failed}\n")
    # When it runs with --format json
    code = main(["test", str(bad), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    # Then it exits 1 and the case carries its failure
    assert code == 1 and data["passed"] is False
    (case,) = data["files"][0]["cases"]
    assert case["name"] == "wrong" and "expected failed, got completed" in case["failures"][0]


@pytest.mark.parametrize("argv, message", [
    (["test", "nowhere"], "no such test file or folder: nowhere"),
    (["test", "schemas"], "no *.test.yaml file under schemas"),
])
def test_a_usage_error_exits_2_with_a_clear_message(project: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], message: str) -> None:
    # When `sealflow test` is pointed at nothing usable
    code = main(argv)
    # Then it exits 2 and says why
    assert code == 2 and message in capsys.readouterr().err


def test_a_broken_test_file_exits_2_with_its_location(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a test file with a misspelt key
    bad = project / "definitions" / "tests" / "typo.test.yaml"
    bad.write_text("sealflow_test: 1\ndefinition: ../lead-qualification.v1.yaml\ncases:\n"
                   "  - name: a\n    expect: {stat: completed}\n")
    # When it runs
    code = main(["test", str(bad)])
    out = capsys.readouterr().out
    # Then it exits 2, the error located and the fix suggested
    assert code == 2
    assert f"{bad}:5:14: error" in out and "did you mean 'state'" in out


def test_validate_of_the_definitions_folder_skips_test_files(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # When the definitions folder (holding tests/) is validated
    code = main(["validate", "definitions"])
    out = capsys.readouterr().out
    # Then only definitions are read
    assert code == 0 and ".test.yaml" not in out


@pytest.fixture
def _forget_hello():
    """Drop the scaffold's action and its module afterwards, so a later init's import registers it again."""
    yield
    REGISTRY._actions.pop("hello.greet", None)
    for mod in [m for m in sys.modules if m.startswith("sealflow_actions_") and m.endswith("actions_hello")]:
        del sys.modules[mod]


@pytest.mark.usefixtures("_forget_hello")
def test_the_scaffold_test_passes_out_of_the_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # Given a fresh project from `sealflow init`
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    for name in ("SEALFLOW_PROJECT", "SEALFLOW_CONFIG", "SEALFLOW_ACCESS", "SEALFLOW_TRUST"):
        monkeypatch.delenv(name, raising=False)
    assert main(["init", str(tmp_path / "proj")]) == 0
    monkeypatch.chdir(tmp_path / "proj")
    capsys.readouterr()
    # When its tests run, with coverage
    code = main(["test", "--coverage"])
    out = capsys.readouterr().out
    # Then they pass and cover every step
    assert code == 0, out
    assert "3 passed, 0 failed" in out and "steps          2/2" in out


def test_the_matrix_prints_a_table_and_exits_by_its_verdict(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # When the matrix of the weekly report is derived
    code = main(["test", "--matrix", "definitions/weekly-report.v1.yaml"])
    out = capsys.readouterr().out
    # Then it holds: exit 0, a row per step that calls out or waits for approval
    assert code == 0, out
    header = ["step", "normal", "retry", "exhausted", "fatal", "duplicate", "crash", "cancel", "revoked", "reject",
              "expire"]
    assert out.splitlines()[1].split() == header
    assert any(line.startswith("review ") and "failed" in line for line in out.splitlines())


def test_github_format_annotates_the_line_of_each_failing_expectation(project: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Given a case whose expected state is wrong, written on line 7
    bad = project / "definitions" / "tests" / "bad.test.yaml"
    bad.write_text("sealflow_test: 1\ndefinition: ../lead-qualification.v1.yaml\ncases:\n  - name: wrong\n"
                   "    input: {lead_id: lead_midco}\n    answers: {classify: {classification: low, reason: r}}\n"
                   "    expect:\n      state: failed\n")
    # When it runs with --format github
    code = main(["test", str(bad), "--format", "github"])
    out = capsys.readouterr().out
    # Then an error annotation points at the expectation's line, titled with the case
    assert code == 1
    assert f"::error file={bad},line=8,col=14,title=sealflow test%3A wrong::state: expected failed" in out
