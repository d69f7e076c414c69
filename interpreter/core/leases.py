"""Leases: how long a claimed attempt is a worker's before the sweeper takes it back."""

from __future__ import annotations

#: a lease outlives the attempt's timeout by this much before the sweeper takes it back
LEASE_GRACE_MS = 5_000


def lease_ms(timeout_ms: int) -> int:
    """The lease of an attempt whose own timeout is ``timeout_ms``."""
    return timeout_ms + LEASE_GRACE_MS
