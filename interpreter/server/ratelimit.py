"""Rate limiting shared by every server process: a sliding window per key (a principal; a client address
for failed authentications), counted in the store.

A limiter of ``rate`` requests a second with bursts of ``burst`` grants a key at most ``burst`` requests in
any window of ``burst / rate`` seconds: ``rate`` on average, ``burst`` at once. The grants are recorded by
the store's rate-limit tables (:meth:`rate_take`, the same window logic as the per-model limits of
``rate_limit:``, :mod:`sealflow.core.ratelimits`) in one transaction, on the database's clock
on PostgreSQL, so N server processes on one store together grant at most the configured limit.

The one in-process shortcut: once the store has answered that a key must wait until ``T``, this process
refuses that key until ``T`` without asking again (no grant can be made before ``T``, whoever asks: other
processes only add grants), which also keeps a flood of refused requests off the store.
"""

from __future__ import annotations

import threading
import uuid

from sealflow.core.clock import Clock
from sealflow.core.ratelimits import Limit
from sealflow.store.serverstate import RATE_PREFIX, ServerStore

#: refusals remembered at most (the shortcut is forgotten beyond; the store still decides)
MAX_KEYS = 10_000
#: grants between two sweeps of this limiter's old grants
SWEEP_EVERY = 1000


class RateLimiter:
    """Per-key limits in ``store``; :meth:`take` answers 0 (allowed) or the seconds to wait."""

    def __init__(self, store: ServerStore, clock: Clock, rate: float, burst: float | None = None, *, name: str):
        self.store = store
        self.clock = clock
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, 2 * rate))
        self.prefix = f"{RATE_PREFIX}{name}:"
        requests = max(1, int(self.burst))
        self.limit = Limit(requests=requests, window=requests / self.rate) if self.rate > 0 else None
        self._refused: dict[str, float] = {}
        self._lock = threading.Lock()
        self._granted = 0

    @property
    def enabled(self) -> bool:
        return self.limit is not None

    def take(self, key: str) -> float:
        """Spend one request of ``key``: 0.0 if allowed, else how many seconds until one is."""
        if self.limit is None:
            return 0.0
        now = self.clock.now()
        with self._lock:
            until = self._refused.get(key)
        if until is not None and now < until:
            return until - now
        until = self.store.rate_take(self.prefix + key, RATE_PREFIX + uuid.uuid4().hex, now, self.limit, 0)
        with self._lock:
            if until is None:
                self._refused.pop(key, None)
                self._granted += 1
                sweep = self._granted % SWEEP_EVERY == 0
            else:
                if len(self._refused) >= MAX_KEYS:
                    self._refused = {k: t for k, t in self._refused.items() if t > now}
                    if len(self._refused) >= MAX_KEYS:
                        self._refused.clear()
                self._refused[key] = until
                return max(until - now, 0.001)
        if sweep:
            self.store.server_sweep(now, self.limit.window, rate_prefix=self.prefix)
        return 0.0
