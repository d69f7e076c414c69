"""Anthropic messages (``POST {base_url}/messages``, ``anthropic-version: 2023-06-01``).

Serves ``provider: anthropic``. The request: ``system``, the prompt as the user turn, per
transcript turn an assistant ``tool_use`` block and a user ``tool_result`` block
(``is_error`` for a failed or refused call); ``max_tokens`` (required by the API: the
step's, else the model's, else 4096); ``temperature`` when set.

Structured output is a forced tool: ``output_schema`` (wrapped when not an object,
:mod:`.structured`) becomes the ``input_schema`` of the tool ``sealflow_final_output``,
and ``tool_choice`` is ``{type: tool, name: sealflow_final_output}`` for an ``ai`` step, or
``{type: any}`` next to the real tools for an ``agent`` step (the model either calls a tool
or gives its final answer through that one).

The answer: ``stop_reason: refusal`` -> ``policy_denied``; ``max_tokens`` ->
``invalid_output`` (truncated); a ``tool_use`` block -> the final output (the output tool)
or ``tool_call``; else the text blocks (JSON when there is an ``output_schema``). The step
checks the output against the schema. Tokens from ``usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.adapter import HttpAdapter, tokens
from sealflow.providers.base import ModelRequest, ModelResult
from sealflow.providers.structured import finish_output, parse_output, wrap
from sealflow.providers.tooluse import (
    OUTPUT_TOOL,
    ToolNames,
    as_map,
    call_id,
    is_error,
    names_for,
    result_text,
    tool_call,
)

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


class AnthropicAdapter(HttpAdapter):
    """One configured ``provider: anthropic`` model."""

    provider = "anthropic"
    path = "/messages"

    def headers(self, key: str | None) -> dict[str, str]:
        out = {"anthropic-version": API_VERSION}
        if key:
            out["x-api-key"] = key
        return out

    def body(self, request: ModelRequest) -> dict[str, Any]:
        names = names_for(request.tools, request.transcript)
        body: dict[str, Any] = {"model": self.config.model,
                                "max_tokens": request.max_tokens or self.config.max_tokens or DEFAULT_MAX_TOKENS,
                                "messages": self.messages(request, names)}
        if request.system:
            body["system"] = request.system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        tools = [{"name": names.wire[t.name], "description": t.description, "input_schema": dict(t.parameters)}
                 for t in request.tools]
        if request.output_schema is not None:
            tools.append({"name": OUTPUT_TOOL, "description": "Give your final answer through this tool; its "
                          "input is the answer.", "input_schema": wrap(request.output_schema)})
            body["tool_choice"] = {"type": "any"} if request.tools else {"type": "tool", "name": OUTPUT_TOOL}
        if tools:
            body["tools"] = tools
        return body

    @staticmethod
    def messages(request: ModelRequest, names: ToolNames) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": request.prompt}]
        for i, turn in enumerate(t for t in request.transcript if isinstance(t, dict)):
            call = as_map(turn.get("call"))
            ident = call_id(i, call)
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": ident, "name": names.add(str(call.get("name", ""))),
                 "input": dict(call.get("arguments") or {})}]})
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": ident, "content": result_text(turn),
                 "is_error": is_error(turn)}]})
        return out

    def read(self, request: ModelRequest, data: Mapping[str, Any]) -> ModelResult:
        who = f"anthropic model {self.config.name!r}"
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise self.malformed("no content")
        stop = data.get("stop_reason")
        used_in, used_out = tokens(data.get("usage"), "input_tokens", "output_tokens")
        answered = str(data.get("model") or "")
        if stop == "refusal":
            raise StepError("policy_denied", f"{who} refused to answer (stop_reason: refusal)")
        if stop == "max_tokens":
            raise StepError("invalid_output", f"{who}: the answer was cut off at the token limit "
                                              "(stop_reason: max_tokens); raise max_tokens or shorten the prompt")
        uses = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        for use in uses:
            if use.get("name") == OUTPUT_TOOL and request.output_schema is not None:
                output = finish_output(request.output_schema, use.get("input"), model=self.config.name)
                return self.result(request, output=output, text=json.dumps(output, sort_keys=True),
                                   input_tokens=used_in, output_tokens=used_out, model=answered)
        if uses and request.tools:
            names = names_for(request.tools, request.transcript)
            first = uses[0]
            if not isinstance(first.get("name"), str):
                raise self.malformed("a tool_use block without a name")
            call = tool_call(names, first["name"], first.get("input"), first.get("id"), model=self.config.name)
            return self.result(request, output=None, text=json.dumps(call.to_dict(), sort_keys=True),
                               input_tokens=used_in, output_tokens=used_out, model=answered, tool_call=call)
        text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        output = parse_output(text, request.output_schema, model=self.config.name)
        return self.result(request, output=output, text=text, input_tokens=used_in, output_tokens=used_out,
                           model=answered)
