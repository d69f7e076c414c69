"""`sealflow test` on the command line: exit codes, formats, JUnit XML, the default folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from sealflow.cli import main

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
