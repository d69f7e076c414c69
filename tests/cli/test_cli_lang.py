"""The language commands (validate, lint, plan, graph): exit codes, output formats, no traceback whatever the input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")
BROKEN = """\
sealflow: 1
name: broken
version: 1
owner: team:x
steps:
  - id: a
    set: {x: "1"}
    next: nowhere
  - id: b
    set: {y: "input.x = 1"}
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    return str(path)


def test_given_the_example_folder_when_validated_then_exit_0_and_each_file_ok(capsys):
    code, out, err = run(capsys, "validate", str(ROOT / "definitions"))
    assert code == 0
    assert out.count("ok: ") == len(list((ROOT / "definitions").glob("*.yaml")))
    assert "0 errors" in err


def test_given_a_broken_file_when_validated_then_exit_1_with_located_errors_and_hints(capsys, broken):
    code, out, _ = run(capsys, "validate", broken)
    assert code == 1
    assert f"{broken}:8:11: error[C401]: unknown step 'nowhere'" in out
    assert f"{broken}:10:23: error[X301]:" in out
    assert "  hint: " in out


def test_given_json_format_when_validated_then_machines_get_every_diagnostic(capsys, broken):
    code, out, _ = run(capsys, "validate", "--format", "json", broken, EXAMPLE)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["errors"] == 3
    bad, good = report["files"]
    assert {d["code"] for d in bad["diagnostics"]} == {"C401", "C404", "X301"}  # b cannot be reached
    assert good["ok"] and good["digest"].startswith("sha256:")


def test_given_github_format_when_validated_then_annotations_are_printed(capsys, broken):
    code, out, _ = run(capsys, "validate", "--format", "github", broken)
    assert code == 1
    assert "::error file=" in out and ",line=8,col=11,title=C401::unknown step 'nowhere'%0Ahint:" in out


@pytest.mark.parametrize("argv", [
    ["validate", "/no/such/file.yaml"],
    ["validate"],
    ["plan", "/no/such/file.yaml"],
    ["validate", "--format", "xml", EXAMPLE],
    ["validate", "--actions", "no_such_module_xyz", EXAMPLE],
    ["lint", "--explain", "L999"],
    ["frobnicate"],
])
def test_given_a_usage_error_when_run_then_exit_2_and_a_message(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in out + err and err.strip()


def test_given_an_actions_file_that_raises_when_validated_then_exit_2_naming_the_file(capsys, tmp_path):
    bad = tmp_path / "bad_actions.py"
    bad.write_text("raise RuntimeError('boom')\n")
    code, _, err = run(capsys, "validate", "--actions", str(bad), EXAMPLE)
    assert code == 2 and "bad_actions.py" in err and "RuntimeError: boom" in err


def test_given_the_example_when_linted_then_clean(capsys):
    code, out, _ = run(capsys, "lint", str(ROOT / "definitions"))
    assert code == 0 and "warning[" not in out


def test_given_a_rule_code_when_explained_then_its_rationale_is_printed(capsys):
    code, out, _ = run(capsys, "lint", "--explain", "l501")
    assert code == 0 and out.startswith("L501:") and "approval" in out


def test_given_plan_json_when_printed_then_the_digest_is_at_the_top_level(capsys):
    code, out, _ = run(capsys, "plan", EXAMPLE, "--json")
    plan = json.loads(out)
    assert code == 0 and list(plan)[0] == "digest" and plan["digest"].startswith("sha256:")
    assert [s["id"] for s in plan["steps"]][:2] == ["fetch_lead", "classify"]


def test_given_plan_text_when_printed_then_it_names_the_digest_and_steps(capsys):
    code, out, _ = run(capsys, "plan", EXAMPLE)
    assert code == 0 and "lead-qualification v1  sha256:" in out and "follow_up" in out


def test_given_a_broken_file_when_planned_then_exit_1(capsys, broken):
    code, out, _ = run(capsys, "plan", broken)
    assert code == 1 and "error[C401]" in out


@pytest.mark.parametrize("fmt, marker", [("mermaid", "flowchart TD"), ("dot", "digraph")])
def test_given_a_definition_when_graphed_then_every_step_and_edge_is_drawn(capsys, fmt, marker):
    code, out, _ = run(capsys, "graph", EXAMPLE, "--format", fmt)
    assert code == 0 and out.startswith(marker)
    for step in ("fetch_lead", "classify", "route", "record", "follow_up", "done"):
        assert step in out
    assert "route" in out and ("-->|default| record" in out or '"route" -> "record"' in out)


@pytest.mark.parametrize("content", [
    b"\x00\x01\x02\xff" * 50,
    b"- just\n- a list\n",
    b"sealflow: 1\nsteps: {}\n",
    b"sealflow: [\n",
    b"name: !!python/object/apply:os.system ['echo pwned']\n",
    b"\xef\xbb\xbfsealflow: 1\n",
])
def test_given_garbage_when_validated_in_a_real_process_then_exit_1_and_no_traceback(tmp_path, content):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "sealflow", "validate", str(path)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{path}:" in proc.stdout and "error[" in proc.stdout


def test_given_no_actions_when_validating_then_a_note_says_once_that_action_names_were_not_checked(capsys):
    # Given the example definitions, which call actions
    folder = str(Path(__file__).resolve().parents[2] / "definitions")
    # When validated without --actions, then with them
    bare = main(["validate", folder])
    bare_err = capsys.readouterr().err
    checked = main(["validate", "--actions", "sealflow.demo", folder])
    checked_err = capsys.readouterr().err
    # Then the first says once how to check action names, the second says nothing of it
    assert bare == 0 and bare_err.count("were not checked against your actions") == 1 and "--actions" in bare_err
    assert checked == 0 and "were not checked" not in checked_err


@pytest.mark.parametrize("cron, timezone, words", [
    ("0 0 31 2 *", "UTC", "never fires"),
    ("0 0 6 * * 1-5", "UTC", "has 6 fields; a cron has five"),
    ("0 6 * * 1-5", "America", "is not an IANA time zone"),
    ("0 6 * * 1-5", "Europe/" + "A" * 293, "is not an IANA time zone"),
    ("0 6 * * 1-5", "../../etc/passwd", "is not an IANA time zone"),
])
def test_given_a_schedule_that_cannot_be_scheduled_when_validated_then_a_located_s209_with_a_hint(
        capsys, tmp_path, cron, timezone, words):
    # Given a definition whose trigger.schedule never fires, has a seconds field, or names no time zone
    path = tmp_path / "sched.yaml"
    path.write_text("sealflow: 1\nname: sched\nversion: 1\nowner: team:x\ntrigger:\n"
                    f"  schedule: {{cron: \"{cron}\", timezone: \"{timezone}\", run_as: service:x}}\n"
                    "steps:\n  - id: done\n    succeed: {}\n")
    # When it is validated
    code, out, err = run(capsys, "validate", str(path))
    # Then one located S209 at the value, with a hint, and never an internal error
    [first, hint] = out.splitlines()[:2]
    column = 20 if words != "is not an IANA time zone" else 20 + len(cron) + 14
    assert first.startswith(f"{path}:6:{column}: error[S209]: trigger.schedule.") and words in first, out
    assert hint.startswith("  hint: ")
    assert code == 1 and "E000" not in out + err and "Traceback" not in out + err
