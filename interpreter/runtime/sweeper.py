"""The sweeper: expired leases and due timers back into the outbox.

Each sweep is one atomic store operation (:meth:`Store.sweep`): a running
attempt whose lease expired is ``scheduled`` again under a new fencing token
(its zombie's commit will fail) and the loss counted (the next claim records
``worker_lost``: :mod:`sealflow.engine.poison`); a ``backoff`` timer moves its attempt from
``retry_wait`` to ``scheduled``; a ``wait`` or ``approval_timeout`` timer
wakes its ``waiting`` attempt; a ``run_deadline`` timer times the run out; an
outbox row sent long ago and never claimed is sent again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sealflow.core.clock import Clock
from sealflow.store.ledger import RunLedger
from sealflow.store.records import SweepReport


class Sweeper:
    def __init__(self, store: RunLedger, clock: Clock, *, redeliver_after: float = 60.0,
                 past_deadline: Callable[[str], bool] | None = None):
        self.store = store
        self.clock = clock
        self.redeliver_after = redeliver_after
        #: given a run past its deadline, start its compensation (True) or leave it to be timed out (False)
        self.past_deadline = past_deadline
        #: when the last sweep began (``time.monotonic()``; 0: never)
        self.last_swept = 0.0

    def sweep(self) -> SweepReport:
        self.last_swept = time.monotonic()
        total = SweepReport()
        if self.past_deadline is not None:
            for run_id in self.store.due_deadlines(self.clock.now()):
                if self.past_deadline(run_id):
                    total.runs_touched.add(run_id)
        while True:
            report = self.store.sweep(self.clock.now(), redeliver_after=self.redeliver_after)
            total.leases_expired += report.leases_expired
            total.timers_fired += report.timers_fired
            total.redelivered += report.redelivered
            total.runs_timed_out += report.runs_timed_out
            total.runs_touched |= report.runs_touched
            if not report.runs_touched:
                return total
