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

from sealflow.interpreter.core.clock import Clock
from sealflow.interpreter.store.base import Message, Store


class Dispatcher:
    def __init__(self, store: Store, send: Callable[[Message], None], clock: Clock, *, batch: int = 256):
        self.store = store
        self.send = send
        self.clock = clock
        self.batch = batch

    def flush(self) -> int:
        """Send every due outbox row; return how many were sent."""
        sent = 0
        while True:
            messages = self.store.take_outbox(self.clock.now(), self.batch)
            for message in messages:
                self.send(message)
            sent += len(messages)
            if len(messages) < self.batch:
                return sent
