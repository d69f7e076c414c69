"""Secrets: resolved at execution time from env, then files (or a provider of yours); a step whose secret this
process lacks is left for a process that holds it (engine/capability.py), one gone at execution is a
`configuration` failure naming it; a value never reaches a log record, an error message, the audit or the file."""

from __future__ import annotations

import glob
import logging
import random

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.execution.actions import action
from sealflow.execution.secrets import REDACTOR, SecretChain, env_name
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

SECRET = "sk-live-7f3a9b2c1d8e"


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv("SEALFLOW_SECRETS_DIR", raising=False)
    monkeypatch.delenv(env_name("crm_api_key"), raising=False)
    yield


@pytest.fixture
def seen(registry):
    got = {}

    @action("crm.sync", registry=registry, secrets=["crm_api_key"])
    def sync(ctx):
        got["secrets"] = ctx.secrets
        got["value"] = ctx.secrets["crm_api_key"]
        return {"synced": True}

    return got


def test_a_secret_is_resolved_from_the_environment(runtime, seen, monkeypatch):
    monkeypatch.setenv("SEALFLOW_SECRET_CRM_API_KEY", SECRET)
    status = runtime.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
    assert status.state == "completed" and seen["value"] == SECRET
    # ctx.secrets holds what the action declared, read-only
    assert dict(seen["secrets"]) == {"crm_api_key": SECRET}
    with pytest.raises(TypeError):
        seen["secrets"]["crm_api_key"] = "changed"


def test_a_secret_is_resolved_from_a_file_and_the_environment_wins(runtime, seen, monkeypatch, tmp_path):
    (tmp_path / "crm_api_key").write_text("from-the-file-123\n")
    monkeypatch.setenv("SEALFLOW_SECRETS_DIR", str(tmp_path))
    runtime.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
    assert seen["value"] == "from-the-file-123"
    monkeypatch.setenv("SEALFLOW_SECRET_CRM_API_KEY", "from-the-env-456")
    runtime.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
    assert seen["value"] == "from-the-env-456"


def test_the_secrets_dir_can_come_from_the_runtime_configuration(tmp_path, registry, seen, clock):
    (tmp_path / "crm_api_key").write_text("configured-789")
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/c.db", clock=clock), registry, {},
                 config=RuntimeConfig(secrets_dir=str(tmp_path)))
    try:
        rt.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
        assert seen["value"] == "configured-789"
    finally:
        rt.close()
        rt.store.close()


def test_a_secret_provider_of_your_own_joins_the_chain(runtime, seen):
    class Vault:
        def get(self, name):
            return {"crm_api_key": "from-the-vault-000"}.get(name)

        def describe(self):
            return "the vault"

    runtime.engine.services.secret_chain = SecretChain().add(Vault())
    runtime.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
    assert seen["value"] == "from-the-vault-000"


def test_a_missing_secret_leaves_the_step_unclaimed_naming_it_until_a_process_holds_it(runtime, seen, monkeypatch):
    # Given no provider of this process holds the secret the step's action declares
    plan = make_plan(S("sync", "action", action="crm.sync", retry=retry("timeout", max_attempts=3)))
    # When the run is driven here
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the step is left as it was (no attempt consumed, no dead letter), naming the secret and how to set it
    assert status.state == "queued" and status.error == (None, None) and "value" not in seen
    assert [a.state for a in status.attempts] == ["scheduled"] and runtime.store.dead_letters() == []
    assert status.waiting["kind"] == "process" and status.waiting["lacks"] == [["secret", "crm_api_key"]]
    assert "SEALFLOW_SECRET_CRM_API_KEY" in status.waiting["how"][0]
    # And once the secret is there, the same step runs when its message is sent again, and the run completes
    monkeypatch.setenv("SEALFLOW_SECRET_CRM_API_KEY", SECRET)
    runtime.clock.advance(runtime.redeliver_after + 1)
    assert runtime.drive(status.run.id).state == "completed" and seen["value"] == SECRET


def test_a_secret_gone_between_the_check_and_the_attempt_fails_the_step_with_configuration(runtime, seen):
    # Given a provider that holds the secret when asked first, and not when the action runs
    class Flaky:
        asked = 0

        def get(self, name):
            Flaky.asked += 1
            return SECRET if Flaky.asked == 1 else None

        def describe(self):
            return "a vault that forgets"

    runtime.engine.services.secret_chain = SecretChain([Flaky()])
    # When the step runs
    status = runtime.run(make_plan(S("sync", "action", action="crm.sync")), {}, initiator="user:ana")
    # Then it fails with configuration (not retried), naming the secret and where it was looked for
    assert status.error[0] == "configuration" and "secret 'crm_api_key' is not configured" in status.error[1]
    assert "a vault that forgets" in status.error[1] and len(status.attempts) == 1
    assert "value" not in seen


def test_a_secret_value_appears_in_no_log_record_error_message_audit_row_or_store_file(
        tmp_path, registry, clock, monkeypatch, caplog):
    # Given an action that leaks its secret every way it can: logs, output, an error message
    monkeypatch.setenv("SEALFLOW_SECRET_CRM_API_KEY", SECRET)

    @action("crm.leaky", registry=registry, secrets=["crm_api_key"])
    def leaky(ctx, fail):
        key = ctx.secrets["crm_api_key"]
        ctx.log.info("calling the CRM with %s", key)
        logging.getLogger("sealflow.engine").warning("token=" + key)
        if fail:
            raise StepError("unauthorized", f"the CRM refused key {key}")
        return {"echo": key, "nested": [f"Bearer {key}"]}

    path = tmp_path / "leak.db"
    rt = Runtime(open_store(f"sqlite:///{path}", clock=clock), registry, {}, rng=random.Random(1))
    caplog.set_level(logging.DEBUG)
    try:
        ok = rt.run(make_plan(S("call", "action", action="crm.leaky", args={"fail": False}),
                              output="${{ steps.call.output }}"), {}, initiator="user:ana")
        bad = rt.run(make_plan(S("call", "action", action="crm.leaky", args={"fail": True})), {},
                     initiator="user:ana")
        # Then the output and the error are redacted where they are recorded
        assert ok.output == {"echo": "[redacted:crm_api_key]", "nested": ["Bearer [redacted:crm_api_key]"]}
        assert bad.error == ("unauthorized", "the CRM refused key [redacted:crm_api_key]")
        assert SECRET not in rt.store.dead_letter(bad.run.id).reason
        for run_id in (ok.run.id, bad.run.id):
            for event in rt.audit(run_id):
                assert SECRET not in repr(event)
            for attempt in rt.status(run_id).attempts:
                assert SECRET not in repr(attempt)
        # and no log record carries it
        records = [r for r in caplog.records if r.name.startswith("sealflow")]
        assert any("[redacted:crm_api_key]" in r.getMessage() for r in records)
        for record in caplog.records:
            assert SECRET not in record.getMessage()
        assert SECRET not in caplog.text
    finally:
        rt.close()
        rt.store.close()
    # and not a byte of the state files holds it
    for name in glob.glob(f"{path}*"):
        with open(name, "rb") as fh:
            assert SECRET.encode() not in fh.read(), name


def test_the_redactor_blanks_values_inside_structures():
    REDACTOR.remember("db_password", "hunter2-but-longer")
    assert REDACTOR.value({"a": ["x hunter2-but-longer y"], "b": 3}) == {"a": ["x [redacted:db_password] y"], "b": 3}
    assert REDACTOR.text("short") == "short"
