"""Lease slots with fencing tokens and an arrival-ordered waiting list: what locks and pools are made of.

A *slot name* (``lock:resource-1``, ``pool:email``, ``run:customer-42``) has ``limit`` slots. A claim that
asks for a slot (:class:`SlotRequest`) either takes one, with a fencing token that grows by one with every
grant of that name (:class:`Grant`), or joins the name's waiting list and is put off
(:class:`SlotsBusy`): its message is consumed and its outbox row is due again later (a timer in the
store; no thread, no message held). A lock is a name with limit 1.

Two scopes:

* ``attempt``: held by one attempt while it runs. It is free again when the attempt leaves ``running``
  (committed, failed, timed out, expired by the sweeper, cancelled), and *considered* free as soon as the
  attempt's lease has passed, so a SIGKILLed holder gives its slot back when its lease expires even
  before the sweeper runs (the fencing token tells a late writer from the new holder).
* ``run``: held by the run from its first granted attempt until the run is final (run-level
  ``concurrency: {key, limit}``); the run's later attempts pass without asking again.

Waiting is in arrival order: a claimant gets a slot only when fewer than ``free`` slots' worth of
earlier arrivals are waiting, so a later arrival never overtakes an earlier one. *Arrival* is when the
attempt was scheduled (attempt slots) or the run was created (run slots), not when its message happened
to be claimed, so racing dispatchers and worker threads cannot reorder the line. A release makes the
first waiters' outbox rows due at once; every waiter's row is also due again when the earliest holder's
lease ends (and at most :data:`RECHECK_S` later), so a holder that died wakes its waiters without any
process noticing.

The SQL lives in :mod:`sealflow.store.sql.slots` (shared by the PostgreSQL store).
"""

from __future__ import annotations

import dataclasses

from sealflow.store.errors import ClaimDeferred

#: a waiter's row is due again at most this long after it was put off (a safety net: releases wake waiters)
RECHECK_S = 30.0
SCOPES = ("attempt", "run")


@dataclasses.dataclass(frozen=True)
class SlotRequest:
    """One slot a claim needs before its attempt may start."""

    name: str
    limit: int = 1
    scope: str = "attempt"

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"slot scope {self.scope!r}: use one of {', '.join(SCOPES)}")
        if self.limit < 1:
            raise ValueError(f"slot {self.name!r}: a limit must be at least 1, not {self.limit}")


@dataclasses.dataclass(frozen=True)
class Grant:
    """A slot taken (or already held by the run): its name and fencing token."""

    name: str
    fence: int
    scope: str = "attempt"


@dataclasses.dataclass(frozen=True)
class SlotHolder:
    """A row of :meth:`Store.slots`: who holds a slot of ``name`` now, or waits for one."""

    name: str
    run_id: str
    step_id: str | None
    attempt: int | None
    fence: int | None  # None: waiting
    since: float
    position: int | None = None  # place in the waiting list (0 first), None for holders


class SlotsBusy(ClaimDeferred):
    """A claim was put off: a slot it needs is taken (the attempt waits, in arrival order, durably)."""

    def __init__(self, message: str, retry_in: float, name: str, position: int):
        super().__init__(message, retry_in)
        self.name = name
        #: the claimant's place in the name's waiting list (0: next)
        self.position = position


__all__ = ["RECHECK_S", "Grant", "SlotHolder", "SlotRequest", "SlotsBusy"]
