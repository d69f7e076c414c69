"""$ref paths resolve from the definition, not the current directory; names refuse control characters."""

from __future__ import annotations

import json

import pytest

from sealflow.dsl.api import check_bytes, check_file

DEFINITION = """\
sealflow: 1
name: refs
version: 1
owner: team:qa
input:
  schema: {$ref: REF}
steps:
  - id: a
    set: {x: "1"}
"""


def write(folder, ref: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "refs.v1.yaml"
    path.write_text(DEFINITION.replace("REF", ref))
    return path


def test_given_no_git_folder_when_a_ref_is_resolved_then_it_is_read_from_the_definitions_folder(tmp_path,
                                                                                             monkeypatch):
    # Given a schema beside the definition, and a different file of the same name in the current directory
    definition = write(tmp_path / "flows", "input.json")
    (tmp_path / "flows" / "input.json").write_text(json.dumps({"type": "object", "required": ["a"]}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "input.json").write_text(json.dumps({"type": "object"}))
    monkeypatch.chdir(elsewhere)
    # When checked, Then the schema beside the definition is the one inlined
    result = check_file(definition)
    assert result.ok, [d.format() for d in result.diagnostics]
    assert result.plan.input_schema == {"type": "object", "required": ["a"]}


@pytest.mark.parametrize("ref", ["../secret.json", "/etc/hostname", "sub/../../secret.json"])
def test_given_no_git_folder_when_a_ref_leaves_the_definitions_folder_then_it_is_refused(tmp_path, monkeypatch,
                                                                                       ref):
    (tmp_path / "secret.json").write_text(json.dumps({"type": "object"}))
    definition = write(tmp_path / "flows", ref)
    monkeypatch.chdir(tmp_path)
    result = check_file(definition)
    assert [d.code for d in result.errors] == ["S207"]
    assert "outside the repository" in result.errors[0].message
    assert result.errors[0].location.line == 6


def test_given_a_git_folder_when_a_ref_is_resolved_then_it_is_relative_to_the_repository_root(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "in.json").write_text(json.dumps({"type": "object"}))
    result = check_file(write(tmp_path / "flows", "schemas/in.json"))
    assert result.ok, [d.format() for d in result.diagnostics]


def test_given_a_symbolic_link_out_of_the_repository_when_resolved_then_it_is_refused(tmp_path):
    (tmp_path / "outside.json").write_text(json.dumps({"type": "object"}))
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "link.json").symlink_to(tmp_path / "outside.json")
    result = check_file(write(repo, "link.json"))
    assert [d.code for d in result.errors] == ["S207"]


HEAD = ('sealflow: 1\nname: probe\nversion: 1\nowner: team:qa\npermissions: [crm:read]\nsteps:\n'
        '  - id: a\n    action: crm.get\n    permissions: [crm:read]\n'
        '  - id: g\n    approval: {approvers: [role:x], timeout: 1h}\n')


@pytest.mark.parametrize("old, new, line", [
    ("name: probe", 'name: "probe\\n"', 2),
    ("owner: team:qa", 'owner: "team:qa\\n"', 4),
    ("permissions: [crm:read]\nsteps", 'permissions: ["crm:read\\n"]\nsteps', 5),
    ("[role:x]", '["role:x\\n"]', 11),
    ("[role:x]", '["role:x\\u0007"]', 11),
    ("[role:x]", '["role:x\\u0000"]', 11),
    ("id: a", 'id: "a\\n"', 7),
    ("action: crm.get", 'action: "crm.get\\n"', 8),
])
def test_given_a_name_with_a_trailing_newline_or_control_character_when_checked_then_the_schema_refuses_it(
        old, new, line):
    assert HEAD.count(old) == 1
    result = check_bytes(HEAD.replace(old, new).encode(), "wf.yaml")
    assert [d.code for d in result.errors] == ["S204"]
    assert result.errors[0].location.line == line


def test_given_a_run_as_with_a_trailing_newline_when_checked_then_refused():
    text = HEAD.replace("permissions: [crm:read]\nsteps",
                        'trigger:\n  schedule: {cron: "0 6 * * *", timezone: UTC, run_as: "service:batch\\n"}\n'
                        "permissions: [crm:read]\nsteps")
    result = check_bytes(text.encode(), "wf.yaml")
    assert [d.code for d in result.errors] == ["S204"]
