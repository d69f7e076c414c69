"""Tenant limits: daily quotas and queued-run limits refuse a submission with a retry-after; nothing half-created."""

from __future__ import annotations

import random
import threading

import pytest
from interp_helpers import FakeProvider, S, make_plan

from sealflow.cli import main
from sealflow.dsl.plan import AiPlan
from sealflow.runtime.config import ConfigError, RuntimeConfig, TenantLimits, parse_size
from sealflow.runtime.facade import Runtime
from sealflow.store import AdmissionRefused, open_store


def limited(tmp_path, registry, providers, clock, **limits):
    config = RuntimeConfig(tenant_limits={"acme": TenantLimits(**limits)})
    return Runtime(open_store(f"sqlite:///{tmp_path}/q.db", clock=clock), registry, providers,
                   rng=random.Random(3), worker_timeout_ms=20, config=config)


@pytest.fixture
def quota_rt(tmp_path, registry, providers, clock):
    rt = limited(tmp_path, registry, providers, clock, daily_tokens=1000, daily_cost_usd=5.0)
    yield rt
    rt.close()
    rt.store.close()


def ai_plan(max_tokens=None):
    return make_plan(S("think", "ai", ai=AiPlan(model="m1", prompt_template="x", max_tokens=max_tokens)))


def counts(rt):
    conn = rt.store._conn
    return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("runs", "attempts", "outbox",
                                                                                 "timers")}


def test_a_submission_over_the_tenants_daily_token_quota_is_refused_with_a_retry_after(quota_rt, providers, clock):
    # Given a tenant that has used its daily token quota
    providers["m1"] = FakeProvider({"ok": True}, tokens=1000)
    assert quota_rt.run(ai_plan(max_tokens=900), {}, initiator="user:ana", tenant="acme").state == "completed"
    before = counts(quota_rt)
    # When it submits again
    with pytest.raises(AdmissionRefused) as refused:
        quota_rt.submit(ai_plan(), {}, initiator="user:ana", tenant="acme")
    # Then it is refused naming the limit, with the seconds until the UTC day resets, and nothing was created
    exc = refused.value
    midnight = (int(clock.now() // 86400) + 1) * 86400
    assert exc.limit == "daily_tokens" and exc.error_class == "budget_exceeded"
    assert exc.retry_after == pytest.approx(midnight - clock.now()) and "daily_tokens quota of 1000" in str(exc)
    assert counts(quota_rt) == before
    refusal = [e for e in quota_rt.store.audit() if e.event == "submit_refused"]
    assert len(refusal) == 1 and refusal[0].tenant == "acme" and refusal[0].decision == "deny"
    assert refusal[0].detail["limit"] == "daily_tokens"
    # and another tenant is not affected; the next UTC day admits the tenant again
    assert quota_rt.run(ai_plan(), {}, initiator="user:bo", tenant="globex").state == "completed"
    clock.advance(exc.retry_after + 1)
    assert quota_rt.run(ai_plan(max_tokens=900), {}, initiator="user:ana", tenant="acme").state == "completed"


def test_a_submission_over_the_daily_cost_quota_is_refused(quota_rt, providers):
    providers["m1"] = FakeProvider({"ok": True}, tokens=1, cost=5.0)
    quota_rt.run(ai_plan(max_tokens=900), {}, initiator="user:ana", tenant="acme")
    with pytest.raises(AdmissionRefused, match="daily_cost_usd"):
        quota_rt.submit(ai_plan(), {}, initiator="user:ana", tenant="acme")


def test_a_model_step_that_could_exceed_the_daily_quota_ends_the_run(quota_rt, providers):
    # Given a tenant at 950 of its 1000 daily tokens (still admitted: the quota is not spent)
    providers["m1"] = model = FakeProvider({"ok": True}, tokens=950)
    quota_rt.run(ai_plan(max_tokens=900), {}, initiator="user:ana", tenant="acme")
    late = quota_rt.submit(ai_plan(max_tokens=100), {}, initiator="user:ana", tenant="acme")
    # When the admitted run reaches a step that may use 100 more
    status = quota_rt.drive(late)
    # Then the call is not made and the run fails with budget_exceeded naming the quota
    assert status.error[0] == "budget_exceeded" and "daily_tokens quota" in status.error[1]
    assert len(model.requests) == 1


def test_a_submission_over_the_queued_run_limit_is_refused_until_a_run_finishes(tmp_path, registry, providers,
                                                                               clock):
    rt = limited(tmp_path, registry, providers, clock, max_queued_runs=2)
    try:
        plan = make_plan(S("x", "succeed"))
        # Given two runs of the tenant not yet finished
        first = rt.submit(plan, {}, initiator="user:ana", tenant="acme", idempotency_key="k1")
        rt.submit(plan, {}, initiator="user:ana", tenant="acme")
        before = counts(rt)
        # When a third is submitted
        with pytest.raises(AdmissionRefused) as refused:
            rt.submit(plan, {}, initiator="user:ana", tenant="acme", idempotency_key="k3")
        # Then it is refused naming the limit, with a rough retry-after, and nothing is created
        assert refused.value.limit == "max_queued_runs" and refused.value.error_class == "rate_limited"
        assert refused.value.retry_after >= 1 and refused.value.retry_after <= 300
        assert "max_queued_runs limit of 2" in str(refused.value)
        assert counts(rt) == before
        # while resubmitting an admitted run (same idempotency key) answers that run, and others are unaffected
        assert rt.submit(plan, {}, initiator="user:ana", tenant="acme", idempotency_key="k1") == first
        rt.submit(plan, {}, initiator="user:bo", tenant="globex")
        # and once a run finishes, the tenant is admitted again
        rt.drive(first)
        assert rt.submit(plan, {}, initiator="user:ana", tenant="acme", idempotency_key="k3")
    finally:
        rt.close()
        rt.store.close()


def test_concurrent_submissions_cannot_both_take_the_last_queue_slot(tmp_path, registry, providers, clock):
    # Given two runtimes (two processes) on one store, and a tenant limited to one queued run
    config = RuntimeConfig(tenant_limits={"*": TenantLimits(max_queued_runs=1)})
    rts = [Runtime(open_store(f"sqlite:///{tmp_path}/race.db", clock=clock), registry, providers, config=config)
           for _ in range(2)]
    plan = make_plan(S("x", "succeed"))
    won, lost = [], []

    def submit(rt):
        try:
            won.append(rt.submit(plan, {}, initiator="user:ana", tenant="acme"))
        except AdmissionRefused:
            lost.append(1)

    # When eight submissions race
    threads = [threading.Thread(target=submit, args=(rts[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one was admitted
    try:
        assert len(won) == 1 and len(lost) == 7
        assert rts[0].store._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    finally:
        for rt in rts:
            rt.close()
            rt.store.close()


# -- the configuration ------------------------------------------------------------------------------

CONFIG = """
tenant_limits:
  "*": {max_queued_runs: 100}
  acme: {daily_tokens: 2000000, daily_cost_usd: 50, max_queued_runs: 10, max_running_steps: 4}
tempdir: {max_bytes: 10MiB, root: /tmp/sealflow-test}
secrets: {dir: /run/secrets}
access: policy.yaml
"""


def test_the_configuration_file_is_loaded_from_a_path_or_sealflow_config(tmp_path, monkeypatch):
    path = tmp_path / "sealflow.yaml"
    path.write_text(CONFIG)
    config = RuntimeConfig.load(path)
    assert config.limits("acme") == TenantLimits(2_000_000, 50.0, 10, 4)
    assert config.limits("globex") == TenantLimits(max_queued_runs=100) and config.running_limit("globex") is None
    assert config.has_bulkheads and config.tempdir_max_bytes == 10 * 2**20 and config.secrets_dir == "/run/secrets"
    assert config.extra == {"access": "policy.yaml"}
    monkeypatch.setenv("SEALFLOW_CONFIG", str(path))
    assert RuntimeConfig.from_env().limits("acme").max_running_steps == 4
    monkeypatch.delenv("SEALFLOW_CONFIG")
    assert RuntimeConfig.from_env().limits("acme").admits_all


@pytest.mark.parametrize("text, message", [
    ("tenant_limits: {acme: {daily_tokns: 5}}", "unknown key 'daily_tokns'"),
    ("tenant_limits: {acme: {max_queued_runs: -1}}", "must be a number >= 0"),
    ("tempdir: {max_bytes: lots}", "is not a size"),
    ("tempdir: [1]", "must be a map"),
    ("- a list", "must be a map at the top level"),
])
def test_a_bad_configuration_names_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        RuntimeConfig.load(path)


def test_sizes_accept_units():
    assert parse_size("100MiB") == 100 * 2**20 and parse_size("512 KB") == 512_000 and parse_size(2048) == 2048


def test_cli_submit_over_a_limit_from_config_is_refused_with_retry_after(tmp_path, capsys, monkeypatch):
    # Given a configuration allowing one queued run per tenant, and a definition
    monkeypatch.chdir(tmp_path)
    (tmp_path / "limits.yaml").write_text('tenant_limits: {"*": {max_queued_runs: 1}}\n')
    flow = tmp_path / "tiny.v1.yaml"
    flow.write_text("sealflow: 1\nname: tiny\nversion: 1\nowner: team:x\nsteps:\n  - {id: done, succeed: {}}\n")
    store = f"sqlite:///{tmp_path}/cli.db"
    assert main(["--config", "limits.yaml", "submit", str(flow), "--store", store]) == 0
    # When a second run is submitted
    code = main(["--config", "limits.yaml", "submit", str(flow), "--store", store])
    # Then it is refused (exit 1) naming the limit and when to retry
    err = capsys.readouterr().err
    assert code == 1 and "max_queued_runs limit of 1" in err and "submit again in about" in err
    # and a configuration that does not load is a usage error
    assert main(["--config", "missing.yaml", "submit", str(flow), "--store", store]) == 2
