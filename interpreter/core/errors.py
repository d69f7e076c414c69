"""Errors of the runtime. One root class; one line of docstring per class."""

from __future__ import annotations

from enum import StrEnum


class ErrorClass(StrEnum):
    """The error classes a step failure is classified into (stored and printed as their plain strings)."""

    TIMEOUT = "timeout"
    NETWORK = "network"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    INVALID_OUTPUT = "invalid_output"
    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    POLICY_DENIED = "policy_denied"
    BUDGET_EXCEEDED = "budget_exceeded"
    CONFIGURATION = "configuration"
    CANCELLED = "cancelled"
    INTERNAL = "internal"
    WORKER_LOST = "worker_lost"
    CIRCUIT_OPEN = "circuit_open"


#: error class -> retryable by a retry class that lists it
ERROR_CLASSES: dict[str, bool] = {
    "timeout": True,
    "network": True,
    "rate_limited": True,
    "unavailable": True,
    "invalid_output": True,
    "invalid_request": False,
    "unauthorized": False,
    "policy_denied": False,
    "budget_exceeded": False,
    "configuration": False,
    "cancelled": False,
    "internal": False,
    # what a lost attempt ends with when it is not run again (engine/poison.py): a poison step, a person
    # judging a lost attempt failed, an outcome-unknown gate nobody decided. A loss itself is not a failure:
    # the attempt runs again without consuming max_attempts
    "worker_lost": True,
    # a circuit breaker is open: the target was not called; retry after the cool-down, or fall back
    "circuit_open": True,
}

#: error class -> why an ``ai`` step hands its call to the next of its ``fallback:`` models after it (the one
#: table; docs/models.md's error table says the same, a test compares them). Other classes end the call.
FALLS_BACK: dict[str, str] = {
    "network": "the model's server cannot be reached: refused, reset or closed connection, name not resolved",
    "timeout": "the model did not answer within its own timeout (not the attempt's: then no time is left)",
    "rate_limited": "the provider answered 429 (our own limiter's wait falls back too, and is no failure)",
    "unavailable": "the model's server is down or overloaded (5xx)",
    "configuration": "the model is unknown there (404) or its key secret does not resolve here",
    "circuit_open": "the model's circuit breaker is open: it was not called",
}


assert set(ERROR_CLASSES) == {e.value for e in ErrorClass}, "every error class needs a retryable flag"


class SealflowError(Exception):
    """Root of the runtime's exceptions."""


class ConfigError(SealflowError):
    """The runtime configuration file is unreadable or invalid."""


class StepError(SealflowError):
    """A classified step failure raised by an action: ``StepError("rate_limited", "CRM said 429", retry_after=2.0)``."""

    def __init__(self, error_class: str, message: str = "", *, retry_after: float | None = None):
        if error_class not in ERROR_CLASSES:
            known = ", ".join(ERROR_CLASSES)
            raise ValueError(f"unknown error class {error_class!r}; use one of: {known}")
        super().__init__(message or error_class)
        self.error_class = error_class
        self.message = message or error_class
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"StepError({self.error_class!r}, {self.message!r})"


class ActionRegistrationError(SealflowError):
    """An action was declared wrongly (bad name, effect or a duplicate)."""


def classify(exc: BaseException) -> tuple[str, str, float | None]:
    """Map an exception to ``(error_class, message, retry_after)``.

    ``StepError`` keeps its class; ``TimeoutError`` is timeout, ``ConnectionError``
    network, ``PermissionError`` unauthorized; anything else is ``internal``.
    """
    if isinstance(exc, StepError):
        return exc.error_class, exc.message, exc.retry_after
    text = _text(exc)
    if isinstance(exc, TimeoutError):
        return "timeout", text or "timed out", None
    if isinstance(exc, ConnectionError):
        return "network", text or type(exc).__name__, None
    if isinstance(exc, PermissionError):
        return "unauthorized", text or "permission denied", None
    return "internal", f"{type(exc).__name__}: {text}", None


def _text(exc: BaseException) -> str:
    """``str(exc)``; an exception whose ``__str__`` fails (the action's bug too) is still described."""
    try:
        return str(exc)
    except Exception as bad:  # noqa: BLE001 - its own failure must not hide the one being classified
        return f"<its text could not be made: {type(bad).__name__}>"
