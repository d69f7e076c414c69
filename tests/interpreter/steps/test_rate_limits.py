"""Per-model rate limits on ``ai`` and ``agent`` steps, against the fake OpenAI-compatible server (real HTTP),
on both store backends and a fake clock: a call over the limit waits durably, it does not fail.
"""

from __future__ import annotations

import random
import time

import pytest
from fake_model_servers import FakeModelServer
from interp_helpers import BACKENDS, S, make_plan

from sealflow.cli.render import print_outcome
from sealflow.core.clock import FakeClock
from sealflow.dsl.plan import AgentPlan, AiPlan
from sealflow.execution.actions import action
from sealflow.providers.loader import load_models
from sealflow.runtime.config import RuntimeConfig, TenantLimits
from sealflow.runtime.facade import Runtime
from sealflow.runtime.status import status_json
from sealflow.store import open_store

SCHEMA = {"type": "object", "required": ["label"], "additionalProperties": False,
          "properties": {"label": {"type": "string"}}}


@pytest.fixture(scope="module")
def server():
    with FakeModelServer(usage_in=40, usage_out=10) as fake:
        yield fake


@pytest.fixture
def clock():
    """A fake clock starting now: the adapters compare a request's deadline with the real time."""
    return FakeClock(time.time())


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/rl.db"
    return request.getfixturevalue("pg_schema").url(clock="caller", migrate="1", pool_max="4")


@pytest.fixture
def make_rt(url, registry, clock, server):
    made: list[Runtime] = []

    def make(models: dict, config: RuntimeConfig | None = None) -> Runtime:
        entries = {name: {"provider": "openai", "model": name, "base_url": server.base_url, **spec}
                   for name, spec in models.items()}
        rt = Runtime(open_store(url, clock=clock), registry, load_models({"models": entries}),
                     rng=random.Random(5), worker_timeout_ms=20, config=config)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()
        rt.store.close()


def requests_to(server, model: str) -> int:
    return sum(1 for _, _, body in server.requests if body.get("model") == model)


def ai_plan(model="limited", fallback=(), max_tokens=50):
    return make_plan(S("label", "ai", ai=AiPlan(model=model, fallback=tuple(fallback), prompt_template="Label it",
                                                output_schema=SCHEMA, max_tokens=max_tokens)),
                     output="${{ steps.label.output }}")


def test_an_ai_step_over_the_limit_waits_durably_and_completes_later_in_the_same_attempt(make_rt, server, clock,
                                                                                        capsys):
    # Given a model limited to 1 request per minute, already used by a first run
    before = requests_to(server, "limited")
    rt = make_rt({"limited": {"rate_limit": {"requests_per_minute": 1}}})
    assert rt.run(ai_plan(), {}, initiator="u").state == "completed"
    # When a second run calls it within the same minute
    status = rt.run(ai_plan(), {}, initiator="u")
    # Then the model is not called: the run waits for the model's rate limit, with a clear reason
    assert requests_to(server, "limited") == before + 1
    assert status.state == "waiting" and status.waiting["kind"] == "rate_limit"
    assert status.waiting["model"] == "limited" and "rate limit of model 'limited'" in status.waiting["reason"]
    assert status.waiting["due_at"] == pytest.approx(clock.now() + 60, abs=1)
    assert status_json(status)["waiting"]["kind"] == "rate_limit"
    print_outcome(status)  # what `sealflow status` prints
    shown = capsys.readouterr().out
    assert "waiting for the rate limit of model 'limited' (1 requests per minute, shared by every worker)" in shown
    events = [e for e in rt.store.audit(status.run.id) if e.event == "rate_limited"]
    assert len(events) == 1 and events[0].detail["model"] == "limited"
    # When the worker that parked it is gone (a crash loses nothing: the timer is in the store), and another
    # process drives the run once the minute has passed
    rt.close()
    clock.advance(61)
    other = make_rt({"limited": {"rate_limit": {"requests_per_minute": 1}}})
    done = other.drive(status.run.id)
    # Then it completes with one model call, in its one attempt, counted as one step, no retry used
    assert done.state == "completed" and done.output == {"label": done.output["label"]}
    assert requests_to(server, "limited") == before + 2
    assert [(a.attempt, a.try_no, a.state) for a in done.attempts] == [(1, 1, "succeeded")]
    assert done.run.steps_executed == 1 and done.run.tokens == 50


def test_fallback_answers_when_our_limiter_says_the_primary_must_wait(make_rt, server):
    # Given a primary limited to 1 request per minute (used up) and an unlimited fallback
    rt = make_rt({"primary": {"rate_limit": {"requests_per_minute": 1}}, "spare": {}})
    assert rt.run(ai_plan("primary", ("spare",)), {}, initiator="u").state == "completed"
    spare_before = requests_to(server, "spare")
    # When a second run calls within the minute
    status = rt.run(ai_plan("primary", ("spare",)), {}, initiator="u")
    # Then the fallback answered at once, and the audit names it
    assert status.state == "completed" and requests_to(server, "spare") == spare_before + 1
    details = [e.detail for e in rt.store.audit(status.run.id) if e.event == "step.detail"]
    assert details[-1]["model"].startswith("spare") and details[-1]["calls"][-1]["model"] == "spare"


def test_a_token_limit_counts_the_worst_case_and_settles_the_real_usage(make_rt, server, clock):
    # Given a model limited to 2000 tokens per minute; a call reserves max_tokens 500 plus its prompt's bound
    rt = make_rt({"tokens": {"rate_limit": {"tokens_per_minute": 2000}}})
    # When three runs call it in the same minute
    states = [rt.run(ai_plan("tokens", max_tokens=500), {}, initiator="u").state for _ in range(3)]
    # Then all three went through: each call used 50 tokens and gave the rest of its worst case back
    assert states == ["completed"] * 3
    assert rt.store.rate_usage("tokens", clock.now()) == (3, 150)


def test_a_call_that_could_never_fit_the_token_limit_fails_with_a_clear_error(make_rt, server):
    # Given a model limited to 100 tokens per minute and a step that may use 500
    before = requests_to(server, "tiny")
    rt = make_rt({"tiny": {"rate_limit": {"tokens_per_minute": 100}}})
    # When it runs / Then it fails with configuration (it would wait forever), naming the limit; no call made
    status = rt.run(ai_plan("tiny", max_tokens=500), {}, initiator="u")
    assert status.state == "failed" and status.error[0] == "configuration"
    assert "tokens_per_minute of 100" in status.error[1] and requests_to(server, "tiny") == before


def agent_plan(model="agent-model"):
    return make_plan(S("research", "agent", permissions=("kb:read",),
                       agent=AgentPlan(model=model, goal="Find it", tools=("kb.search",), max_steps=4,
                                       max_tokens=50)),
                     output="${{ steps.research.output }}")


@pytest.fixture
def searches(registry):
    done: list[str] = []

    @action("kb.search", permissions=["kb:read"], effect="read", registry=registry)
    def search(ctx, query: str = "") -> dict:
        done.append(query)
        return {"hits": 1}

    return done


def test_an_agents_turns_take_the_limit_and_a_parked_conversation_goes_on_where_it_stopped(make_rt, server, clock,
                                                                                          searches):
    # Given a model limited to 3 requests per minute; an agent conversation is 2 turns (a tool call, an answer)
    before = requests_to(server, "agent-model")
    rt = make_rt({"agent-model": {"rate_limit": {"requests_per_minute": 3}}})
    assert rt.run(agent_plan(), {}, initiator="u").state == "completed"
    # When a second agent runs in the same minute: its first turn fits, its second does not
    status = rt.run(agent_plan(), {}, initiator="u")
    # Then it waits for the rate limit after its tool call; what it used so far is charged already
    assert status.state == "waiting" and status.waiting["kind"] == "rate_limit"
    assert requests_to(server, "agent-model") == before + 3 and len(searches) == 2
    assert status.run.tokens == 50
    # When the minute has passed
    clock.advance(61)
    done = rt.drive(status.run.id)
    # Then the conversation went on: the tool was not called again, the answer turn carried its result,
    # and the run is charged each turn once
    assert done.state == "completed" and len(searches) == 2
    assert requests_to(server, "agent-model") == before + 4
    last = [body for _, _, body in server.requests if body.get("model") == "agent-model"][-1]
    assert any(m.get("role") == "tool" for m in last["messages"])
    assert [(a.attempt, a.state) for a in done.attempts] == [(1, "succeeded")]
    assert done.run.tokens == 100 and done.run.tool_calls == 1


def test_an_agents_turns_are_reserved_against_the_tenant_quota(make_rt, server, searches):
    # Given a tenant whose daily quota is smaller than one agent turn's worst case
    before = requests_to(server, "agent-model")
    config = RuntimeConfig(tenant_limits={"default": TenantLimits(daily_tokens=60)})
    rt = make_rt({"agent-model": {}}, config)
    # When the agent runs / Then its first turn is refused before the model is called
    status = rt.run(agent_plan(), {}, initiator="u")
    assert status.state == "failed" and status.error[0] == "budget_exceeded"
    assert "daily quota" in status.error[1] and "model was not called" in status.error[1]
    assert requests_to(server, "agent-model") == before
