"""The outbox dispatcher: due outbox rows -> broker messages.

Rows are marked sent in the same operation that reads them
(:meth:`Store.take_outbox`), then enqueued. If the process dies in between,
the sweeper sends them again after ``redeliver_after``, and a fresh embedded
runtime re-sends every sent-but-unclaimed row at start
(:meth:`Store.reset_dispatch`): a message may arrive twice, never zero times,
and the claim refuses the duplicate.
"""

from __future__ import annotations

from collections.abc import Callable

from sealflow.core.clock import Clock
from sealflow.store.ledger import RunLedger
from sealflow.store.records import Message


class Dispatcher:
    def __init__(self, store: RunLedger, send: Callable[[Message, str | None], None], clock: Clock, *,
                 batch: int = 256):
        self.store = store
        self.send = send
        self.clock = clock
        self.batch = batch

    def flush(self) -> int:
        """Send every due outbox row; return how many were sent."""
        sent = 0
        while True:
            due = self.store.take_due(self.clock.now(), self.batch)
            for message, priority in due:  # (the run's priority came with it: no read of the run to route it)
                self.send(message, priority)
            sent += len(due)
            if len(due) < self.batch:
                return sent
