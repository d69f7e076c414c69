"""A fake model server on loopback: OpenAI chat completions and Anthropic messages, with fault modes.

One real HTTP server (``http.server`` in a thread, HTTP/1.1 keep-alive) answers
``POST /v1/chat/completions`` (OpenAI-compatible) and ``POST /v1/messages`` (Anthropic).
The *provider model id* in the request picks the behaviour, so one server serves every
test at once:

===================  =====================================================================
model id             answer
===================  =====================================================================
anything else        a normal answer: a tool call to the first tool when tools are offered
                     and no tool result is in the conversation yet, else a JSON instance of
                     the requested schema (built by the local model's synthesizer), else text
``rate-limited``     429 ``rate_limit_exceeded`` with ``retry-after-ms: 1500`` (Anthropic:
                     ``rate_limit_error`` with ``retry-after: 2``)
``quota``            429 ``insufficient_quota`` (Anthropic: 400 "credit balance is too low")
``status-NNN``       HTTP NNN with an error body (``status-529`` is Anthropic's overload)
``no-model``         404 ``model_not_found``
``context-length``   400 ``context_length_exceeded``
``echo-key``         401 whose message repeats the key it was sent (as some gateways do)
``refusal``          OpenAI ``message.refusal`` / Anthropic ``stop_reason: refusal``
``content-filter``   OpenAI ``finish_reason: content_filter``
``truncated``        ``finish_reason: length`` / ``stop_reason: max_tokens``
``html``             200 with an HTML body
``prose``            200 whose content is prose where JSON was asked for
``wrong-json``       200 whose JSON fails the schema
``slow``             answers after ``slow_seconds`` (default 2)
``drop``             closes the connection without answering
===================  =====================================================================

A request without the server's ``api_key`` (when one is set) gets 401. Each request is
kept in :attr:`FakeModelServer.requests` as ``(path, headers, body)``; in strict
``json_schema`` mode the server refuses (400) a schema strict mode would refuse. Usage is
``usage_in``/``usage_out`` tokens per answer.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sealflow.providers.synth import synthesize


def strict_problem(schema: Any, where: str = "schema") -> str | None:
    """Why OpenAI strict mode would refuse ``schema`` (None when it accepts it)."""
    if not isinstance(schema, dict):
        return f"{where} is not an object"
    kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    if "object" in kinds:
        props = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return f"{where}: additionalProperties must be false"
        if sorted(schema.get("required") or []) != sorted(props):
            return f"{where}: every property must be required"
        for name, sub in props.items():
            problem = strict_problem(sub, f"{where}.{name}")
            if problem:
                return problem
    if "array" in kinds and "items" in schema:
        return strict_problem(schema["items"], f"{where}[]")
    for key in ("minLength", "maxLength", "allOf", "not", "patternProperties"):
        if key in schema:
            return f"{where}: {key} is not supported"
    return None


class FakeModelServer:
    """Start with ``FakeModelServer()`` (or as a context manager); ``base_url`` ends in ``/v1``."""

    def __init__(self, api_key: str | None = None, *, slow_seconds: float = 2.0, usage_in: int = 1200,
                 usage_out: int = 300):
        self.api_key = api_key
        self.slow_seconds = slow_seconds
        self.usage_in, self.usage_out = usage_in, usage_out
        self.requests: list[tuple[str, dict[str, str], dict]] = []
        server = self
        handler = type("Handler", (_Handler,), {"fake": server})
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeModelServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def last(self) -> dict:
        return self.requests[-1][2]

    @property
    def last_headers(self) -> dict[str, str]:
        return self.requests[-1][1]


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    fake: FakeModelServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json" if not isinstance(body, bytes) else "text/html")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.requests.append((self.path, headers, body))
        anthropic = self.path.endswith("/messages")
        if not (self.path.endswith("/chat/completions") or anthropic):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        sent_key = headers.get("x-api-key") if anthropic else (headers.get("authorization") or "")[7:]
        mode = str(body.get("model", ""))
        if mode == "echo-key":
            self._error(anthropic, 401, "authentication_error", f"Incorrect API key provided: {sent_key}")
            return
        if self.fake.api_key is not None and sent_key != self.fake.api_key:
            self._error(anthropic, 401, "authentication_error", "invalid x-api-key" if anthropic else
                        "Incorrect API key provided", code="invalid_api_key")
            return
        if anthropic and headers.get("anthropic-version") != "2023-06-01":
            self._error(anthropic, 400, "invalid_request_error", "anthropic-version header is required")
            return
        if mode == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if mode == "slow":
            time.sleep(self.fake.slow_seconds)
        if self._fault(mode, anthropic):
            return
        if anthropic:
            self._send(200, self._anthropic(body, mode))
        else:
            fmt = body.get("response_format") or {}
            js = fmt.get("json_schema") or {}
            if js.get("strict") and strict_problem(js.get("schema")):
                self._error(False, 400, "invalid_request_error",
                            f"Invalid schema for response_format '{js.get('name')}': "
                            f"{strict_problem(js.get('schema'))}", code="invalid_json_schema")
                return
            self._send(200, self._openai(body, mode))

    def _error(self, anthropic: bool, status: int, kind: str, message: str, *, code: str | None = None,
               headers: dict[str, str] | None = None) -> None:
        if anthropic:
            body: dict = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self._send(status, body, headers)

    def _fault(self, mode: str, anthropic: bool) -> bool:
        if mode == "rate-limited":
            if anthropic:
                self._error(True, 429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                            headers={"retry-after": "2"})
            else:
                self._error(False, 429, "requests", "Rate limit reached for requests", code="rate_limit_exceeded",
                            headers={"retry-after-ms": "1500", "retry-after": "2"})
        elif mode == "quota":
            if anthropic:
                self._error(True, 400, "invalid_request_error", "Your credit balance is too low to access the "
                            "Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")
            else:
                self._error(False, 429, "insufficient_quota", "You exceeded your current quota",
                            code="insufficient_quota")
        elif re.fullmatch(r"status-\d{3}", mode):
            status = int(mode[7:])
            kind = "overloaded_error" if status == 529 else "api_error"
            self._error(anthropic, status, kind, f"fake status {status}")
        elif mode == "no-model":
            self._error(anthropic, 404, "not_found_error", "The model `no-model` does not exist",
                        code="model_not_found")
        elif mode == "context-length":
            self._error(anthropic, 400, "invalid_request_error", "This model's maximum context length is 8192 "
                        "tokens", code="context_length_exceeded")
        elif mode == "html":
            self._send(200, b"<html><body>502 Bad Gateway</body></html>")
        else:
            return False
        return True

    # -- normal answers -----------------------------------------------------------------------------

    def _openai(self, body: dict, mode: str) -> dict:
        messages = body.get("messages") or []
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        tools = body.get("tools") or []
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        if mode == "refusal":
            message["refusal"] = "I can't help with that."
        elif tools and not any(m.get("role") == "tool" for m in messages):
            fn = tools[0]["function"]
            message["tool_calls"] = [{"id": "call_fake_1", "type": "function", "function": {
                "name": fn["name"], "arguments": json.dumps(synthesize(fn.get("parameters") or {}, "fake query"))}}]
            finish = "tool_calls"
        else:
            message["content"] = self._content(schema, mode)
        if mode == "content-filter":
            finish = "content_filter"
        elif mode == "truncated":
            finish = "length"
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": mode + "-2026",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": self.fake.usage_in, "completion_tokens": self.fake.usage_out,
                          "total_tokens": self.fake.usage_in + self.fake.usage_out}}

    def _anthropic(self, body: dict, mode: str) -> dict:
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        answered = any(isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
                       for m in body.get("messages") or [])
        content: list[dict] = []
        stop = "end_turn"
        real = [t for t in tools if t["name"] != "sealflow_final_output"]
        output = [t for t in tools if t["name"] == "sealflow_final_output"]
        if mode == "refusal":
            stop = "refusal"
        elif real and not answered:
            content.append({"type": "tool_use", "id": "toolu_fake_1", "name": real[0]["name"],
                            "input": synthesize(real[0].get("input_schema") or {}, "fake query")})
            stop = "tool_use"
        elif output and (choice.get("type") in ("tool", "any")) and mode not in ("prose",):
            value = {} if mode == "wrong-json" else synthesize(output[0]["input_schema"], "fake answer")
            content.append({"type": "tool_use", "id": "toolu_fake_2", "name": "sealflow_final_output",
                            "input": value})
            stop = "tool_use"
        else:
            content.append({"type": "text", "text": self._content(None, mode)})
        if mode == "truncated":
            stop = "max_tokens"
        return {"id": "msg_fake", "type": "message", "role": "assistant", "model": mode + "-2026",
                "content": content, "stop_reason": stop,
                "usage": {"input_tokens": self.fake.usage_in, "output_tokens": self.fake.usage_out}}

    @staticmethod
    def _content(schema: Any, mode: str) -> str:
        if mode == "prose":
            return "Sure! Here is what you asked for."
        if schema is None:
            return "Hello from the fake model."
        if mode == "wrong-json":
            return "{}"
        return json.dumps(synthesize(schema, "fake answer"))
