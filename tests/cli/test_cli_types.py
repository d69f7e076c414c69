"""The first hour in the scaffold, typed (issue 32): each trap a new user fell into is a located error or warning
at `sealflow validate`; `actions list|show` and `schema` say what actions take; `init` wires the editor, keeps the
public key in the repository and watches trust.yaml; `doctor` reports an unreadable key as a failed check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import jsonschema
import pytest
import yaml

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY


def forget_hello() -> None:
    """Drop the scaffold's action module (init imported it in this process) so the next command reads the file."""
    for name in [n for n in REGISTRY if n.startswith("hello.")]:
        REGISTRY._actions.pop(name, None)
    for mod in [m for m in sys.modules if m.startswith("sealflow_actions_") and m.endswith("actions_hello")]:
        del sys.modules[mod]


@pytest.fixture(autouse=True)
def _forget_hello():
    yield
    forget_hello()


@pytest.fixture
def project(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    for name in ("SEALFLOW_STORE", "SEALFLOW_CONFIG", "SEALFLOW_PROJECT", "SEALFLOW_TRUST", "SEALFLOW_ACCESS"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "proj"
    assert cli(capsys, "init", str(root))[0] == 0
    monkeypatch.chdir(root)
    return root


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def edit(root, old: str, new: str) -> None:
    path = root / "definitions" / "hello.v1.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("old, new, expected", [
    ('{name: "${{ input.name }}"}', '{nam: "${{ input.name }}"}',
     ["error[C422]", "error[C421]: action hello.greet has no parameter 'nam'", "did you mean 'name'?"]),
    ("steps.greet.output.greeting", "steps.greet.output.greting",
     ["17:47: error[X311]: the output of step 'greet' has no field 'greting'",
      "did you mean steps.greet.output.greeting?"]),
    ("input.name }}", "input.nme }}", ["15:29: error[X312]: the input has no field 'nme'", "did you mean input.name?"]),
    ('{name: "${{ input.name }}"}', "{name: 42}", ["error[C423]: argument 'name' of hello.greet takes string"]),
])
def test_each_trap_of_the_scaffold_is_a_located_error_at_validate(project, capsys, old, new, expected):
    # Given the scaffold with one trap written into its definition
    edit(project, old, new)
    # When it is validated
    code, out, err = cli(capsys, "validate", "definitions/")
    # Then validate fails, naming the file, line, column, the problem and the near name
    assert code == 1
    for text in expected:
        assert text in out, out


def test_a_model_the_project_does_not_configure_is_refused_at_validate(project, capsys):
    (project / "definitions" / "draft.v1.yaml").write_text(
        "sealflow: 1\nname: draft\nversion: 1\nowner: team:ann\nbudget: {max_tokens: 100}\nsteps:\n"
        "  - id: d\n    ai: {model: gpt-5, prompt: {template: hi}}\n")
    code, out, err = cli(capsys, "validate", "definitions/")
    assert code == 1 and "draft.v1.yaml:8:17: error[C426]: model 'gpt-5' is not configured" in out


def test_a_secret_no_configuration_provides_warns_at_validate_not_at_lint(project, capsys, monkeypatch):
    (project / "actions" / "hello.py").write_text((project / "actions" / "hello.py").read_text().replace(
        '@action("hello.greet", effect="read")', '@action("hello.greet", effect="read", secrets=["greet_token"])'))
    monkeypatch.delenv("SEALFLOW_SECRET_GREET_TOKEN", raising=False)
    forget_hello()
    code, out, err = cli(capsys, "validate", "definitions/")
    assert code == 0 and "warning[C427]: action hello.greet needs the secret 'greet_token'" in out
    assert "C427" not in cli(capsys, "lint", "definitions/")[1]


def test_actions_list_and_show_print_what_each_action_takes_and_returns(project, capsys):
    code, out, _ = cli(capsys, "actions", "list")
    assert code == 0 and "hello.greet" in out and "(name*: string) -> object {greeting}" in out
    code, out, _ = cli(capsys, "actions", "show", "hello.greet", "--json")
    shown = json.loads(out)
    assert shown["input_schema"]["properties"]["name"] == {"type": "string", "description": "who to greet"}
    assert shown["output_schema"]["required"] == ["greeting"] and shown["source"] == "actions/hello.py:12"
    code, _, err = cli(capsys, "actions", "show", "hello.gret")
    assert code == 2 and "did you mean 'hello.greet'?" in err


def test_init_wires_the_editor_schema_with_the_projects_action(project, capsys):
    # Given the files init wrote
    settings = json.loads((project / ".vscode" / "settings.json").read_text())
    schema_file = settings["yaml.schemas"]
    assert list(schema_file) == ["./.vscode/sealflow.schema.json"]
    schema = json.loads((project / ".vscode" / "sealflow.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    definition = yaml.safe_load((project / "definitions" / "hello.v1.yaml").read_text())
    # Then the scaffold's definition passes, a misspelt argument and an unknown action do not
    assert list(validator.iter_errors(definition)) == []
    definition["steps"][0]["with"] = {"nam": "x"}
    messages = [e.message for e in validator.iter_errors(definition)]
    assert any("'nam' was unexpected" in m for m in messages) and any("'name' is a required" in m for m in messages)
    definition["steps"][0]["action"] = "hello.wave"
    assert any("hello.wave" in e.message for e in validator.iter_errors(definition))
    # And sealflow schema --out writes the same for the project's action (this test process may hold others')
    assert cli(capsys, "schema", "--out", "again.json")[0] == 0
    again = json.loads((project / "again.json").read_text())
    assert "hello.greet" in again["$defs"]["actionName"]["enum"]
    clause = [c for c in again["$defs"]["step"]["allOf"] if c["if"]["properties"]["action"]["const"] == "hello.greet"]
    assert clause == schema["$defs"]["step"]["allOf"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_scaffold_gitignore_keeps_the_public_key_and_ignores_the_private_one(project, capsys):
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / "keys").mkdir()
    assert cli(capsys, "keygen", "--out", "keys/ops", "--force")[0] == 0
    ignored = subprocess.run(["git", "check-ignore", "keys/ops.pem", "keys/ops.pub.pem"], cwd=project,
                             capture_output=True, text=True).stdout.split()
    assert ignored == ["keys/ops.pem"]
    ci = yaml.safe_load((project / ".github" / "workflows" / "sealflow.yml").read_text())
    assert "trust.yaml" in ci[True]["pull_request"]["paths"]  # yaml reads `on:` as True


def test_doctor_reports_an_unreadable_key_as_a_failed_check_not_a_usage_error(project, capsys):
    # Given a trust policy naming a public key the clone does not have
    (project / "trust.yaml").write_text("keys:\n  - id: ops\n    public_key: keys/ops.pub.pem\n")
    with open(project / "sealflow.yaml", "a") as fh:
        fh.write("trust: trust.yaml\n")
    # When doctor runs
    code, out, err = cli(capsys, "doctor")
    # Then it reports the key as a failed check among the others and exits 1 (not 2)
    assert code == 1, (out, err)
    assert "missing  trust policy" in out and "T701" in out and "keys/ops.pub.pem" in out
    assert "ok       secrets" in out and "not ready" in out


def test_init_never_overwrites_an_existing_editor_schema(tmp_path, capsys, monkeypatch):
    # Given a folder that already holds an editor schema of its own
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    (tmp_path / "p" / ".vscode").mkdir(parents=True)
    (tmp_path / "p" / ".vscode" / "sealflow.schema.json").write_text("{}")
    # When init runs there, Then it is refused and the file is untouched
    code, _, err = cli(capsys, "init", str(tmp_path / "p"))
    assert code == 1 and "sealflow.schema.json exists" in err
    assert (tmp_path / "p" / ".vscode" / "sealflow.schema.json").read_text() == "{}"


def test_init_on_a_folder_it_cannot_write_says_so_without_a_traceback(tmp_path, capsys, monkeypatch):
    import os

    if os.geteuid() == 0:  # root writes anywhere: a full disk is faked instead
        import pathlib

        def full(self, *a, **k):
            raise OSError(28, "No space left on device", str(self))

        monkeypatch.setattr(pathlib.Path, "write_text", full)
    else:
        (tmp_path / "p").mkdir()
        (tmp_path / "p").chmod(0o500)
    monkeypatch.setenv("SEALFLOW_USER", "ann")
    code, _, err = cli(capsys, "init", str(tmp_path / "p"))
    assert code == 1 and "cannot write" in err and "Traceback" not in err
