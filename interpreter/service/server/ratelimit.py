"""Rate limiting: a token bucket per key (a principal; a client address for failed authentications).

Each key may make ``rate`` requests a second on average and ``burst`` at once. The buckets live in the
process: with N server worker processes a principal gets up to N times the rate (docs/operations.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: buckets kept before the idlest are forgotten (bounds memory under many keys)
MAX_KEYS = 10_000


class RateLimiter:
    """Token buckets keyed by string; :meth:`take` answers 0 (allowed) or the seconds to wait."""

    def __init__(self, rate: float, burst: float | None = None, *, clock: Callable[[], float] = time.monotonic):
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, 2 * rate))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str) -> float:
        """Spend one request of ``key``: 0.0 if allowed, else how many seconds until one is."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            if len(self._buckets) > MAX_KEYS:
                for stale in sorted(self._buckets, key=lambda k: self._buckets[k][1])[: MAX_KEYS // 10]:
                    del self._buckets[stale]
        return wait
