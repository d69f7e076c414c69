"""Per-model rate limits: every call to a configured model with ``rate_limit:`` takes the shared limiter.

Before each call an ``ai`` step or an ``agent`` turn makes to a model configured with
``rate_limit: {requests_per_minute, tokens_per_minute}`` (the ``models:`` section,
:mod:`sealflow.providers.config`), :func:`take` asks the store for one request and the call's
worst case in tokens (the same estimate the quota reservation uses: an upper bound of the prompt plus
``max_tokens``), counted over the last 60 seconds by every worker sharing the store
(:mod:`sealflow.store.sql.ratelimits`; PostgreSQL on the database clock). When the call
ends, :func:`settle` lowers the grant to the tokens really used, so the unused part frees at once; a call the
model's circuit breaker refused was not made, and :func:`release` gives its grant back whole.

A call that does not fit is not made and nothing sleeps: the step's attempt ends **waiting** on a
timer in the store (kind ``wait``), due when the limiter says capacity frees (:func:`waiting`). That is
not a failed attempt: no retry is used, and the step is counted once however often it waits. When the
timer fires, a worker claims the same attempt again and it runs from its start (an agent continues its
conversation). A crash while waiting loses nothing: the timer is in the store. ``status`` shows the
run ``waiting`` with ``kind: rate_limit``, the model and when it may go on; the audit has a
``rate_limited`` event per wait. An ``ai`` step with ``fallback:`` models first tries those, in order
(the issue's order: fallback on ``rate_limited``); it waits only when every model is over its limit,
until the first one frees. A provider's own 429 is different: it stays the error class ``rate_limited``,
retried after its ``retry-after`` by the step's retry class.

A call whose worst case alone is over ``tokens_per_minute`` can never fit: it fails with
``configuration`` (lower the step's ``max_tokens`` or raise the limit) instead of waiting forever.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid
from typing import Any, Protocol, runtime_checkable

from sealflow.core import ratelimits as rules
from sealflow.core.outcomes import Failed, Waiting
from sealflow.execution.context import Execution

log = logging.getLogger("sealflow.limits")

#: the attempt-data key of a wait for a rate limit (read by ``status``)
DATA_KEY = "rate_limit"
#: the store's timer kind of the wait (a ``wait`` timer: the attempt's data says what it waits for)
TIMER = "wait"


@runtime_checkable
class RateSettling(Protocol):
    """A store that lowers a grant to what its call used (both backends; not yet in the ``Store`` contract)."""

    def rate_settle(self, key: str, tokens: int) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Grant:
    """A call the limiter let through: settle it with the tokens it used."""

    key: str
    model: str


@dataclasses.dataclass(frozen=True)
class Parked:
    """A call over its model's limit: it may be made at ``free_at``."""

    model: str
    free_at: float
    limit: rules.Limit


def limit_of(provider: Any) -> rules.Limit | None:
    """The limit of the model ``provider`` serves (its ``models:`` configuration), None when it has none."""
    spec = getattr(getattr(provider, "config", None), "rate_limit", None)
    if spec is None:
        return None
    return rules.Limit(requests=spec.requests_per_minute, tokens=spec.tokens_per_minute)


def describe(limit: rules.Limit) -> str:
    parts = []
    if limit.requests is not None:
        parts.append(f"{limit.requests} requests")
    if limit.tokens is not None:
        parts.append(f"{limit.tokens} tokens")
    return " and ".join(parts) + " per minute"


def take(x: Execution, model: str, provider: Any, tokens: int) -> Grant | Parked | Failed | None:
    """Take one call of ``tokens`` (its worst case) from ``model``'s limit: a :class:`Grant` (settle it
    after the call), :class:`Parked` (do not call), a ``configuration`` failure (it can never fit), or
    None (the model has no limit)."""
    limit = limit_of(provider)
    if limit is None:
        return None
    if rules.never_fits(limit, tokens):
        return Failed("configuration", f"a call of step {x.step.id!r} may use up to {tokens} tokens (its max_tokens "
                                       f"and prompt), over model {model!r}'s rate_limit.tokens_per_minute of "
                                       f"{limit.tokens}, so it could never be made; lower the step's max_tokens or "
                                       "raise the limit")
    key = f"{x.run.id}:{x.step_id}:{x.attempt.attempt}:{uuid.uuid4().hex[:12]}"
    now = x.services.clock.now()
    try:
        wait = x.services.store.rate_take(model, key, now, limit, int(tokens))
    except Exception as exc:  # noqa: BLE001 - the limit is enforced: no answer, no call
        log.warning("rate limit of model %r: the store did not answer: %s", model, exc)
        return Failed("unavailable", f"the store did not answer the rate limiter of model {model!r}, so the model "
                                     f"was not called: {type(exc).__name__}")
    if wait is None:
        return Grant(key, model)
    return Parked(model, max(wait, now + 0.001), limit)


def settle(x: Execution, grant: Grant | None, used_tokens: Any) -> None:
    """Lower ``grant`` to the tokens the call really used (a failed call that used none gives them all back;
    the request itself still counts)."""
    if grant is None:
        return
    store = x.services.store
    try:
        if not isinstance(store, RateSettling):
            raise TypeError(f"{type(store).__name__} has no rate_settle")
        store.rate_settle(grant.key, int(used_tokens or 0))
    except Exception:  # noqa: BLE001 - the grant keeps its worst case: the limit errs on the safe side
        log.exception("rate limit of model %r: could not settle call %s", grant.model, grant.key)


def release(x: Execution, grant: Grant | None) -> None:
    """Give ``grant`` back whole: its call was not made (the model's circuit breaker refused it), so it counts
    as no request."""
    if grant is None:
        return
    try:
        x.services.store.rate_release(grant.key)
    except Exception:  # noqa: BLE001 - the grant then counts until its window passes: the safe side
        log.exception("rate limit of model %r: could not give back call %s", grant.model, grant.key)


def ended(x: Execution, grant: Grant | None, *, made: bool, used_tokens: Any = 0) -> None:
    """A call through the model's circuit breaker ended: :func:`settle` its grant when the request was
    ``made``, else (the breaker refused it) :func:`release` it."""
    if made:
        settle(x, grant, used_tokens)
    else:
        release(x, grant)


def _at(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def waiting(x: Execution, parked: list[Parked], data: dict[str, Any] | None = None, **usage: Any) -> Waiting:
    """The attempt's outcome when every model it may call is over its limit: wait, durably, for the first
    to free (``data`` joins the attempt's data, e.g. an agent's conversation; ``usage`` is charged now)."""
    first = min(parked, key=lambda p: p.free_at)
    models = [p.model for p in parked]
    reason = (f"waiting for the rate limit of model {first.model!r} ({describe(first.limit)}, shared by every "
              f"worker); it may be called again at {_at(first.free_at)}")
    if len(parked) > 1:
        reason += f" (every model it may use is at its limit: {', '.join(models)})"
    info = {"model": first.model, "models": models, "free_at": first.free_at, "reason": reason}
    return Waiting(first.free_at, TIMER, {**(data or {}), DATA_KEY: info}, event="rate_limited",
                   detail={"model": first.model, "models": models, "free_at": first.free_at,
                           "wait_s": round(max(0.0, first.free_at - x.now), 3)}, **usage)
