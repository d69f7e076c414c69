"""Every row of the error table, for both adapters, against the fake server; the key never leaks."""

from __future__ import annotations

import time

import pytest
from model_helpers import KEY

from sealflow.core.errors import StepError
from sealflow.providers.base import ModelRequest
from sealflow.providers.failures import retry_after

SCHEMA = {"type": "object", "properties": {"label": {"enum": ["high", "low"]}}, "required": ["label"]}
BOTH = ["openai", "anthropic"]


def fail(adapter, request: ModelRequest | None = None) -> StepError:
    with pytest.raises(StepError) as caught:
        adapter.complete(request or ModelRequest(model="m", prompt="classify acme", output_schema=SCHEMA))
    return caught.value


@pytest.mark.parametrize("provider", BOTH)
@pytest.mark.parametrize(("mode", "error_class"), [
    ("quota", "budget_exceeded"),
    ("status-402", "budget_exceeded"),
    ("status-500", "unavailable"),
    ("status-502", "unavailable"),
    ("status-503", "unavailable"),
    ("status-529", "unavailable"),
    ("status-408", "timeout"),
    ("status-504", "timeout"),
    ("status-400", "invalid_request"),
    ("status-413", "invalid_request"),
    ("status-422", "invalid_request"),
    ("context-length", "invalid_request"),
    ("status-401", "unauthorized"),
    ("status-403", "unauthorized"),
    ("no-model", "configuration"),
    ("refusal", "policy_denied"),
    ("truncated", "invalid_output"),
    ("prose", "invalid_output"),
    ("html", "unavailable"),
    ("drop", "network"),
])
def test_each_failure_is_mapped_to_its_error_class(adapter, provider, mode, error_class):
    # Given a model whose server answers with the fault `mode`
    model = adapter(provider, mode)
    # When it is called, Then the failure carries the class the retry policy understands
    error = fail(model)
    assert error.error_class == error_class, error.message
    assert "'m'" in error.message or "model" in error.message


def test_openai_content_filter_is_policy_denied(adapter):
    assert fail(adapter("openai", "content-filter")).error_class == "policy_denied"


@pytest.mark.parametrize(("provider", "wait"), [("openai", 1.5), ("anthropic", 2.0)])
def test_rate_limits_honour_retry_after_ms_then_retry_after(adapter, provider, wait):
    # Given a 429 rate_limit_exceeded (OpenAI sends retry-after-ms: 1500 and retry-after: 2)
    error = fail(adapter(provider, "rate-limited"))
    # Then it is rate_limited and waits what the provider asked for
    assert (error.error_class, error.retry_after) == ("rate_limited", wait)


def test_quota_and_billing_are_never_retryable():
    from sealflow.core.errors import ERROR_CLASSES

    assert ERROR_CLASSES["budget_exceeded"] is False


def test_retry_after_accepts_an_http_date():
    now = time.time()
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 30))
    assert retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1.5)
    assert retry_after({"retry-after": "soon"}) is None


@pytest.mark.parametrize("provider", BOTH)
def test_a_slow_server_is_a_timeout_bounded_by_the_model_timeout(adapter, provider):
    model = adapter(provider, "slow", timeout="0.3s")
    started = time.monotonic()
    error = fail(model)
    assert error.error_class == "timeout" and time.monotonic() - started < 1.2


@pytest.mark.parametrize("provider", BOTH)
def test_the_step_deadline_bounds_the_request_too(adapter, provider):
    model = adapter(provider, "slow", timeout="30s")
    started = time.monotonic()
    error = fail(model, ModelRequest(model="m", prompt="p", deadline=time.time() + 0.3))
    assert error.error_class == "timeout" and time.monotonic() - started < 1.2
    assert fail(model, ModelRequest(model="m", prompt="p", deadline=time.time() - 1)).error_class == "timeout"


@pytest.mark.parametrize("provider", BOTH)
def test_a_refused_connection_is_a_network_error(adapter, provider):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = adapter(provider)
    model.config = type(model.config)(**{**model.config.__dict__, "base_url": f"http://127.0.0.1:{port}/v1"})
    assert fail(model).error_class == "network"


@pytest.mark.parametrize("provider", BOTH)
def test_a_wrong_key_is_unauthorized(adapter, provider):
    error = fail(adapter(provider, key="sk-wrong-key-000000000000"))
    assert error.error_class == "unauthorized" and "sk-wrong" not in error.message


@pytest.mark.parametrize("provider", BOTH)
def test_the_key_never_appears_in_an_error_or_repr_even_when_the_server_echoes_it(adapter, provider):
    # Given a gateway that repeats the key it was sent in its 401 message
    model = adapter(provider, "echo-key")
    # When the call fails
    error = fail(model)
    # Then the error is unauthorized and the key is blanked out everywhere it could surface
    assert error.error_class == "unauthorized"
    for text in (error.message, str(error), repr(error), repr(model), str(model), repr(model._key)):
        assert KEY not in text
    assert "[REDACTED]" in error.message
