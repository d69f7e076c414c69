"""Admission control and tenant usage on the SQLite store (used inside its transactions).

:func:`admit` runs in the ``BEGIN IMMEDIATE`` transaction that would insert a
run, so the check and the insert are one atomic step: two submissions racing
for the last queue slot cannot both get it, and a refused one leaves nothing
behind. :data:`USAGE_UPSERT` charges a commit's tokens and cost to its run's
tenant for the UTC day, in the commit's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sealflow.core.clock import day_of, quota_reset_in
from sealflow.store.errors import AdmissionRefused
from sealflow.store.sql.conn import Conn
from sealflow.store.sql.statements import OUTBOX_PUT

#: states of runs that count against ``max_queued_runs``
NOT_FINAL = "('created','queued','running','waiting','cancelling','compensating')"
USAGE_UPSERT = ("INSERT INTO tenant_usage (tenant, day, tokens, cost_usd) SELECT tenant, ?, ?, ? FROM runs "
                "WHERE id = ? ON CONFLICT (tenant, day) DO UPDATE SET tokens = tenant_usage.tokens + excluded.tokens, "
                "cost_usd = tenant_usage.cost_usd + excluded.cost_usd")
_QUEUE_HINT_S = (1.0, 300.0, 5.0)  # retry-after bounds and default when nothing has finished yet


class Quota(Protocol):
    """A tenant's limits as admission reads them (:class:`sealflow.runtime.config.TenantLimits`); None: none."""

    @property
    def max_queued_runs(self) -> int | None: ...

    @property
    def daily_tokens(self) -> int | None: ...

    @property
    def daily_cost_usd(self) -> float | None: ...


def usage(c: Conn, tenant: str, day: int) -> tuple[int, float]:
    got = c.execute("SELECT tokens, cost_usd FROM tenant_usage WHERE tenant = ? AND day = ?", (tenant, day)).fetchone()
    return (got[0], got[1]) if got else (0, 0.0)


def _queue_estimate(c: Conn, tenant: str) -> float:
    """A rough wait for a queue slot: the mean duration of a sample of the tenant's finished runs."""
    low, high, default = _QUEUE_HINT_S
    got = c.execute("SELECT AVG(updated_at - created_at) FROM (SELECT updated_at, created_at FROM runs "
                    "WHERE tenant = ? AND state = 'completed' LIMIT 50) AS finished", (tenant,)).fetchone()
    mean = got[0] if got and got[0] is not None else default
    return float(min(max(mean, low), high))


def admit(c: Conn, tenant: str, now: float, limits: Quota) -> None:
    """Raise :class:`AdmissionRefused` when a new run of ``tenant`` is over one of its ``limits``."""
    cap = limits.max_queued_runs
    if cap is not None:
        count = c.execute(f"SELECT COUNT(*) FROM runs WHERE tenant = ? AND state IN {NOT_FINAL}",
                          (tenant,)).fetchone()[0]
        if count >= cap:
            wait = _queue_estimate(c, tenant)
            raise AdmissionRefused(
                f"tenant {tenant!r} has {count} runs not yet finished, its max_queued_runs limit of {cap}; "
                f"submit again in about {wait:.0f}s, or raise tenant_limits.{tenant}.max_queued_runs in the "
                "runtime configuration", limit="max_queued_runs", tenant=tenant, retry_after=wait,
                error_class="rate_limited")
    if limits.daily_tokens is None and limits.daily_cost_usd is None:
        return
    tokens, cost = usage(c, tenant, day_of(now))
    wait = quota_reset_in(now)
    if limits.daily_tokens is not None and tokens >= limits.daily_tokens:
        raise AdmissionRefused(
            f"tenant {tenant!r} has used {tokens} tokens today, its daily_tokens quota of {limits.daily_tokens}; "
            f"the quota resets at UTC midnight, in {wait:.0f}s", limit="daily_tokens", tenant=tenant,
            retry_after=wait, error_class="budget_exceeded")
    if limits.daily_cost_usd is not None and cost >= limits.daily_cost_usd:
        raise AdmissionRefused(
            f"tenant {tenant!r} has spent ${cost:.4f} today, its daily_cost_usd quota of "
            f"${limits.daily_cost_usd:.4f}; the quota resets at UTC midnight, in {wait:.0f}s",
            limit="daily_cost_usd", tenant=tenant, retry_after=wait, error_class="budget_exceeded")


#: a deferred claim's message is due again after a delay drawn from this range (seconds)
DEFER_S = (0.05, 0.25)


def defer_if_full(c: Conn, now: float, tenant: str, run_id: str, step_id: str, attempt: int, token: int,
                  running_limit: Callable[[str], int | None]) -> float | None:
    """Bulkhead: when ``tenant`` has ``running_limit(tenant)`` attempts running, put the message off
    (its outbox row is due again after a short random delay) and return the delay; else None."""
    import random

    limit = running_limit(tenant)
    if limit is None:
        return None
    busy = c.execute("SELECT COUNT(*) FROM runs r JOIN attempts a ON a.run_id = r.id AND a.step_id = r.cursor_step "
                     "AND a.attempt = r.cursor_attempt WHERE r.tenant = ? AND "
                     "r.state IN ('running','cancelling','compensating') AND a.state = 'running'",
                     (tenant,)).fetchone()[0]
    if busy < limit:
        return None
    delay = random.uniform(*DEFER_S)
    c.execute(OUTBOX_PUT, (run_id, step_id, attempt, token, now + delay, None))
    return delay
