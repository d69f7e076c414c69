"""Prometheus metrics: a run moves the counters, /metrics exposes them, every name is sealflow_ and
conventional (parsed with prometheus_client's own parser)."""

from __future__ import annotations

import random
import re

from fastapi.testclient import TestClient
from interp_helpers import S, make_plan, retry
from prometheus_client.parser import text_string_to_metric_families

from sealflow.core.errors import StepError
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings
from sealflow.store import open_store


def scrape(text: str) -> dict[str, list]:
    """family name -> its samples, parsed by prometheus_client."""
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def value(families, sample_name: str, **labels) -> float:
    for _, samples in families.values():
        for s in samples:
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def flaky_plan(registry):
    calls = {"n": 0}

    @action("t.flaky", registry=registry)
    def flaky(ctx):
        calls["n"] += 1
        if calls["n"] == 1:
            raise StepError("network", "reset")
        return {"ok": True}

    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        return kw

    return make_plan(S("call", "action", action="t.flaky", retry=retry("network", initial_ms=1000)),
                     S("note", "action", action="t.echo", args={"x": 1}))


def test_a_run_moves_the_counters_and_serve_exposes_them_at_metrics(runtime, registry):
    # Given a workflow whose first step fails once with a retryable error
    plan = flaky_plan(registry)
    # When it runs to completion and /metrics is scraped from the server
    status = runtime.run(plan, {}, initiator="user:ana", until="final")
    assert status.state == "completed"
    with TestClient(create_app(ServerSettings(rate=0, allow_open=True), runtime)) as client:
        response = client.get("/metrics")
    # Then it is the Prometheus text format, and the counters moved
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    families = scrape(response.text)
    assert value(families, "sealflow_step_attempts_total", kind="action", outcome="failed",
                 error_class="network") == 1
    assert value(families, "sealflow_step_attempts_total", kind="action", outcome="succeeded") == 2
    assert value(families, "sealflow_step_retries_total", kind="action") == 1
    assert value(families, "sealflow_runs_finished_total", state="completed") == 1
    assert value(families, "sealflow_run_duration_seconds_count", state="completed") == 1
    assert value(families, "sealflow_step_duration_seconds_count", kind="action", outcome="succeeded") == 2
    # and the state read from the store at scrape time
    assert value(families, "sealflow_runs", state="completed") == 1
    assert value(families, "sealflow_dead_letters", status="dead") == 0
    assert "sealflow_queue_depth" in families and "sealflow_outbox_oldest_age_seconds" in families


def test_every_metric_name_is_prefixed_and_follows_the_naming_conventions(runtime, registry):
    # Given a runtime that ran something (so labelled families have samples)
    runtime.run(flaky_plan(registry), {}, initiator="user:ana", until="final")
    # When its registry is exposed and parsed
    families = scrape(runtime.telemetry.metrics.exposition().decode())
    # Then every family is sealflow_, snake_case; counters end in _total; histograms are in seconds
    assert families
    for name, (kind, samples) in families.items():
        assert re.fullmatch(r"sealflow_[a-z][a-z0-9_]*", name), name
        assert not name.endswith("_total"), name  # the parser strips _total from counter families
        if kind == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in samples), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
        assert not re.search(r"_(ms|milliseconds|minutes|hours)(_|$)", name), name


def test_a_refused_cross_tenant_message_is_counted(runtime, registry):
    # Given a run waiting to start, and a message naming another tenant than the run's
    plan = flaky_plan(registry)
    run_id = runtime.submit(plan, {}, initiator="user:ana", tenant="acme")
    att = runtime.store.active_attempt(run_id)
    # When the engine handles the forged message
    runtime.engine.handle(run_id, att.step_id, att.attempt, att.token, "globex")
    # Then it was refused and counted as a cross-tenant attempt
    families = scrape(runtime.telemetry.metrics.exposition().decode())
    assert value(families, "sealflow_messages_refused_total", reason="tenant_mismatch") == 1
    assert value(families, "sealflow_cross_tenant_attempts_total", via="message") == 1


def test_a_replayed_message_with_its_tenant_changed_counts_as_cross_tenant_not_merely_stale(runtime, registry):
    # Given a run of acme whose first message was handled (its token is spent), and a run of acme that ended
    plan = flaky_plan(registry)
    runtime.submit(plan, {}, initiator="user:ana", tenant="acme")
    (real,) = runtime.store.take_outbox(runtime.clock.now())
    runtime.engine.handle(*real)
    ended = runtime.run(plan, {}, initiator="user:ana", tenant="acme", until="final")
    assert ended.state == "completed"
    first = ended.attempts[0]
    # When the spent message is replayed naming globex, and a message naming globex arrives for the ended run
    runtime.engine.handle(real.run_id, real.step_id, real.attempt, real.token, "globex")
    runtime.engine.handle(ended.run.id, first.step_id, first.attempt, first.token, "globex")
    # Then both are refused as naming another tenant (audited so) and counted as cross-tenant attempts
    refused = [e.detail["reason"] for e in runtime.store.audit(None) if e.event == "message_refused"]
    assert refused == ["tenant_mismatch", "tenant_mismatch"]
    families = scrape(runtime.telemetry.metrics.exposition().decode())
    assert value(families, "sealflow_cross_tenant_attempts_total", via="message") == 2
    assert value(families, "sealflow_messages_refused_total", reason="stale_token") == 0
    # And the same spent message naming its own tenant is merely stale, not cross-tenant
    runtime.engine.handle(*real)
    families = scrape(runtime.telemetry.metrics.exposition().decode())
    assert value(families, "sealflow_messages_refused_total", reason="stale_token") == 1
    assert value(families, "sealflow_cross_tenant_attempts_total", via="message") == 2


def test_a_worker_serves_its_metrics_on_its_own_port(runtime):
    # Given the metrics server a `sealflow worker --metrics-port` starts (port 0: any free port)
    import urllib.request

    from sealflow.runtime.telemetry.metrics import serve_metrics

    server, thread = serve_metrics(runtime.telemetry.metrics, 0)
    try:
        # When it is scraped
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    # Then it is this runtime's registry
    assert "sealflow_step_attempts_total" in text or "sealflow_runs" in scrape(text)


def test_an_attempt_refused_by_policy_is_counted_as_a_denial(tmp_path, registry, clock):
    # Given a worker that executes only signed definitions, and an unsigned run
    from sealflow.policy.trustgate import TrustGate

    runtime = Runtime(open_store(f"sqlite:///{tmp_path}/gated.db", clock=clock), registry, {},
                      rng=random.Random(7), worker_timeout_ms=20,
                      trust_gate=lambda actor: TrustGate(allow_unsigned=False, actor=actor))
    try:
        # When the run's first step is claimed
        status = runtime.run(flaky_plan(registry), {}, initiator="user:ana", until="final")
        families = scrape(runtime.telemetry.metrics.exposition().decode())
    finally:
        runtime.close()
        runtime.store.close()
    # Then the attempt was refused before it ran, and counted as a policy denial
    assert status.state == "failed"
    assert value(families, "sealflow_policy_denials_total", error_class="unauthorized", via="attempt") == 1


def test_a_finished_runs_duration_is_counted_from_the_engines_record_without_reading_the_run(runtime, registry):
    # Given a run that will finish, and a store that must not be asked for the run's record once it has started
    plan = flaky_plan(registry)
    run_id = runtime.submit(plan, {}, initiator="user:ana")
    read = runtime.store.get_run
    asked: list[str] = []

    def counting(rid):
        asked.append(rid)
        return read(rid)

    runtime.telemetry.store = type("NoRuns", (), {"get_run": staticmethod(counting)})()
    # When it runs to completion
    assert runtime.drive(run_id, until="final").state == "completed"
    # Then its duration was observed, from the submit time the engine held, with no read of the run for it
    families = scrape(runtime.telemetry.metrics.exposition().decode())
    assert value(families, "sealflow_run_duration_seconds_count", state="completed") == 1
    assert asked == []
