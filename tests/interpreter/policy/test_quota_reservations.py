"""Reserving a model call's worst case against the step budget and the tenant's daily quota."""

from __future__ import annotations

import random
import threading

import pytest
from interp_helpers import FakeProvider, S, make_plan

from sealflow.core.errors import StepError
from sealflow.dsl.plan import AiPlan
from sealflow.runtime.config import RuntimeConfig, TenantLimits
from sealflow.runtime.facade import Runtime
from sealflow.steps.ai import DEFAULT_MAX_TOKENS
from sealflow.store import open_store


@pytest.fixture
def quota_rt(tmp_path, registry, providers, clock):
    config = RuntimeConfig(tenant_limits={"acme": TenantLimits(daily_tokens=1000)})
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/q.db", clock=clock), registry, providers,
                 rng=random.Random(3), worker_timeout_ms=20, config=config)
    yield rt
    rt.close()
    rt.store.close()


def ai_plan(max_tokens=None, **kw):
    return make_plan(S("think", "ai", ai=AiPlan(model="m1", prompt_template="x", max_tokens=max_tokens), **kw))


def test_concurrent_reservations_never_pass_the_quota(tmp_path):
    # Given a store and a tenant quota of 1000 tokens
    store = open_store(f"sqlite:///{tmp_path}/r.db")
    won = []

    def reserve(i):
        if store.reserve_usage(f"run{i}:s:1", f"run{i}", "acme", 1, 150, 0.0, 10.0, 100.0, max_tokens=1000,
                               max_cost_usd=None) is None:
            won.append(i)

    # When twenty calls of 150 tokens reserve at once
    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then only six fit (900 <= 1000), and they hold the tokens until settled or expired
    assert len(won) == 6 and store.reserved_usage("acme", 1, 10.0) == (900, 0.0)
    assert store.reserved_usage("acme", 1, 100.0) == (0, 0.0)  # expired
    store.release_usage(f"run{won[0]}:s:1")
    assert store.reserved_usage("acme", 1, 10.0) == (750, 0.0)
    store.close()


def test_a_call_without_max_tokens_is_capped_and_reserves_the_cap(quota_rt, providers):
    # Given a tenant quota of 1000 tokens and a step without max_tokens
    providers["m1"] = model = FakeProvider({"ok": True})
    # When it runs, then the model is not called: the default cap does not fit in the quota
    status = quota_rt.run(ai_plan(), {}, initiator="u", tenant="acme")
    assert status.error[0] == "budget_exceeded" and "reserved" in status.error[1] and model.requests == []
    # and a tenant without a quota gets the call, capped at the default
    assert quota_rt.run(ai_plan(), {}, initiator="u", tenant="globex").state == "completed"
    assert model.requests[0].max_tokens == DEFAULT_MAX_TOKENS


def test_a_reservation_is_settled_by_the_commit(quota_rt, providers):
    providers["m1"] = FakeProvider({"ok": True}, tokens=40)
    status = quota_rt.run(ai_plan(max_tokens=300), {}, initiator="u", tenant="acme")
    assert status.state == "completed" and status.run.tokens == 40
    day = int(quota_rt.clock.now() // 86400)
    assert quota_rt.store.reserved_usage("acme", day, quota_rt.clock.now()) == (0, 0.0)
    assert quota_rt.store.tenant_usage("acme", day) == (40, 0.001)


def test_the_steps_own_cost_budget_refuses_a_call_whose_worst_case_is_over_it(quota_rt, providers):
    class Priced(FakeProvider):
        class price:  # noqa: N801 - mimics the adapters' Price
            @staticmethod
            def cost(tokens_in, tokens_out):
                return (tokens_in + tokens_out) * 0.001

    providers["m1"] = model = Priced({"ok": True})
    status = quota_rt.run(ai_plan(max_tokens=500, budget={"max_cost_usd": 0.1}), {}, initiator="u", tenant="globex")
    assert status.error[0] == "budget_exceeded" and "max_cost_usd" in status.error[1] and model.requests == []


def test_a_failed_but_paid_answer_is_charged(quota_rt, providers):
    paid = StepError("policy_denied", "refused after generating")
    paid.tokens, paid.cost_usd = 77, 0.5
    providers["m1"] = FakeProvider(paid)
    status = quota_rt.run(ai_plan(max_tokens=100), {}, initiator="u", tenant="globex")
    assert status.error[0] == "policy_denied"
    assert (status.run.tokens, status.run.cost_usd) == (77, pytest.approx(0.5))
