"""`sealflow models list|check`, and a definition naming a model the configuration lacks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sealflow.cli import main

WORKFLOW = """\
sealflow: 1
name: asks-fast
version: 1
owner: team:test
steps:
  - id: ask
    ai: {model: fast, prompt: {template: "Say hi"}}
"""


def write_config(tmp_path: Path, models: str) -> Path:
    path = tmp_path / "runtime.yaml"
    path.write_text(models)
    return path


def test_given_a_models_section_when_listed_then_each_name_shows_without_its_key(tmp_path, capsys, monkeypatch):
    # Given a configuration naming an OpenAI-compatible model whose key is an environment secret
    monkeypatch.setenv("FAKE_KEY", "sk-very-secret-value-123")
    config = write_config(tmp_path, "models:\n  fast:\n    provider: openai\n    base_url: http://127.0.0.1:9/v1\n"
                                    "    model: gpt-4o-mini\n    api_key: {secret: FAKE_KEY}\n")
    # When `models list --json` runs
    code = main(["--config", str(config), "models", "list", "--json"])
    out = capsys.readouterr().out
    # Then default (local) and fast are listed, and the key appears nowhere
    names = [r["name"] for r in json.loads(out)]
    assert code == 0 and names == ["default", "fast"] and "sk-very-secret" not in out


def test_given_a_missing_secret_when_checked_then_exit_1_names_the_problem(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ABSENT_KEY", raising=False)
    config = write_config(tmp_path, "models:\n  fast:\n    provider: openai\n    model: gpt-4o-mini\n"
                                    "    api_key: {secret: ABSENT_KEY}\n")
    code = main(["--config", str(config), "models", "check", "--no-probe"])
    out = capsys.readouterr().out
    assert code == 1 and "FAILED" in out and "ABSENT_KEY" in out


def test_given_an_inline_key_when_listed_then_a_usage_error_that_does_not_repeat_it(tmp_path, capsys):
    config = write_config(tmp_path, "models:\n  fast:\n    provider: openai\n    model: m\n"
                                    "    api_key: sk-inline-do-not-echo\n")
    code = main(["--config", str(config), "models", "list"])
    captured = capsys.readouterr()
    assert code == 2 and "sk-inline-do-not-echo" not in captured.out + captured.err


def test_given_a_definition_naming_an_unconfigured_model_when_run_then_refused_before_anything_is_created(
        tmp_path, capsys, monkeypatch):
    # Given no models section, and a definition that calls model `fast`
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEALFLOW_CONFIG", raising=False)
    (tmp_path / "asks-fast.v1.yaml").write_text(WORKFLOW)
    # When it is run
    code = main(["run", "asks-fast.v1.yaml"])
    err = capsys.readouterr().err
    # Then exit 1: the missing name and where models are configured; no run was created
    assert code == 1 and "'fast'" in err and "models:" in err
    db = tmp_path / ".sealflow" / "state.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
