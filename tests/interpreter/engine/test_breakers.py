"""Circuit breakers: closed -> open -> half-open (one probe) -> closed, shared through the store by two
runtimes and by two OS processes; an open breaker fails at once with circuit_open, is retried after the
cool-down, and hands an ai step to its fallback model; `sealflow breakers list|reset`."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from interp_helpers import FakeProvider, S, make_plan, retry

from sealflow.cli import main
from sealflow.core.breakers import BreakerSettings
from sealflow.core.clock import FakeClock
from sealflow.core.errors import StepError
from sealflow.dsl.plan import AgentPlan, AiPlan
from sealflow.execution.actions import action
from sealflow.providers.config import CircuitBreaker
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[3]
CONFIG = RuntimeConfig.from_dict({"circuit_breakers": {"svc": {"failures": 2, "window": "60s", "cool_down": "10s"}}})


@pytest.fixture
def service(registry):
    """``t.call`` calls a service that is down while ``state["down"]``; ``state["calls"]`` counts the calls."""
    state = {"down": True, "calls": 0}

    @action("t.call", registry=registry, effect="read")
    def call(ctx):
        state["calls"] += 1
        if state["down"]:
            raise StepError("unavailable", "the service answered 503")
        return {"ok": True}

    return state


def runtimes(tmp_path, registry, clock, n=2, providers=None):
    url = f"sqlite:///{tmp_path}/shared.db"
    return [Runtime(open_store(url, clock=clock), registry, providers or {}, rng=random.Random(1), worker_timeout_ms=20,
                    config=CONFIG) for _ in range(n)]


def close(*rts):
    for rt in rts:
        rt.close()
        rt.store.close()


def test_given_two_runtimes_on_one_store_then_the_breaker_opens_half_opens_and_closes_for_both(tmp_path, registry,
                                                                                                service):
    clock = FakeClock()
    a, b = runtimes(tmp_path, registry, clock)
    plan = make_plan(S("call", "action", action="t.call", circuit_breaker="svc"))
    try:
        # Given a breaker of 2 failures; when one failure happens in each runtime
        assert a.run(plan, {}, initiator="user:t").run.state == "failed"
        opening = b.run(plan, {}, initiator="user:t")
        assert opening.run.state == "failed"
        opened = [e for e in b.audit(opening.run.id) if e.event == "circuit_opened"]
        assert [(e.state_before, e.state_after, e.detail["breaker"]) for e in opened] == [("closed", "open", "svc")]
        # Then it is open for both: the next run fails at once with circuit_open, the service not called
        assert service["calls"] == 2
        status = a.run(plan, {}, initiator="user:t")
        failed = status.attempts[-1]
        assert (status.run.state, failed.error_class) == ("failed", "circuit_open")
        assert "circuit breaker 'svc' is open" in failed.error_message and service["calls"] == 2
        # When the cool-down has passed and the service is back, one probe goes through and closes it
        clock.advance(11)
        service["down"] = False
        assert b.run(plan, {}, initiator="user:t").run.state == "completed"
        assert a.run(plan, {}, initiator="user:t").run.state == "completed"
        assert service["calls"] == 4
        [rec] = a.store.breakers()
        assert (rec.name, rec.state, rec.failures) == ("svc", "closed", 0)
    finally:
        close(a, b)


def test_given_a_half_open_breaker_then_only_one_probe_passes_and_a_failed_probe_reopens_it(store):
    # (on every store backend)
    settings = BreakerSettings(failures=1, window=60, cool_down=5, probe_lease=30)
    # Given an open breaker
    if True:
        store.breaker_record("x", 100.0, settings, error_class="timeout", probe=False)
        assert not store.breaker_admit("x", 101.0, settings).allowed
        # When its cool-down has passed, then the first caller probes and the second is refused
        first, second = store.breaker_admit("x", 106.0, settings), store.breaker_admit("x", 106.1, settings)
        assert (first.allowed, first.probe, second.allowed, second.state) == (True, True, False, "half_open")
        # When the probe fails, then it is open again for a new cool-down
        assert store.breaker_record("x", 107.0, settings, error_class="network", probe=True) == ("half_open", "open")
        assert store.breaker_admit("x", 111.0, settings).retry_after == pytest.approx(1.0)
        # When a probe is handed back unused (its step was skipped), then the next caller probes at once
        assert store.breaker_admit("x", 112.1, settings).probe
        assert store.breaker_record("x", 112.2, settings, error_class=None, probe=True, called=False) == (
            "half_open", "half_open")
        # When the probe's holder vanished, its lease ends and another caller probes
        assert store.breaker_admit("x", 112.5, settings).probe
        assert store.breaker_admit("x", 143.0, settings).probe


CHILD = """
import sys, time
from sealflow.core.breakers import BreakerSettings
from sealflow.store import open_store
store = open_store(sys.argv[1]); s = BreakerSettings(failures=2, window=60, cool_down=0.5)
if sys.argv[2] == "fail":
    for _ in range(2):
        store.breaker_record("svc", time.time(), s, error_class="unavailable", probe=False)
else:
    a = store.breaker_admit("svc", time.time(), s)
    assert a.allowed and a.probe, a
    print("probing", flush=True)
    time.sleep(1.0)
    store.breaker_record("svc", time.time(), s, error_class=None, probe=True)
store.close()
"""


def test_given_two_os_processes_then_they_share_one_breaker(tmp_path):
    url = f"sqlite:///{tmp_path}/os.db"
    store = open_store(url)
    settings = BreakerSettings(failures=2, window=60, cool_down=0.5)

    def child(mode):
        return subprocess.Popen([sys.executable, "-c", CHILD, url, mode], stdout=subprocess.PIPE, text=True,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        # Given another process that records two failures
        assert child("fail").wait(60) == 0
        # Then this process finds the breaker open
        assert store.breaker_admit("svc", time.time(), settings).state == "open"
        # When the cool-down has passed and the other process takes the probe
        time.sleep(0.6)
        prober = child("probe")
        assert prober.stdout.readline().strip() == "probing"
        # Then this process is refused while it probes, and admitted once its probe succeeded
        refused = store.breaker_admit("svc", time.time(), settings)
        assert (refused.allowed, refused.state) == (False, "half_open")
        assert prober.wait(60) == 0
        assert store.breaker_admit("svc", time.time(), settings).state == "closed"
    finally:
        store.close()


def test_given_an_open_breaker_when_the_step_retries_on_circuit_open_then_it_waits_the_cool_down(tmp_path, registry,
                                                                                               service):
    clock = FakeClock()
    [rt] = runtimes(tmp_path, registry, clock, n=1)
    config = RuntimeConfig.from_dict({"circuit_breakers": {"*": {"failures": 1, "cool_down": "30s"}}})
    rt.config = rt.engine.services.config = config
    plan = make_plan(S("call", "action", action="t.call", circuit_breaker="svc2",
                       retry=retry("unavailable", "circuit_open", max_attempts=3, initial_ms=10)))
    try:
        # Given a step whose first call fails and opens its breaker (threshold 1, cool-down 30 s)
        real_sleep = clock.sleep
        clock.sleep = lambda s: (service.update(down=False), real_sleep(s))  # the service recovers meanwhile
        status = rt.run(plan, {}, initiator="user:t", until="final")
        # Then the second attempt failed at once with circuit_open, and the third ran after the cool-down
        classes = [a.error_class for a in status.attempts]
        assert status.run.state == "completed" and classes == ["unavailable", "circuit_open", None]
        assert service["calls"] == 2
        assert status.attempts[2].started_at - status.attempts[0].ended_at >= 30
    finally:
        close(rt)


def test_given_a_model_breaker_open_then_the_ai_step_falls_back_without_calling_it(tmp_path, registry):
    clock = FakeClock()
    primary = FakeProvider(StepError("unavailable", "503"), name="primary")
    primary.config = types.SimpleNamespace(circuit_breaker=CircuitBreaker(failures=1, window=60, cool_down=60))
    backup = FakeProvider({"answer": "from backup"}, name="backup")
    [rt] = runtimes(tmp_path, registry, clock, n=1, providers={"primary": primary, "backup": backup})
    plan = make_plan(S("ask", "ai", ai=AiPlan(model="primary", fallback=("backup",), prompt_template="hi")))
    try:
        # Given a primary model that failed once (its breaker opens at one failure)
        assert rt.run(plan, {}, initiator="user:t").run.state == "completed"
        # When the step runs again while the breaker is open
        status = rt.run(plan, {}, initiator="user:t")
        # Then the backup answered and the primary was not called again
        assert status.run.state == "completed" and len(primary.requests) == 1 and len(backup.requests) == 2
        assert [(r.name, r.state) for r in rt.store.breakers()] == [("model:primary", "open")]
    finally:
        close(rt)


def test_given_breakers_in_a_store_then_the_cli_lists_and_resets_them(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/cli.db"
    store = open_store(url)
    store.breaker_record("svc", time.time(), BreakerSettings(failures=1), error_class="timeout", probe=False,
                         message="took too long")
    store.close()
    # When listed, then the open breaker shows with its failures and settings
    assert main(["breakers", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("svc: open (1/5 failures within 60s, cool-down 30s, probe in ") and "took too long" in out
    # When reset, then it is closed (audited); an unknown name is a usage error naming the known ones
    assert main(["breakers", "reset", "svc", "--store", url, "--as", "user:ops"]) == 0
    assert main(["breakers", "list", "--store", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert [(b["name"], b["state"], b["failures"]) for b in listed["breakers"]] == [("svc", "closed", 0)]
    assert main(["breakers", "reset", "nope", "--store", url]) == 2
    assert "no circuit breaker named 'nope' in this store; known: svc" in capsys.readouterr().err


def test_given_a_model_breaker_open_then_an_agent_step_fails_with_circuit_open_without_calling_it(tmp_path,
                                                                                                 registry):
    clock = FakeClock()
    model = FakeProvider(StepError("unavailable", "503"), name="m")
    model.config = types.SimpleNamespace(circuit_breaker=CircuitBreaker(failures=1, window=60, cool_down=60))
    [rt] = runtimes(tmp_path, registry, clock, n=1, providers={"m": model})
    plan = make_plan(S("help", "agent", agent=AgentPlan(model="m", goal="help", max_steps=2)))
    try:
        # Given an agent step whose model failed once (its breaker opens at one failure)
        assert rt.run(plan, {}, initiator="user:t").error[0] == "unavailable"
        # When it runs again, then it fails with circuit_open and the model was not called again
        assert rt.run(plan, {}, initiator="user:t").error[0] == "circuit_open"
        assert len(model.requests) == 1
    finally:
        close(rt)


@pytest.mark.parametrize("kind", ["ai", "agent"])
def test_given_a_model_breaker_open_then_the_refused_call_takes_nothing_from_the_model_rate_limit(tmp_path, registry,
                                                                                                 kind):
    from sealflow.providers.config import RateLimit

    clock = FakeClock()
    model = FakeProvider(StepError("unavailable", "503"), name="m")
    model.config = types.SimpleNamespace(circuit_breaker=CircuitBreaker(failures=1, window=60, cool_down=60),
                                         rate_limit=RateLimit(requests_per_minute=5))
    [rt] = runtimes(tmp_path, registry, clock, n=1, providers={"m": model})
    step = S("ask", "ai", ai=AiPlan(model="m", prompt_template="hi")) if kind == "ai" else \
        S("ask", "agent", agent=AgentPlan(model="m", goal="help", max_steps=2))
    plan = make_plan(step)
    try:
        # Given a rate-limited model that failed once (one request counted; its breaker opens at one failure)
        assert rt.run(plan, {}, initiator="user:t").error[0] == "unavailable"
        assert rt.store.rate_usage("m", clock.now())[0] == 1
        # When two more runs are refused by the open breaker
        for _ in range(2):
            assert rt.run(plan, {}, initiator="user:t").error[0] == "circuit_open"
        # Then the model was called once, and the limiter still counts only that request
        assert len(model.requests) == 1
        assert rt.store.rate_usage("m", clock.now())[0] == 1
    finally:
        close(rt)


def test_given_a_bad_breaker_setting_when_the_runtime_starts_then_it_names_it(tmp_path):
    from sealflow.core.errors import ConfigError

    # Given a runtime configuration with a misspelt breaker key, then the runtime refuses to start, naming it
    config = RuntimeConfig.from_dict({"circuit_breakers": {"svc": {"failure": 3}}})
    with pytest.raises(ConfigError, match="circuit_breakers.svc: unknown key 'failure'; known keys: failures"):
        Runtime(f"sqlite:///{tmp_path}/bad.db", config=config)


def test_given_an_access_policy_then_only_its_operators_list_or_reset_breakers(tmp_path, capsys):
    # Given an open breaker, and a policy where user:ana is a member of tenant acme and user:ops an operator
    url = f"sqlite:///{tmp_path}/cli.db"
    store = open_store(url)
    store.breaker_record("svc", time.time(), BreakerSettings(failures=1), error_class="timeout", probe=False)
    store.close()
    policy = tmp_path / "access.yaml"
    policy.write_text("operators: [user:ops]\ntenants:\n  acme:\n"
                      "    roles: {admin: ['runs:*', 'dlq:*', 'audit:read']}\n    members: {user:ana: [admin]}\n")
    # When a tenant's member (even with every permission there) resets or lists it, then it is refused
    # (exit 1), since a breaker guards every tenant's calls, and the breaker stays open
    for verb in (["reset", "svc"], ["list"]):
        assert main(["breakers", *verb, "--store", url, "--as", "user:ana", "--access", str(policy)]) == 1
        err = capsys.readouterr().err
        assert "user:ana may not" in err and "only an operator of the access policy" in err
    assert [(r.name, r.state) for r in open_store(url).breakers()] == [("svc", "open")]
    # When the operator resets it, then it is closed, and the audit names the operator
    assert main(["breakers", "reset", "svc", "--store", url, "--as", "user:ops", "--access", str(policy)]) == 0
    store = open_store(url)
    assert [(r.name, r.state) for r in store.breakers()] == [("svc", "closed")]
    assert [e.actor for e in store.audit() if e.event == "circuit_reset"] == ["user:ops"]
    store.close()
