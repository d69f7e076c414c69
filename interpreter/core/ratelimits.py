"""Per-model rate limits: the sliding-window rule (pure; the store keeps the grants).

A configured model's ``rate_limit: {requests_per_minute, tokens_per_minute}`` (either or both) bounds
the calls made to it by every worker sharing a store, over *any* window of 60 seconds: a call is
granted at ``now`` only when the grants of the last 60 s (``at > now - 60``) plus this one stay within
both limits. A call's tokens are its worst case when it is granted (``max_tokens`` plus an upper bound
of its prompt) and are lowered to the real figure when it ends (settled), so the unused part frees.

When a call does not fit, :func:`free_at` says when it would: the moment enough of the oldest grants
leave the window. The store takes and records grants in one transaction
(:mod:`sealflow.store.sql.ratelimits`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

#: the window the per-minute limits count over, in seconds
WINDOW_S = 60.0


@dataclasses.dataclass(frozen=True)
class Limit:
    """At most ``requests`` calls and ``tokens`` tokens per ``window`` seconds (None: no such limit)."""

    requests: int | None = None
    tokens: int | None = None
    window: float = WINDOW_S


def free_at(grants: Iterable[tuple[float, int]], now: float, limit: Limit, tokens: int) -> float | None:
    """None when a call of ``tokens`` fits at ``now`` beside ``grants`` (``(at, tokens)`` pairs); else the
    earliest time it would fit, if nothing else were granted meanwhile. ``tokens`` must not exceed
    ``limit.tokens`` (:func:`never_fits`)."""
    live = sorted((at, t) for at, t in grants if at > now - limit.window)
    leave = 0  # how many of the oldest grants must leave the window first
    if limit.requests is not None:
        leave = max(leave, len(live) + 1 - limit.requests)
    if limit.tokens is not None:
        total = sum(t for _, t in live) + tokens
        k = 0
        while total > limit.tokens and k < len(live):
            total -= live[k][1]
            k += 1
        leave = max(leave, k)
    if leave <= 0:
        return None
    return live[leave - 1][0] + limit.window


def never_fits(limit: Limit, tokens: int) -> bool:
    """A call of ``tokens`` is over the whole token limit: no wait can make it fit."""
    return limit.tokens is not None and tokens > limit.tokens
