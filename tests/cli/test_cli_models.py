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


def test_given_rate_limits_when_listed_then_each_model_shows_its_limit(tmp_path, capsys):
    # Given a model limited in requests and tokens per minute, and one without a limit
    config = write_config(tmp_path, "models:\n  fast:\n    provider: openai\n    base_url: http://127.0.0.1:9/v1\n"
                                    "    model: gpt-4o-mini\n    rate_limit: {requests_per_minute: 500, "
                                    "tokens_per_minute: 200000}\n  free:\n    provider: local\n")
    # When `models list` runs, as text and as JSON
    code = main(["--config", str(config), "models", "list"])
    text = capsys.readouterr().out
    assert main(["--config", str(config), "models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    # Then the limits are shown, and said to be shared by every worker
    fast = next(line for line in text.splitlines() if line.startswith("fast"))
    assert code == 0 and "500 requests/min, 200000 tokens/min (all workers)" in fast
    assert "no rate limit" in next(line for line in text.splitlines() if line.startswith("free"))
    assert rows["fast"]["rate_limit"] == {"requests_per_minute": 500, "tokens_per_minute": 200000}
    assert rows["free"]["rate_limit"] is None


def test_given_a_bad_rate_limit_when_listed_then_a_usage_error_names_the_key(tmp_path, capsys):
    # Given a rate limit of zero requests per minute
    config = write_config(tmp_path, "models:\n  fast:\n    provider: local\n    rate_limit: {requests_per_minute: 0}\n")
    # When listed / Then exit 2 with the file and the key, no traceback
    code = main(["--config", str(config), "models", "list"])
    err = capsys.readouterr().err
    assert code == 2 and "models.fast.rate_limit.requests_per_minute: must be positive" in err
    assert str(config) in err and "Traceback" not in err


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


def test_given_a_recorded_run_when_replayed_then_no_provider_is_called(tmp_path, capsys, monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fake_model_servers import FakeModelServer

    # Given a model `fast` served by a fake OpenAI-compatible server, and a definition that asks it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEALFLOW_SECRET_FAKE_KEY", "sk-recorded-key-0001")
    (tmp_path / "asks-fast.v1.yaml").write_text(WORKFLOW.replace('"Say hi"}}', '"Say hi"}, max_tokens: 50}'))
    tape = tmp_path / "calls.jsonl"
    with FakeModelServer("sk-recorded-key-0001") as server:
        config = write_config(tmp_path, f"models:\n  fast:\n    provider: openai\n    base_url: {server.base_url}\n"
                                        "    model: gpt-4o-mini\n    api_key: {secret: FAKE_KEY}\n")
        # When it is run with --record
        code = main(["--config", str(config), "run", "asks-fast.v1.yaml", "--record", str(tape), "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err + captured.out
        recorded = json.loads(captured.out)
        assert code == 0 and recorded["state"] == "completed" and len(server.requests) == 1
    # Then the call is in the recording, without the key
    lines = tape.read_text().splitlines()
    assert len(lines) == 1 and "sk-recorded-key" not in lines[0]
    # and with the server gone, --replay runs it again from the recording alone
    code = main(["--config", str(config), "run", "asks-fast.v1.yaml", "--replay", str(tape), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err + captured.out
    replayed = json.loads(captured.out)
    assert code == 0 and replayed["state"] == "completed"
    assert [st.get("output") for st in replayed["steps"]] == [st.get("output") for st in recorded["steps"]]
    assert [st.get("tokens") for st in replayed["steps"]] == [st.get("tokens") for st in recorded["steps"]]


def test_given_record_and_replay_together_then_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "asks-fast.v1.yaml").write_text(WORKFLOW)
    code = main(["run", "asks-fast.v1.yaml", "--record", "a.jsonl", "--replay", "b.jsonl"])
    assert code == 2 and "exclude each other" in capsys.readouterr().err
