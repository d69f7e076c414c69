"""The project file and ``sealflow init`` (issue 14): one sealflow.yaml, read by every command; flags and
SEALFLOW_* variables override it."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY

HELLO = ("run", "definitions/hello.v1.yaml", "--input", '{"name": "world"}')


@pytest.fixture(autouse=True)
def _forget_hello():
    yield
    REGISTRY._actions.pop("hello.greet", None)
    for mod in [m for m in sys.modules if m.startswith("sealflow_actions_") and m.endswith("actions_hello")]:
        del sys.modules[mod]


@pytest.fixture
def project(tmp_path, monkeypatch, capsys):
    """``sealflow init`` in an empty folder, as user:ann, the folder the current one; its own store."""
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    monkeypatch.delenv("SEALFLOW_STORE", raising=False)
    root = tmp_path / "proj"
    code, out, err = cli(capsys, "init", str(root))
    assert code == 0, (out, err)
    monkeypatch.chdir(root)
    return root


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_init_writes_a_project_and_prints_the_next_three_commands(tmp_path, capsys, monkeypatch):
    # Given an empty folder
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    # When sealflow init scaffolds it
    code, out, err = cli(capsys, "init", str(tmp_path / "p"))
    # Then every file is there, the access policy names the current user, keys and state are ignored
    assert code == 0, err
    for name in ("sealflow.yaml", "definitions/hello.v1.yaml", "actions/hello.py", "access.yaml", ".gitignore",
                 ".github/workflows/sealflow.yml"):
        assert (tmp_path / "p" / name).is_file(), name
    access = yaml.safe_load((tmp_path / "p" / "access.yaml").read_text())
    assert "user:ann" in access["tenants"]["default"]["members"]
    ignored = (tmp_path / "p" / ".gitignore").read_text()
    assert ".sealflow/" in ignored and "*.pem" in ignored
    assert [line for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")] == [
        f"  1. cd {tmp_path / 'p'}", "  2. sealflow validate definitions/",
        "  3. sealflow run definitions/hello.v1.yaml --input '{\"name\": \"world\"}'"]


def test_init_never_overwrites(project, capsys):
    # Given a project
    # When init runs again in it
    code, out, err = cli(capsys, "init", ".")
    # Then it is refused, saying which file exists and how to go on
    assert code == 1 and "sealflow.yaml exists" in err and "--force" in err


def test_the_scaffold_runs_at_once_with_no_flags(project, capsys):
    # Given a fresh project, When its definition is validated and run with no flag at all
    code, out, err = cli(capsys, "validate", "definitions/")
    assert code == 0 and "not checked" not in err, err
    code, out, err = cli(capsys, *HELLO)
    # Then it completes with the project's action, under its access policy, in its own store
    assert code == 0, (out, err)
    assert "hello, world" in out and "OPEN DEVELOPMENT MODE" not in err
    assert (project / ".sealflow" / "state.db").is_file()


def test_the_project_is_found_from_a_subfolder(project, capsys, monkeypatch):
    # Given a run in the project
    code, out, err = cli(capsys, *HELLO, "--json")
    run_id = json.loads(out)["run_id"]
    # When a command runs in a subfolder
    monkeypatch.chdir(project / "definitions")
    code, out, err = cli(capsys, "status", run_id, "--json")
    # Then it reads the same store
    assert code == 0 and json.loads(out)["state"] == "completed", err


def test_a_flag_and_an_environment_variable_override_the_project(project, capsys, monkeypatch, tmp_path):
    # Given a second access policy that does not name user:ann
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"tenants": {"default": {"roles": {"r": ["runs:read"]},
                                                             "members": {"user:zed": ["r"]}}}}))
    # When it is given by flag, then by $SEALFLOW_ACCESS
    code, out, err = cli(capsys, *HELLO, "--access", str(other))
    assert code == 1 and "not a member" in err, err
    monkeypatch.setenv("SEALFLOW_ACCESS", str(other))
    code, out, err = cli(capsys, *HELLO)
    # Then it wins over access: in sealflow.yaml
    assert code == 1 and "not a member" in err, err


def test_project_flag_names_another_project_file(project, capsys, monkeypatch, tmp_path):
    # Given a folder outside the project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # When --project names the project file
    code, out, err = cli(capsys, "--project", str(project / "sealflow.yaml"), "run",
                         str(project / "definitions" / "hello.v1.yaml"), "--input", '{"name": "x"}')
    # Then its actions and policy are used
    assert code == 0, (out, err)


def test_a_broken_project_file_says_where_and_what(project, capsys):
    # Given a sealflow.yaml with a misspelt key
    (project / "sealflow.yaml").write_text("sealflow: 1\naccesss: access.yaml\n")
    # When any command runs
    code, out, err = cli(capsys, "runs", "list")
    # Then it is a usage error naming the file, the key and the likely fix, no traceback
    assert code == 2 and "sealflow.yaml: unknown key 'accesss' (did you mean 'access'?)" in err, err
    assert "Traceback" not in err


def test_approving_in_the_project_needs_no_flags(project, capsys):
    # Given a definition of the project with an approval before its custom action
    (project / "definitions" / "gated.v1.yaml").write_text(
        "sealflow: 1\nname: gated\nversion: 1\nowner: team:ann\nsteps:\n"
        "  - id: ask\n    approval: {approvers: [user:reviewer], timeout: 1h}\n"
        "  - id: greet\n    action: hello.greet\n    with: {name: x}\n")
    code, out, err = cli(capsys, "run", "definitions/gated.v1.yaml", "--json")
    assert code == 3, (out, err)
    run_id = json.loads(out)["run_id"]
    # When the reviewer approves with no --actions and no --access
    code, out, err = cli(capsys, "approve", run_id, "--as", "user:reviewer", "--json")
    # Then the project's actions continue the run
    assert code == 0 and json.loads(out)["state"] == "completed", (out, err)


def test_the_scaffold_s_member_sees_and_redrives_the_project_s_dead_letters(project, capsys):
    # Given a run of the project that fails (its action is called with a null for the name: no input schema says
    # the field exists, so only the run finds it missing)
    (project / "definitions" / "broken.v1.yaml").write_text(
        "sealflow: 1\nname: broken\nversion: 1\nowner: team:ann\nsteps:\n"
        "  - id: greet\n    action: hello.greet\n    with: {name: \"${{ input.name }}\"}\n"
        "    retry: {max_attempts: 1}\n")
    code, out, err = cli(capsys, "run", "definitions/broken.v1.yaml", "--json")
    assert code == 1, (out, err)
    run_id = json.loads(out)["run_id"]
    # When its initiator, the scaffold's member, lists and shows dead letters with no flags
    code, out, err = cli(capsys, "dlq", "list")
    # Then the run is there (not an empty list that hides it), and shows
    assert code == 0 and run_id in out, (out, err)
    code, out, err = cli(capsys, "dlq", "show", run_id)
    assert code == 0 and out.startswith(f"dead letter {run_id}"), (out, err)
