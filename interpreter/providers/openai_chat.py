"""OpenAI-compatible chat completions (``POST {base_url}/chat/completions``).

Serves ``provider: openai``: OpenAI itself and every server speaking the same API (vLLM,
llama.cpp server, Ollama, LM Studio, gateways). The request:

* ``messages``: the system prompt, the prompt as the user turn, then per transcript turn
  an assistant message with one ``tool_calls`` entry and a ``tool`` message with the
  outcome (:mod:`.tooluse`);
* ``max_completion_tokens`` on api.openai.com, ``max_tokens`` elsewhere (what compatible
  servers understand); ``temperature`` when the step sets it;
* ``response_format: {type: json_schema, json_schema: {name, schema, strict}}`` for an
  ``output_schema`` (:mod:`.structured`; ``strict_output: false`` in the model's
  configuration turns strict mode off);
* ``tools`` (``type: function``) and ``parallel_tool_calls: false`` for agent steps.

The answer: ``message.refusal`` or ``finish_reason: content_filter`` -> ``policy_denied``;
``finish_reason: length`` -> ``invalid_output`` (truncated); a tool call -> ``tool_call``;
else the content (JSON when there is an ``output_schema``: ``invalid_output`` if it is not;
the step checks it against the schema). Tokens from ``usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.adapter import HttpAdapter, tokens
from sealflow.providers.base import ModelRequest, ModelResult
from sealflow.providers.config import DEFAULT_BASE_URLS
from sealflow.providers.structured import openai_response_format, parse_output
from sealflow.providers.tooluse import ToolNames, as_map, call_id, names_for, result_text, tool_call


class OpenAIAdapter(HttpAdapter):
    """One configured ``provider: openai`` model."""

    provider = "openai"
    path = "/chat/completions"
    usage_keys = ("prompt_tokens", "completion_tokens")

    def headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key else {}

    def body(self, request: ModelRequest) -> dict[str, Any]:
        names = names_for(request.tools, request.transcript)
        body: dict[str, Any] = {"model": self.config.model, "messages": self.messages(request, names)}
        max_tokens = request.max_tokens or self.config.max_tokens
        if max_tokens is not None:
            official = self.config.endpoint == DEFAULT_BASE_URLS["openai"]
            body["max_completion_tokens" if official else "max_tokens"] = max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.output_schema is not None:
            body["response_format"] = openai_response_format(request.output_schema, strict=self.config.strict_output)
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": names.wire[t.name], "description": t.description,
                                                               "parameters": dict(t.parameters)}}
                             for t in request.tools]
            body["parallel_tool_calls"] = False
        return body

    @staticmethod
    def messages(request: ModelRequest, names: ToolNames) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if request.system:
            out.append({"role": "system", "content": request.system})
        out.append({"role": "user", "content": request.prompt})
        for i, turn in enumerate(t for t in request.transcript if isinstance(t, dict)):
            call = as_map(turn.get("call"))
            ident = call_id(i, call)
            arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": ident, "type": "function",
                 "function": {"name": names.add(str(call.get("name", ""))), "arguments": arguments}}]})
            out.append({"role": "tool", "tool_call_id": ident, "content": result_text(turn)})
        return out

    def read(self, request: ModelRequest, data: Mapping[str, Any]) -> ModelResult:
        who = f"openai model {self.config.name!r}"
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self.malformed("no choices")
        choice = choices[0]
        message = as_map(choice.get("message"))
        finish = choice.get("finish_reason")
        used_in, used_out = tokens(data.get("usage"), "prompt_tokens", "completion_tokens")
        answered = str(data.get("model") or "")
        if message.get("refusal"):
            raise StepError("policy_denied", f"{who} refused: {str(message['refusal'])[:200]}")
        if finish == "content_filter":
            raise StepError("policy_denied", f"{who}: the provider's content filter stopped the answer")
        if finish == "length":
            raise StepError("invalid_output", f"{who}: the answer was cut off at the token limit "
                                              "(finish_reason: length); raise max_tokens or shorten the prompt")
        calls = message.get("tool_calls")
        if request.tools and isinstance(calls, list) and calls:
            first = as_map(calls[0])
            fn = as_map(first.get("function"))
            if not isinstance(fn.get("name"), str):
                raise self.malformed("a tool call without a function name")
            names = names_for(request.tools, request.transcript)
            call = tool_call(names, fn["name"], fn.get("arguments"), first.get("id"), model=self.config.name)
            return self.result(request, output=None, text=json.dumps(call.to_dict(), sort_keys=True),
                               input_tokens=used_in, output_tokens=used_out, model=answered, tool_call=call)
        content = message.get("content")
        if isinstance(content, list):  # some servers send content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise self.malformed("a message without content")
        output = parse_output(content, request.output_schema, model=self.config.name)
        return self.result(request, output=output, text=content, input_tokens=used_in, output_tokens=used_out,
                           model=answered)
