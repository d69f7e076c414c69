"""HTTP error answers of model APIs to Sealflow error classes (the table in docs/models.md).

==========================================  ===================  ==========================
answer                                      error class          retried
==========================================  ===================  ==========================
429 ``rate_limit_exceeded`` (or any 429)    ``rate_limited``     yes, after ``retry-after-ms``
                                                                 / ``retry-after``
429 ``insufficient_quota``, 402 billing,    ``budget_exceeded``  never
400/403 "credit balance is too low"
500, 502, 503, 529 (overloaded), other 5xx  ``unavailable``      yes (``retry-after`` honoured)
408, 504                                    ``timeout``          yes
400, 413, 422 (incl. context length)        ``invalid_request``  no
401, 403                                    ``unauthorized``     no
404 (unknown model or endpoint)             ``configuration``    no
==========================================  ===================  ==========================

Messages carry the provider's own error message (cut to 300 characters) and never a
request header, so the API key cannot leak through them; adapters pass their key to
:func:`scrub` as a last guard anyway.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.http import HttpAnswer

_QUOTA_CODES = {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "quota_exceeded"}
_MAX_MESSAGE = 300


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_details(body: Any) -> tuple[str, str, str]:
    """``(code, type, message)`` from an OpenAI (``{"error": {...}}``) or Anthropic error body."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return "", "", error
    if not isinstance(error, dict):
        return "", "", ""
    code = error.get("code")
    kind = error.get("type")
    message = error.get("message")
    return (str(code) if code is not None else "", str(kind) if kind is not None else "",
            str(message) if message is not None else "")


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every secret value replaced by ``[REDACTED]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    return text


def error_for_answer(answer: HttpAnswer, *, provider: str, model: str, secret: str | None = None) -> StepError:
    """The :class:`StepError` for a non-2xx ``answer`` of ``provider`` serving ``model``."""
    status = answer.status
    code, kind, message = error_details(answer.json())
    detail = message or (answer.body[:200].decode("utf-8", "replace").strip() if answer.body else "")
    detail = scrub(detail, secret)[:_MAX_MESSAGE]
    said = f"{provider} model {model!r} answered HTTP {status}" + (f" ({code or kind})" if code or kind else "")
    said += f": {detail}" if detail else ""
    wait = retry_after(answer.headers)
    quota = code in _QUOTA_CODES or kind in _QUOTA_CODES
    billing = "credit balance" in detail.lower() or "billing" in code.lower()
    if status == 402 or (status == 429 and quota) or (status in (400, 403) and billing):
        return StepError("budget_exceeded", said + "; the account's quota or billing must be fixed, not retried")
    if status == 429:
        return StepError("rate_limited", said, retry_after=wait)
    if status in (408, 504):
        return StepError("timeout", said)
    if status in (401, 403):
        return StepError("unauthorized", said + "; check the model's api_key secret")
    if status == 404:
        return StepError("configuration", said + "; check the model id and base_url in the models: configuration")
    if 500 <= status <= 599:
        return StepError("unavailable", said, retry_after=wait)
    return StepError("invalid_request", said)
