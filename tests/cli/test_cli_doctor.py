"""`sealflow doctor` (issue 14): whether a project is ready here, naming every missing secret, never a value."""

from __future__ import annotations

import json

import pytest

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY

ACTIONS = '''
from sealflow import action


@action("doc.greet", effect="read", secrets=["greeting_key"])
def greet(ctx, name: str) -> dict:
    return {"greeting": ctx.secrets["greeting_key"] + name}
'''

CONFIG = """\
models:
  gpt:
    provider: openai
    model: gpt-4o-mini
    api_key: {secret: DOC_OPENAI_KEY}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose action declares a secret and whose configuration names a model with an API key."""
    (tmp_path / "doc_actions.py").write_text(ACTIONS)
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "sealflow.yaml").write_text("sealflow: 1\nconfig: config.yaml\nactions: [doc_actions.py]\n")
    for name in ("SEALFLOW_SECRET_GREETING_KEY", "SEALFLOW_SECRET_DOC_OPENAI_KEY", "SEALFLOW_SECRETS_DIR",
                 "SEALFLOW_CONFIG", "SEALFLOW_PROJECT", "SEALFLOW_STORE", "SEALFLOW_ACCESS", "SEALFLOW_TRUST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    REGISTRY._actions.pop("doc.greet", None)


def doctor(capsys, *argv):
    code = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_names_each_missing_secret_and_where_it_is_referenced(capsys, project):
    # Given no provider holds the model's API key nor the action's secret
    # When doctor checks the project
    code, out, err = doctor(capsys)
    # Then it is not ready (exit 1), naming both secrets, where each is referenced and how to set it
    assert code == 1, out + err
    assert "secret 'DOC_OPENAI_KEY' (api_key of model 'gpt' in " in out and "config.yaml" in out
    assert "secret 'greeting_key' (declared by action 'doc.greet' in " in out and "doc_actions.py" in out
    assert "SEALFLOW_SECRET_GREETING_KEY" in out and out.rstrip().endswith("then run `sealflow doctor` again")


def test_doctor_is_ready_once_the_secrets_resolve_and_shows_no_value(capsys, project, monkeypatch):
    # Given the API key in the environment and the action's secret as a file of the secrets folder
    monkeypatch.setenv("SEALFLOW_SECRET_DOC_OPENAI_KEY", "sk-doctor-0123456789")
    (project / "secrets").mkdir()
    (project / "secrets" / "greeting_key").write_text("hello-secret-value\n")
    monkeypatch.setenv("SEALFLOW_SECRETS_DIR", str(project / "secrets"))
    # When doctor checks it, as JSON
    code, out, err = doctor(capsys, "--json")
    # Then it is ready, and no secret value appears
    report = json.loads(out)
    assert code == 0 and report["ready"] is True, out + err
    assert {c["what"]: c["state"] for c in report["checks"]}["secrets"] == "ok"
    assert "sk-doctor" not in out + err and "hello-secret-value" not in out + err


NOTIFY_CONFIG = """\
notifications:
  channels:
    ops:
      kind: webhook
      url: https://hooks.example.com/sealflow
      secret: {secret: DOC_HOOK_SECRET}
    finance:
      kind: slack
      url: {secret: DOC_SLACK_URL}
"""


def test_doctor_names_a_notification_channel_s_missing_secrets_and_where_each_is_referenced(capsys, project,
                                                                                         monkeypatch):
    # Given a project whose actions and models have their secrets, and whose notification channels do not:
    # a webhook's signing secret and a Slack channel's URL
    (project / "config.yaml").write_text(NOTIFY_CONFIG)
    (project / "secrets").mkdir()
    (project / "secrets" / "greeting_key").write_text("hello-secret-value\n")
    monkeypatch.setenv("SEALFLOW_SECRETS_DIR", str(project / "secrets"))
    for name in ("SEALFLOW_SECRET_DOC_HOOK_SECRET", "SEALFLOW_SECRET_DOC_SLACK_URL"):
        monkeypatch.delenv(name, raising=False)
    # When doctor checks it
    code, out, err = doctor(capsys)
    # Then it is not ready (exit 1), naming each secret, its channel and the configuration file, and how to set it
    assert code == 1, out + err
    assert "ok       notifications  channels finance, ops" in out
    assert "secret 'DOC_HOOK_SECRET' (signing secret of notification channel 'ops' (notifications.channels.ops) " \
           "in " in out and "config.yaml) is not set: set SEALFLOW_SECRET_DOC_HOOK_SECRET" in out
    assert "secret 'DOC_SLACK_URL' (url of notification channel 'finance' (notifications.channels.finance) in " \
           in out
    # And once both are set (the URL a credential), it is ready and shows neither value
    monkeypatch.setenv("SEALFLOW_SECRET_DOC_HOOK_SECRET", "whsec_ZG9jdG9yLXNpZ25pbmcta2V5")
    (project / "secrets" / "DOC_SLACK_URL").write_text("https://hooks.slack.com/services/T0/B0/DOCTORSLACKTOKEN\n")
    code, out, err = doctor(capsys, "--json")
    assert code == 0 and json.loads(out)["ready"] is True, out + err
    assert "DOCTORSLACKTOKEN" not in out + err and "ZG9jdG9y" not in out + err


def test_doctor_without_a_project_says_so_and_is_ready(capsys, tmp_path, monkeypatch):
    # Given an empty folder (no sealflow.yaml here or above)
    monkeypatch.chdir(tmp_path)
    for name in ("SEALFLOW_CONFIG", "SEALFLOW_PROJECT", "SEALFLOW_STORE", "SEALFLOW_ACCESS", "SEALFLOW_TRUST"):
        monkeypatch.delenv(name, raising=False)
    # When doctor runs, Then it names the embedded default and how to make a project, and is ready
    code, out, err = doctor(capsys)
    assert code == 0 and "no sealflow.yaml here or above" in out and "sealflow init" in out, out + err


def test_a_trust_policy_path_that_does_not_exist_says_so_and_where_it_is_named(capsys, project):
    # Given a project whose trust: names a file that is not there
    (project / "sealflow.yaml").write_text("sealflow: 1\ntrust: nope.yaml\n")
    # When doctor reads the project, Then a failed check (exit 1, not a usage error) says the file does not
    # exist and what names it, among the other checks
    code, out, err = doctor(capsys)
    assert code == 1 and f"missing  trust policy   {project / 'nope.yaml'} does not exist" in out, (out, err)
    assert "trust: in sealflow.yaml" in out and "is invalid" not in out and "ok       store" in out


def test_doctor_names_the_mcp_servers_and_a_secret_one_needs(capsys, project, monkeypatch):
    # Given the project names an MCP server whose header is a secret no provider holds
    monkeypatch.delenv("SEALFLOW_SECRET_DOC_MCP_TOKEN", raising=False)
    (project / "sealflow.yaml").write_text(
        "sealflow: 1\nconfig: config.yaml\nactions: [doc_actions.py]\nmcp:\n  tickets:\n"
        "    url: http://127.0.0.1:9/mcp\n    headers: {Authorization: {secret: DOC_MCP_TOKEN}}\n")
    # When doctor checks it
    code, out, err = doctor(capsys, "--json")
    # Then the server is listed, and its missing secret named with where it is referenced
    checks = json.loads(out)["checks"]
    assert code == 1
    assert any(c["what"] == "mcp servers" and "tickets" in c["detail"] for c in checks)
    assert any("'DOC_MCP_TOKEN' (env or headers of MCP server 'tickets'" in c["detail"] for c in checks)
