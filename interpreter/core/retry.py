"""Retry decisions: which failures are retried, and after how long.

A failed attempt is retried only when its error class is listed in the
step's :class:`~sealflow.dsl.plan.RetryPolicy` ``on``, the class is retryable at all
(:data:`sealflow.core.errors.ERROR_CLASSES`; never-retryable classes are never
retried, whatever a policy says) and attempts remain (``max_attempts`` counts
the first one). A lost attempt is not a failure at all: it runs again without consuming ``max_attempts``
(:mod:`sealflow.engine.poison`). The delay before attempt ``n+1`` is exponential,
``initial_ms * factor**(n-1)`` capped at ``max_ms``, with ``full`` jitter
(uniform in [0, d]), ``equal`` (d/2 + uniform in [0, d/2]) or ``none``; a
``retry_after`` the failure carried (HTTP 429) is a minimum.
"""

from __future__ import annotations

import random

from sealflow.core.errors import ERROR_CLASSES
from sealflow.dsl.plan import RetryPolicy


def should_retry(policy: RetryPolicy, error_class: str, try_no: int) -> bool:
    """True when attempt number ``try_no`` (1-based) failing with ``error_class`` gets another try."""
    return ERROR_CLASSES.get(error_class, False) and error_class in policy.on and try_no < policy.max_attempts


def backoff_ms(policy: RetryPolicy, try_no: int, rng: random.Random | None = None) -> float:
    """The delay, in milliseconds, after failed attempt ``try_no`` and before the next one."""
    base = min(float(policy.max_ms), policy.initial_ms * policy.factor ** max(0, try_no - 1))
    if policy.jitter == "none" or base <= 0:
        return base
    draw = (rng or random).random()
    if policy.jitter == "equal":
        return base / 2 + draw * base / 2
    return draw * base


def delay_seconds(policy: RetryPolicy, try_no: int, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Seconds to wait before retrying, honouring ``retry_after`` (seconds) as a minimum."""
    delay = backoff_ms(policy, try_no, rng) / 1000.0
    if retry_after is not None and retry_after > delay:
        delay = float(retry_after)
    return delay
