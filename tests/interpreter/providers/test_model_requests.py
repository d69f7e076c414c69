"""What the adapters send and read: structured output, tool use round trips, tokens and cost."""

from __future__ import annotations

import logging

import pytest
from model_helpers import KEY

from sealflow.providers.base import ModelRequest, ToolSpec
from sealflow.providers.structured import NotStrict, drop_optional_nulls, strict_schema

SCHEMA = {"type": "object", "required": ["label"],
          "properties": {"label": {"enum": ["high", "low"]}, "reason": {"type": "string", "maxLength": 80}}}
SEARCH = ToolSpec("kb.search", "Search the knowledge base",
                  {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                   "additionalProperties": False})


def test_openai_asks_for_strict_json_schema_and_checks_the_answer(adapter, server):
    # Given an ai step with an output_schema whose optional property strict mode would refuse as is
    model = adapter("openai", "gpt-4o-mini")
    # When it is called
    result = model.complete(ModelRequest(model="m", prompt="classify acme", system="be brief",
                                         output_schema=SCHEMA, max_tokens=50, temperature=0.2))
    # Then the request asks for strict, schema-constrained JSON (the fake server refuses non-strict schemas)
    body = server.last
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    strict = fmt["json_schema"]["schema"]
    assert strict["required"] == ["label", "reason"] and strict["additionalProperties"] is False
    assert strict["properties"]["reason"] == {"type": ["string", "null"]}
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "classify acme"}]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("gpt-4o-mini", 50, 0.2)
    assert server.last_headers["authorization"] == f"Bearer {KEY}"
    # And the answer is parsed, stripped of strict mode's nulls and valid against the original schema
    assert result.output["label"] in ("high", "low") and result.output.get("reason", "") is not None
    assert result.model == "gpt-4o-mini-2026"


def test_a_schema_strict_mode_cannot_express_is_sent_non_strict_with_a_warning(adapter, server, caplog):
    schema = {"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}}
    with caplog.at_level(logging.WARNING, logger="sealflow.providers"):
        adapter("openai").complete(ModelRequest(model="m", prompt="p", output_schema=schema))
    assert server.last["response_format"]["json_schema"]["strict"] is False
    assert "without strict mode" in caplog.text and "additionalProperties" in caplog.text


def test_a_non_object_schema_is_wrapped_and_unwrapped(adapter, server):
    schema = {"type": "array", "items": {"type": "string"}, "minItems": 1}
    result = adapter("openai").complete(ModelRequest(model="m", prompt="p", output_schema=schema))
    sent = server.last["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["value"]["type"] == "array" and isinstance(result.output, list)
    result = adapter("anthropic").complete(ModelRequest(model="m", prompt="p", output_schema=schema))
    assert server.last["tools"][0]["input_schema"]["required"] == ["value"] and isinstance(result.output, list)


def test_strict_conversion_rules():
    with pytest.raises(NotStrict):
        strict_schema({"type": "object", "properties": {"x": {}}, "required": ["x"]})
    with pytest.raises(NotStrict):
        strict_schema({"type": "object", "allOf": []})
    assert drop_optional_nulls(SCHEMA, {"label": "high", "reason": None}) == {"label": "high"}


def test_the_official_openai_endpoint_gets_max_completion_tokens(adapter):
    from sealflow.providers.config import parse_model
    from sealflow.providers.openai_chat import OpenAIAdapter

    config = parse_model("m", {"provider": "openai", "model": "gpt-4o", "api_key": {"secret": "K"}}, "models.m")
    body = OpenAIAdapter(config, KEY).body(ModelRequest(model="m", prompt="p", max_tokens=10))
    assert body["max_completion_tokens"] == 10 and "max_tokens" not in body


def test_anthropic_forces_the_output_tool_for_structured_output(adapter, server):
    result = adapter("anthropic", "claude-3-5-haiku-20241022").complete(
        ModelRequest(model="m", prompt="classify acme", system="be brief", output_schema=SCHEMA))
    body = server.last
    assert body["tool_choice"] == {"type": "tool", "name": "sealflow_final_output"}
    assert body["tools"][0]["input_schema"] == SCHEMA
    assert (body["system"], body["max_tokens"]) == ("be brief", 4096)
    assert server.last_headers["x-api-key"] == KEY and server.last_headers["anthropic-version"] == "2023-06-01"
    assert result.output["label"] in ("high", "low")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_plain_text_without_a_schema(adapter, provider):
    result = adapter(provider).complete(ModelRequest(model="m", prompt="summarise"))
    assert result.output == result.text == "Hello from the fake model."


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_tool_use_round_trip(adapter, server, provider):
    # Given an agent step offering the tool kb.search (a name the APIs do not accept as is)
    model = adapter(provider)
    first = model.complete(ModelRequest(model="m", prompt="where is my order?", tools=(SEARCH,),
                                        output_schema=SCHEMA))
    # Then the model's proposal comes back under the Sealflow name, with parsed arguments
    call = first.tool_call
    assert call is not None and call.name == "kb.search" and isinstance(call.arguments["query"], str) and call.id
    sent_tools = server.last["tools"]
    wire_name = sent_tools[0]["function"]["name"] if provider == "openai" else sent_tools[0]["name"]
    assert wire_name == "kb_search"
    # When the call ran and its result is in the transcript
    turn = {"call": call.to_dict(), "status": "ok", "result": {"count": 1, "items": [{"id": "kb_1"}]}}
    final = model.complete(ModelRequest(model="m", prompt="where is my order?", tools=(SEARCH,),
                                        output_schema=SCHEMA, transcript=(turn,)))
    # Then the API saw the call and its outcome, and the answer is final
    messages = server.last["messages"]
    if provider == "openai":
        assert messages[-2]["tool_calls"][0]["id"] == call.id and messages[-1]["role"] == "tool"
        assert messages[-1]["tool_call_id"] == call.id and '"kb_1"' in messages[-1]["content"]
        assert server.last["parallel_tool_calls"] is False
    else:
        assert messages[-2]["content"][0] == {"type": "tool_use", "id": call.id, "name": "kb_search",
                                              "input": dict(call.arguments)}
        assert messages[-1]["content"][0]["tool_use_id"] == call.id
        assert messages[-1]["content"][0]["is_error"] is False
        assert server.last["tool_choice"] == {"type": "any"}
    assert final.tool_call is None and final.output["label"] in ("high", "low")


def test_a_refused_call_is_sent_back_as_an_error_result(adapter, server):
    turn = {"call": {"name": "kb.search", "arguments": {"query": "x"}}, "status": "refused",
            "error": {"class": "not_allowed", "message": "no"}}
    adapter("anthropic").complete(ModelRequest(model="m", prompt="p", tools=(SEARCH,), transcript=(turn,)))
    result_block = server.last["messages"][-1]["content"][0]
    assert result_block["is_error"] is True and result_block["tool_use_id"] == "call_1"
    assert "not_allowed" in result_block["content"]


@pytest.mark.parametrize(("provider", "model_id", "cost"), [
    ("openai", "gpt-4o-mini", (1200 * 0.15 + 300 * 0.60) / 1e6),
    ("anthropic", "claude-3-5-haiku-20241022", (1200 * 0.80 + 300 * 4.00) / 1e6),
    ("openai", "my-local-llama", 0.0),
])
def test_tokens_and_cost_come_from_usage_and_the_price_table(adapter, provider, model_id, cost):
    result = adapter(provider, model_id).complete(ModelRequest(model="m", prompt="p", output_schema=SCHEMA))
    assert (result.input_tokens, result.output_tokens) == (1200, 300)
    assert result.cost_usd == pytest.approx(cost)


def test_a_configured_price_overrides_the_table(adapter):
    model = adapter("openai", "gpt-4o-mini", price={"input_per_mtok": 1, "output_per_mtok": 2})
    result = model.complete(ModelRequest(model="m", prompt="p"))
    assert result.cost_usd == pytest.approx((1200 * 1 + 300 * 2) / 1e6)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_refused_answer_still_carries_its_usage(adapter, provider):
    from sealflow.core.errors import StepError

    with pytest.raises(StepError) as caught:
        adapter(provider, "truncated").complete(ModelRequest(model="m", prompt="p", output_schema=SCHEMA))
    assert caught.value.error_class == "invalid_output" and caught.value.tokens == 1500
