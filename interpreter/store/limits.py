"""Limits shared by every process (one aggregate of the store): a tenant's daily usage, per-model rate limits,
circuit breakers, lock and pool slots. A tenant's admission (queued-run limit, daily quota) is checked inside
:meth:`~sealflow.store.ledger.RunLedger.submit`; usage reservations are an optional capability
(:class:`~sealflow.store.capabilities.UsageReservations`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sealflow.core.breakers import Admission, BreakerRecord, BreakerSettings
from sealflow.core.ratelimits import WINDOW_S, Limit
from sealflow.store.coordination import SlotHolder


@runtime_checkable
class Limits(Protocol):
    """Usage, rate limits, circuit breakers and slots, each decided in one transaction on the store."""

    def tenant_usage(self, tenant: str, day: int) -> tuple[int, float]:
        """Tokens and cost (USD) charged to ``tenant`` on UTC day number ``day``."""

    # -- per-model rate limits (see :mod:`sealflow.store.sql.ratelimits`) ----------------------------------
    def rate_take(self, model: str, key: str, now: float, limit: Limit, tokens: int) -> float | None:
        """Grant call ``key`` against ``model``'s rate ``limit`` at ``now`` (None), else when it would fit."""

    def rate_settle(self, key: str, tokens: int) -> bool:
        """Lower grant ``key``'s tokens to what the call really used (never raise them); False if gone."""

    def rate_release(self, key: str) -> bool:
        """Give grant ``key`` back whole (its call was not made); False if it is gone."""

    def rate_usage(self, model: str, now: float, window: float = WINDOW_S) -> tuple[int, int]:
        """The requests and tokens granted to ``model`` in the window ending at ``now``."""

    # -- circuit breakers (see :mod:`sealflow.store.sql.breakers`) ------------------------------------------
    def breaker_admit(self, name: str, now: float, settings: BreakerSettings) -> Admission:
        """In one transaction: may a call behind breaker ``name`` go through now? An open breaker past its
        cool-down becomes half-open and gives this caller the one probe."""

    def breaker_record(self, name: str, now: float, settings: BreakerSettings, *, error_class: str | None,
                       probe: bool, message: str | None = None, called: bool = True) -> tuple[str, str]:
        """In one transaction: record the end of a call (``called`` False: the target was not called, a
        probe is handed back); return the breaker's state before and after."""

    def breakers(self) -> list[BreakerRecord]:
        """Every breaker that recorded something."""

    def breaker_reset(self, name: str, now: float) -> bool:
        """Close breaker ``name`` and forget its failures; False when there is none."""

    # -- locks and pools (see :mod:`sealflow.store.coordination`) ---------------------------------------------
    def slots(self, now: float, name: str | None = None) -> list[SlotHolder]:
        """Holders, then waiters in arrival order, of the lock or pool ``name`` (None: every name)."""
