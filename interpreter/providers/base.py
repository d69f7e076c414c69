"""The model provider interface used by ``ai`` (and ``agent``) steps.

A provider turns a :class:`ModelRequest` into a :class:`ModelResult`. The runtime
never talks to a model API directly: it asks a :class:`~.registry.ProviderRegistry`
for the provider serving ``request.model`` and calls :meth:`Provider.complete`.
Real providers are adapters implementing this protocol: OpenAI-compatible chat
completions (:mod:`.openai_chat`) and Anthropic messages (:mod:`.anthropic_messages`),
configured in the runtime configuration's ``models:`` section (:mod:`.loader`); the
deterministic local model (:mod:`.local`) serves ``default``.

Failures are raised as :class:`sealflow.core.errors.StepError` with the error class
the retry policy understands:

==================  ==========================================================
``rate_limited``    the provider throttled us (HTTP 429); pass ``retry_after``
``unavailable``     outage, overload, HTTP 5xx
``timeout``         no answer before ``request.deadline`` (or HTTP 408/504)
``network``         the connection failed
``invalid_request`` the provider refused the request as malformed (HTTP 400/422)
``unauthorized``    the credentials were refused (HTTP 401/403)
``configuration``   unknown model, missing API key or secret
``policy_denied``   a content-policy refusal
``budget_exceeded`` the account's quota or billing (HTTP 402, 429 insufficient_quota)
``invalid_output``  the answer was cut off, or is not the JSON asked for
==================  ==========================================================

:func:`error_for_status` maps a bare HTTP status to a class; the HTTP adapters use
:func:`.failures.error_for_answer`, which also reads the error body (quota, billing).

**Tool use (agent steps).** An ``agent`` step sends the same request with
``tools`` (what the model may propose to call: a name, a description and the JSON
Schema of the arguments) and ``transcript`` (the previous turns of this attempt, oldest
first). A result whose ``tool_call`` is set proposes one call; the system validates it
and, if it passes, runs it, then asks again with the call and its outcome appended to
the transcript. A result without ``tool_call`` is the agent's final answer, its
``output``. Transcript turns are plain JSON maps::

    {"call": {"name": "kb.search", "arguments": {"query": "..."}, "id": "c1"},
     "status": "ok", "result": {...}}                       # the call ran
    {"call": {...}, "status": "error", "error": {"class": "invalid_request", "message": "..."}}
                                                            # the tool ran and failed
    {"call": {...}, "status": "refused", "error": {"class": "not_allowed" | "invalid_arguments"
                                                   | "malformed_call", "message": "..."}}
                                                            # the system refused it; it did not run

Adapters translate ``tools`` and ``transcript`` to their API's function-calling format
and the API's tool-use answer to :class:`ToolCall`. ``ai`` steps send neither and
ignore ``tool_call``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sealflow.core.errors import StepError


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may propose to call: ``parameters`` is the JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ToolCall:
    """One proposed call: a tool name and its arguments (``id`` is the provider's call id, if any)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "arguments": dict(self.arguments)}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class ModelRequest:
    """One model call, fully rendered: the prompt is text, the schema is inlined JSON Schema.

    ``deadline`` is an absolute ``time.time()`` timestamp (seconds since the epoch) after
    which the answer is useless; ``idempotency_key`` lets providers that support it
    deduplicate a retried call. ``tools`` and ``transcript`` are set by agent steps only
    (see the module docstring); empty for ``ai`` steps.
    """

    model: str
    prompt: str
    system: str | None = None
    output_schema: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    idempotency_key: str | None = None
    deadline: float | None = None
    tools: tuple[ToolSpec, ...] = ()
    transcript: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ModelResult:
    """What a model answered.

    ``output`` is the parsed value (a JSON value satisfying ``output_schema`` when the
    request had one, else the text); ``text`` is the raw answer. ``model`` names the model
    that actually answered (it may differ from the one asked for when a provider aliases).
    ``tool_call`` (agent steps): the call the model proposes next (a :class:`ToolCall` or a
    map ``{name, arguments}``); None means ``output`` is the final answer.
    """

    output: Any
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model: str = ""
    tool_call: ToolCall | Mapping[str, Any] | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@runtime_checkable
class Provider(Protocol):
    """A model backend. ``name`` identifies it in logs and audit events."""

    name: str

    def complete(self, request: ModelRequest) -> ModelResult:
        """Answer ``request`` or raise :class:`~sealflow.core.errors.StepError` (see the module
        docstring)."""
        ...


def error_for_status(status: int, message: str = "", *, retry_after: float | None = None) -> StepError:
    """The :class:`StepError` an adapter should raise for an HTTP error ``status``."""
    if status == 429:
        cls = "rate_limited"
    elif status in (408, 504):
        cls = "timeout"
    elif status in (401, 403):
        cls = "unauthorized"
    elif status == 404:
        cls = "configuration"  # model (or endpoint) not found: fix the configuration
    elif 500 <= status <= 599:
        cls = "unavailable"
    else:
        cls = "invalid_request"
    return StepError(cls, message or f"model provider answered HTTP {status}",
                     retry_after=retry_after if cls in ("rate_limited", "unavailable") else None)


def remaining_seconds(request: ModelRequest, *, now: float | None = None) -> float | None:
    """Seconds left before ``request.deadline`` (None when there is no deadline).

    Adapters use it as their HTTP timeout and raise ``timeout`` when it is not positive.
    """
    if request.deadline is None:
        return None
    return request.deadline - (time.time() if now is None else now)
