"""A replaced attempt knows it: ``ctx.cancelled()`` turns true once the attempt's lease is lost.

A worker paused past its lease (SIGSTOP, a long GC pause, a laptop lid) may wake up after the sweeper
handed the attempt to another worker, which may already have committed the step. The old attempt's
commit is fenced off by its token, but its *effect* would still happen. :class:`LeaseWatch` tells the
action: the lease is lost once its expiry has passed (no store read needed), or once the store says
the attempt moved on (its token changed, it is no longer running, or another worker holds it); the
store is read at most every :data:`RECHECK_S` seconds per attempt. Once lost, lost for good.
"""

from __future__ import annotations

import time
from typing import Any

#: seconds between two store reads of the same attempt
RECHECK_S = 0.5


class LeaseWatch:
    __slots__ = ("store", "clock", "run_id", "step_id", "attempt", "token", "expires", "_lost", "_checked")

    def __init__(self, store: Any, clock: Any, attempt: Any):
        self.store, self.clock = store, clock
        self.run_id, self.step_id, self.attempt = attempt.run_id, attempt.step_id, attempt.attempt
        self.token, self.expires = attempt.token, attempt.lease_expires
        self._lost = False
        self._checked = time.monotonic()  # just claimed: the store said it is ours

    def lost(self) -> bool:
        """True once this attempt's lease has expired or the attempt was handed to another worker."""
        if self._lost:
            return True
        if self.expires is not None and self.clock.now() >= self.expires:
            self._lost = True
            return True
        now = time.monotonic()
        if now - self._checked < RECHECK_S:
            return False
        self._checked = now
        try:
            current = self.store.active_attempt(self.run_id)
        except Exception:  # noqa: BLE001 - cannot tell (store busy): ask again later, never fail the action
            return False
        self._lost = (current is None or (current.step_id, current.attempt) != (self.step_id, self.attempt)
                      or current.token != self.token or current.state != "running")
        return self._lost
