"""A bug in an action says where: ``run`` names its file and line (and prints its traceback with
SEALFLOW_DEBUG=1), ``status`` and ``dlq show`` print the traceback (text and JSON) to those who may read the run."""

from __future__ import annotations

import json
import sys

import pytest

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY

ACTIONS = '''"""The project's actions."""

from sealflow import action


@action("hello.greet", effect="read")
def greet(ctx, name: str) -> dict:
    """Return a greeting for ``name``."""
    d = {"name": name}
    return {"greeting": f"hello, {d['missing']}"}
'''
WHERE = "actions/hello.py:10 in greet"
SUMMARY = f"internal: KeyError: 'missing' ({WHERE})"
SOURCE = "return {\"greeting\": f\"hello, {d['missing']}\"}"

DEFINITION = """\
sealflow: 1
name: hello
version: 1
owner: team:root
steps:
  - id: greet
    action: hello.greet
    with: {name: ann}
  - id: done
    succeed: {output: "${{ steps.greet.output.greeting }}"}
"""

#: root develops (reads runs and dead letters); tri triages dead letters without reading runs
ACCESS = """\
tenants:
  default:
    roles:
      developer: ["runs:read", "audit:read", "dlq:read", "dlq:redrive"]
      triage: ["dlq:read"]
    members:
      user:root: [developer]
      user:tri: [triage]
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder whose action has a bug; its action forgotten again after the test."""
    (tmp_path / "actions").mkdir()
    (tmp_path / "actions" / "hello.py").write_text(ACTIONS)
    (tmp_path / "hello.v1.yaml").write_text(DEFINITION)
    (tmp_path / "access.yaml").write_text(ACCESS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEALFLOW_USER", "root")
    monkeypatch.delenv("SEALFLOW_DEBUG", raising=False)
    yield tmp_path
    REGISTRY._actions.pop("hello.greet", None)
    for mod in [m for m in sys.modules if m.startswith("sealflow_actions_") and "hello" in m]:
        del sys.modules[mod]


def cli(capsys, *argv):
    code = main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


def failed_run(capsys) -> tuple[str, str]:
    code, out, err = cli(capsys, "run", "hello.v1.yaml", "--actions", "actions/hello.py", "--access", "access.yaml")
    assert code == 1, (out, err)
    return out.split()[1].rstrip(":"), out


def test_run_names_the_actions_file_and_line_and_says_where_the_traceback_is(capsys, project):
    # When a run's action fails with a bug
    run_id, out = failed_run(capsys)
    # Then the attempt's line and the run's error name the file and line, and the traceback is one command away
    assert "greet                    attempt 1  failed" in out and out.count(SUMMARY) == 2
    assert f"error: {SUMMARY}\n" in out
    assert (f"traceback: `sealflow status {run_id} --access access.yaml --actions actions/hello.py` shows it (or set "
            "SEALFLOW_DEBUG=1)") in out
    assert "Traceback" not in out


def test_with_sealflow_debug_run_prints_the_actions_traceback(capsys, project, monkeypatch):
    # Given SEALFLOW_DEBUG=1 (docs/project.md: tracebacks for internal errors)
    monkeypatch.setenv("SEALFLOW_DEBUG", "1")
    # When the run's action fails / Then run prints its traceback under the step, frame by frame
    _, out = failed_run(capsys)
    assert (f"traceback of step greet:\n  Traceback (most recent call last):\n    {WHERE}\n      {SOURCE}\n"
            "  KeyError: 'missing'\n") in out
    # and with --json the failed step carries it too
    code, out, _ = cli(capsys, "run", "hello.v1.yaml", "--actions", "actions/hello.py", "--json")
    assert code == 1 and WHERE in json.loads(out)["steps"][0]["error"]["trace"]


def test_status_prints_the_traceback_in_text_and_json(capsys, project):
    # Given a run whose action failed
    run_id, _ = failed_run(capsys)
    # When status shows it
    code, out, err = cli(capsys, "status", run_id, "--access", "access.yaml")
    # Then the text ends with the failed step's traceback
    assert code == 1, err
    assert out.endswith(f"error: {SUMMARY}\ntraceback of step greet:\n  Traceback (most recent call last):\n"
                        f"    {WHERE}\n      {SOURCE}\n  KeyError: 'missing'\n")
    # and the JSON's failed step has its class, its one-line message and its traceback
    code, out, err = cli(capsys, "status", run_id, "--json", "--access", "access.yaml")
    step = json.loads(out)["steps"][0]
    assert step["error"]["class"] == "internal" and step["error"]["message"] == SUMMARY.split(": ", 1)[1]
    assert step["error"]["trace"].endswith(f"  {WHERE}\n    {SOURCE}\nKeyError: 'missing'")


def test_dlq_show_prints_the_traceback_to_a_reader_of_the_run_only(capsys, project):
    # Given a dead-lettered run (its action failed)
    run_id, _ = failed_run(capsys)
    # When its developer (runs:read, dlq:read) shows the dead letter
    code, out, err = cli(capsys, "dlq", "show", run_id, "--access", "access.yaml")
    # Then the reason names the file and line, and the failed attempt's traceback follows it
    assert code == 0, err
    assert f"reason:      step 'greet' failed with {SUMMARY}" in out
    assert f"traceback of greet attempt 1:\n  Traceback (most recent call last):\n    {WHERE}\n" in out
    code, out, err = cli(capsys, "dlq", "show", run_id, "--json", "--access", "access.yaml")
    assert WHERE in json.loads(out)["failed_attempts"][0]["error_trace"]
    # When someone who triages dead letters (dlq:read) but may not read runs shows it
    code, text, err = cli(capsys, "dlq", "show", run_id, "--access", "access.yaml", "--as", "user:tri")
    code_json, out, _ = cli(capsys, "dlq", "show", run_id, "--json", "--access", "access.yaml", "--as", "user:tri")
    # Then the dead letter is shown without the traceback
    assert code == code_json == 0, err
    assert "Traceback" not in text and "traceback of" not in text and SOURCE not in text
    assert json.loads(out)["failed_attempts"][0]["error_trace"] is None and SOURCE not in out
    # and the run itself is not shown to them at all
    code, out, err = cli(capsys, "status", run_id, "--json", "--access", "access.yaml", "--as", "user:tri")
    assert code == 2 and SOURCE not in out + err
