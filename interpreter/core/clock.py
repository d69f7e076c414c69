"""Clocks: the real one, and a fake one for tests.

Everything the store schedules (timers, leases, retry backoff, run deadlines)
is measured on the runtime's clock, in seconds since the epoch, so a test can
jump a day ahead with :meth:`FakeClock.advance` instead of waiting. The
per-attempt timeout is the exception: it bounds a real thread, so it is real
time (see :mod:`sealflow.execution.timeouts`).
"""

from __future__ import annotations

import threading
import time


class Clock:
    """Wall-clock time (``time.time``) and real sleeping."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock(Clock):
    """A clock that only moves when told to; ``sleep`` advances it at once."""

    def __init__(self, start: float = 1_700_000_000.0):
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += max(0.0, float(seconds))
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


SYSTEM = Clock()


#: the daily quota window (a UTC day), in seconds
DAY_S = 86_400.0


def day_of(now: float) -> int:
    """The UTC day number a tenant's daily usage is counted under."""
    return int(now // DAY_S)


def quota_reset_in(now: float) -> float:
    """Seconds until the daily quota window (a UTC day) resets."""
    return (day_of(now) + 1) * DAY_S - now
