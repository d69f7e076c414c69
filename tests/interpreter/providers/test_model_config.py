"""The runtime configuration's ``models:`` section: parsing, the registry it builds, checks, and runs."""

from __future__ import annotations

import pytest
import yaml
from interp_helpers import S, make_plan, retry
from model_helpers import KEY

from sealflow.core.errors import StepError
from sealflow.dsl.plan import AgentPlan, AiPlan
from sealflow.execution.actions import action
from sealflow.providers import LocalModel
from sealflow.providers.base import ModelRequest
from sealflow.providers.config import parse_models
from sealflow.providers.loader import check_models, list_models, load_models
from sealflow.runtime.config import ConfigError

EXAMPLE = """
models:
  fast:
    provider: openai
    base_url: http://127.0.0.1:8000/v1
    model: gpt-4o-mini
    api_key: {secret: OPENAI_API_KEY}
    timeout: 30s
    price: {input_per_mtok: 0.15, output_per_mtok: 0.60}
    circuit_breaker: {failures: 5, window: 60s, cool_down: 30s}
  smart:
    provider: anthropic
    model: claude-sonnet-4-20250514
    api_key: {secret: ANTHROPIC_API_KEY}
  tiny:
    provider: local
"""


def test_the_documented_example_parses():
    models = parse_models(yaml.safe_load(EXAMPLE)["models"], source="sealflow.yaml")
    fast = models["fast"]
    assert (fast.provider, fast.model, fast.endpoint, fast.api_key_secret, fast.timeout) == (
        "openai", "gpt-4o-mini", "http://127.0.0.1:8000/v1", "OPENAI_API_KEY", 30.0)
    assert fast.price.input_per_mtok == 0.15 and fast.rate_limit is None
    assert (fast.circuit_breaker.failures, fast.circuit_breaker.window, fast.circuit_breaker.cool_down) == (5, 60, 30)
    assert models["smart"].endpoint == "https://api.anthropic.com/v1" and models["tiny"].provider == "local"


@pytest.mark.parametrize(("entry", "message"), [
    ({"provider": "openai", "model": "m", "api_key": "sk-inline-1234567890"}, "models.fast.api_key: an inline"),
    ({"provider": "cohere", "model": "m"}, "models.fast.provider: expected one of openai, anthropic, local"),
    ({"provider": "openai", "base_url": "http://h/v1"}, "models.fast.model: the provider's model id is required"),
    ({"provider": "openai", "model": "m"}, "models.fast.api_key: the public openai endpoint needs a key"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "timeout": "soon"},
     "models.fast.timeout: 'soon' is not a duration"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "temprature": 1},
     "models.fast: unknown key 'temprature'"),
    ({"provider": "openai", "model": "m", "base_url": "ftp://h"}, "models.fast.base_url: expected an http(s) URL"),
    # a credential in the endpoint would show in `models list`, `doctor --json` and errors: refused, not echoed
    ({"provider": "openai", "model": "m", "base_url": "https://user:S3CRETPW@h/v1"},
     "models.fast.base_url: a user or password in the URL is refused"),
    ({"provider": "openai", "model": "m", "base_url": "https://h/v1?api_key=S3CRETPW"},
     "models.fast.base_url: a query or fragment in the URL is refused"),
    ({"provider": "openai", "model": "m", "base_url": "http://h:notaport/v1"},
     "models.fast.base_url: expected an http(s) URL"),
    ({"provider": "openai", "model": "m", "base_url": "http://[::1/v1"},
     "models.fast.base_url: expected an http(s) URL"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "price": {"input_per_mtok": 1}},
     "models.fast.price: missing output_per_mtok"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {"requests_per_minute": -1}},
     "models.fast.rate_limit.requests_per_minute: must be positive"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {"requests_per_minute": 0}},
     "models.fast.rate_limit.requests_per_minute: must be positive, not 0"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {"tokens_per_minute": "lots"}},
     "models.fast.rate_limit.tokens_per_minute: expected an integer, not 'lots'"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {"tokens_per_minute": 1.5}},
     "models.fast.rate_limit.tokens_per_minute: expected an integer"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {}},
     "models.fast.rate_limit: give requests_per_minute, tokens_per_minute or both"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": 500},
     "models.fast.rate_limit"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "rate_limit": {"requests_per_hour": 5}},
     "models.fast.rate_limit: unknown key 'requests_per_hour'"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "circuit_breaker": {"window": "x"}},
     "models.fast.circuit_breaker.window"),
    ({"provider": "openai", "model": "m", "base_url": "http://h/v1", "api_key": {"secret": "../etc"}},
     "models.fast.api_key.secret: expected a secret name"),
])
def test_invalid_entries_are_refused_with_the_file_and_key(entry, message):
    with pytest.raises(ConfigError) as caught:
        parse_models({"fast": entry}, source="sealflow.yaml")
    assert str(caught.value).startswith("sealflow.yaml: ") and message in str(caught.value)
    assert "sk-inline" not in str(caught.value) and "S3CRETPW" not in str(caught.value)


def test_a_rate_limit_parses_with_either_or_both_limits():
    # Given rate limits with requests only, tokens only, and both / When parsed / Then each keeps what it says
    base = {"provider": "openai", "model": "m", "base_url": "http://h/v1"}
    got = parse_models({"a": {**base, "rate_limit": {"requests_per_minute": 500}},
                        "b": {**base, "rate_limit": {"tokens_per_minute": 200000}},
                        "c": {**base, "rate_limit": {"requests_per_minute": 3, "tokens_per_minute": 90}}})
    assert (got["a"].rate_limit.requests_per_minute, got["a"].rate_limit.tokens_per_minute) == (500, None)
    assert (got["b"].rate_limit.requests_per_minute, got["b"].rate_limit.tokens_per_minute) == (None, 200000)
    assert (got["c"].rate_limit.requests_per_minute, got["c"].rate_limit.tokens_per_minute) == (3, 90)


def test_models_must_be_a_map():
    with pytest.raises(ConfigError, match="models must be a map"):
        parse_models(["fast"])


def test_load_models_serves_the_local_default_and_every_configured_name(server):
    config = {"models": {"fast": {"provider": "openai", "model": "gpt-4o-mini", "base_url": server.base_url,
                                  "api_key": {"secret": "FAKE_KEY"}}}}
    registry = load_models(config, {"FAKE_KEY": KEY})
    assert isinstance(registry.get("default"), LocalModel) and registry.get("fast").name == "openai:fast"
    assert registry.get("fast").complete(ModelRequest(model="fast", prompt="hi")).text
    local = load_models({"models": {"default": {"provider": "openai", "model": "x", "base_url": server.base_url}}})
    assert local.get("default").name == "openai:default"


def test_a_missing_secret_makes_calls_fail_with_configuration_and_check_reports_it(monkeypatch, tmp_path):
    monkeypatch.delenv("SEALFLOW_SECRET_NOPE", raising=False)
    config = {"models": {"fast": {"provider": "openai", "model": "gpt-4o", "api_key": {"secret": "NOPE"}}}}
    registry = load_models(config, {})
    with pytest.raises(StepError) as caught:
        registry.get("fast").complete(ModelRequest(model="fast", prompt="p"))
    assert caught.value.error_class == "configuration" and "'NOPE'" in caught.value.message
    (check,) = check_models(config, {})
    assert not check.ok and "NOPE" in check.problems[0]


def test_check_models_probes_the_endpoint_and_notes_unknown_prices(server):
    config = {"models": {
        "good": {"provider": "openai", "model": "my-llama", "base_url": server.base_url,
                 "api_key": {"secret": "K"}},
        "gone": {"provider": "anthropic", "model": "no-model", "base_url": server.base_url,
                 "api_key": {"secret": "K"}},
        "bad-key": {"provider": "openai", "model": "gpt-4o", "base_url": server.base_url,
                    "api_key": {"secret": "WRONG"}}}}
    checks = {c.name: c for c in check_models(config, {"K": KEY, "WRONG": "sk-wrong-000000000"}, probe=True)}
    assert checks["good"].ok and "no price" in checks["good"].notes[0]
    assert checks["gone"].problems[0].startswith("configuration:")
    assert checks["bad-key"].problems[0].startswith("unauthorized:")
    rows = list_models(config)
    assert rows[0]["name"] == "default" and {r["name"] for r in rows} == {"default", "good", "gone", "bad-key"}
    assert all(KEY not in str(r) for r in rows)


# -- through the runtime -----------------------------------------------------------------------------

SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["high", "low"]}}}


@pytest.fixture
def clock():
    """The real clock: a step's deadline is a wall-clock time that the adapters compare with time.time()."""
    from sealflow.core.clock import SYSTEM

    return SYSTEM


@pytest.fixture
def providers(server):
    entry = {"provider": "openai", "base_url": server.base_url, "api_key": {"secret": "K"}}
    return load_models({"models": {"fast": {**entry, "model": "gpt-4o-mini"},
                                   "flaky": {**entry, "model": "status-503"},
                                   "claude": {**entry, "provider": "anthropic", "model": "claude-3-5-haiku"}}},
                       {"K": KEY})


@pytest.mark.parametrize("model", ["fast", "claude"])
def test_an_ai_step_runs_against_a_configured_model_and_is_charged(runtime, model):
    step = S("classify", "ai", ai=AiPlan(model=model, prompt_template="Classify ${{ input.lead }}",
                                         output_schema=SCHEMA))
    status = runtime.run(make_plan(step, output="${{ steps.classify.output }}"), {"lead": "acme"}, initiator="u")
    assert status.state == "completed" and status.output["label"] in ("high", "low")
    assert status.run.tokens == 1500 and status.run.cost_usd > 0


def test_output_failing_the_schema_is_invalid_output_and_its_tokens_are_charged(runtime, providers, server):
    # Given a model answering JSON that fails the step's output_schema
    providers.register(load_models({"models": {"wrong": {"provider": "openai", "model": "wrong-json",
                                                         "base_url": server.base_url, "api_key": {"secret": "K"}}}},
                                   {"K": KEY}).get("wrong"), "wrong")
    step = S("classify", "ai", ai=AiPlan(model="wrong", prompt_template="Classify", output_schema=SCHEMA))
    before = len(server.requests)
    status = runtime.run(make_plan(step), {}, initiator="u")
    # Then the step fails with invalid_output after one repair, and the run still pays for both answers
    assert (status.state, status.run.error_class) == ("failed", "invalid_output")
    assert status.run.tokens == 3000 and len(server.requests) == before + 2
    # and the repair's request carries the validation errors back to the model
    repair_prompt = server.requests[-1][2]["messages"][-1]["content"]
    assert "Classify" in repair_prompt and "'label' is a required property" in repair_prompt


def test_prose_where_json_is_asked_for_is_repaired_once_as_a_schema_failure(runtime, providers, server):
    providers.register(load_models({"models": {"chatty": {"provider": "openai", "model": "prose",
                                                          "base_url": server.base_url, "api_key": {"secret": "K"}}}},
                                   {"K": KEY}).get("chatty"), "chatty")
    step = S("classify", "ai", ai=AiPlan(model="chatty", prompt_template="Classify", output_schema=SCHEMA))
    before = len(server.requests)
    status = runtime.run(make_plan(step), {}, initiator="u")
    assert status.run.error_class == "invalid_output" and len(server.requests) == before + 2
    assert "not JSON" in server.requests[-1][2]["messages"][-1]["content"]
    (detail,) = [e.detail for e in runtime.store.audit(status.run.id) if (e.detail or {}).get("repair")]
    assert detail["repair"]["layer"] == "schema" and detail["repair"]["passed"] is False


def test_an_unavailable_model_falls_back(runtime, server):
    step = S("classify", "ai", ai=AiPlan(model="flaky", fallback=("fast",), prompt_template="Classify",
                                         output_schema=SCHEMA))
    status = runtime.run(make_plan(step, output="${{ steps.classify.output }}"), {}, initiator="u")
    assert status.state == "completed" and server.last["model"] == "gpt-4o-mini"
    # and the audit names the model that answered (the fallback), not the primary
    details = [e.detail for e in runtime.store.audit(status.run.id) if e.step_id == "classify" and e.detail]
    assert any(d.get("model") == "gpt-4o-mini-2026" for d in details)
    assert not any("flaky" in str(d.get("model")) for d in details)


def test_an_agent_step_round_trips_a_tool_call(runtime, registry):
    searched = []

    @action("kb.search", permissions=["kb:read"], effect="read", registry=registry)
    def search(ctx, query: str) -> dict:
        """Search the knowledge base."""
        searched.append(query)
        return {"count": 1, "results": [{"article_id": "kb_1"}]}

    step = S("research", "agent", agent=AgentPlan(model="claude", goal="Help with ${{ input.ticket }}",
                                                  tools=("kb.search",), max_steps=4, output_schema=SCHEMA),
             permissions=("kb:read",), retry=retry("invalid_output"))
    status = runtime.run(make_plan(step, output="${{ steps.research.output }}"), {"ticket": "tkt_1"},
                         initiator="user:ana")
    assert status.state == "completed", status
    assert len(searched) == 1 and status.output["label"] in ("high", "low")
