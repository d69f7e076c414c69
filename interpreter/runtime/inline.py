"""``Runtime.run`` on the embedded default: the caller's thread runs its own run, as a worker thread would.

The caller of :meth:`Inline.run` waits for the run anyway. So on the embedded default (an in-process
``StubBroker``) the run's first attempt is claimed for this process in the transaction that creates the run
(:meth:`Store.submit_claimed`, as a commit that carries a run on claims its next step), and the caller's
thread handles it and carries the run on (:func:`~sealflow.runtime.actors.carry`) exactly as a
worker thread carries on a message: every step claimed, executed on a runner thread under its timeout and
committed fenced, one at a time. Whatever the run then waits for (a timer, a retry's backoff, a message that
goes through the broker, an approval) is driven as before (:meth:`Driving.drive`). It skips what a message
costs on the way: the dispatcher's transaction, the broker's hand-off to a worker thread, and the claim's own
transaction.

The first attempt is claimed here only when this process may: no bulkhead or lock or pool to wait in line for,
and nothing the step needs missing here (otherwise it is scheduled and dispatched as usual). A
``KeyboardInterrupt`` (or ``SystemExit``) while the caller's thread waits for an action is not the step's
failure: it goes up, and the attempt, claimed, is retried when its lease ends, as after a crash.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dramatiq.brokers.stub import StubBroker

from sealflow.core import states
from sealflow.dsl.plan import Plan
from sealflow.runtime import actors, readiness
from sealflow.runtime.status import RunStatus
from sealflow.store.records import Claimed, Message

if TYPE_CHECKING:
    from collections.abc import Callable

    import dramatiq

    from sealflow.engine.engine import Engine
    from sealflow.runtime.sweeper import Sweeper
    from sealflow.store.definitions import DefinitionSource

#: a run that ended in the caller's thread is returned without a drive round when the last sweep of this process
#: is younger than this (seconds): a drive round sweeps (timers, expired leases of other runs) as it goes
_SWEPT_WITHIN_S = 1.0


class Inline:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:  # the facade's (runtime/facade.py), which these methods use
        engine: Engine
        broker: dramatiq.Broker
        owner: str
        sweeper: Sweeper

        def start(self) -> None: ...
        def status(self, run_id: str, *, tenant: str | None = None, actor: str | None = None,
                   children_offset: int = 0) -> RunStatus: ...
        def send(self, message: Message, priority: str | None = None) -> None: ...
        def drive(self, run_id: str, *, until: str = "settled", timeout: float | None = None,
                  sleep_threshold: float | None = None) -> RunStatus: ...
        def _submit(self, plan: Plan, input: Any, *, initiator: str, tenant: str = "default",
                    idempotency_key: str | None = None, run_as: str | None = None, signer: str | None = None,
                    source: DefinitionSource | None = None, pin: bool = False,
                    claim_for: Callable[[Plan, str | None], str | None] | None = None
                    ) -> tuple[str, Claimed | None]: ...

    def run(self, plan: Plan, input: Any, *, initiator: str, until: str = "settled", **kw: Any) -> RunStatus:
        """Submit and drive (see :meth:`drive` for ``until``); on the embedded default the caller's thread runs
        the run's steps itself (this module)."""
        self.start()
        run_id, claimed = self._submit(plan, input, initiator=initiator, claim_for=self._inline_owner, **kw)
        if claimed is not None and self._carry_inline(claimed) in states.RUN_FINAL \
                and time.monotonic() - self.sweeper.last_swept < _SWEPT_WITHIN_S:
            return readiness.note_left(self, self.status(run_id))
        return self.drive(run_id, until=until)

    def _inline_owner(self, plan: Plan, signer: str | None) -> str | None:
        """This process's owner name when the run's first attempt may be claimed and run here, else None (the
        engine knows ``plan`` already: :meth:`_submit` remembers it first)."""
        if not isinstance(self.broker, StubBroker):
            return None
        run = SimpleNamespace(plan_digest=plan.digest, signer=signer)  # (the run is not written yet)
        return self.owner if self.engine.may_claim_at_once(plan, plan.step(plan.start), run, plan.start) else None

    def _carry_inline(self, claimed: Claimed) -> str | None:
        """Handle the claimed first attempt in this thread and carry the run on (as a worker thread would); the
        state the last commit left the run in (None: nothing was committed)."""
        att = claimed.attempt
        # the message the claim answers (its token one before the claim's), handed to the engine with the claim
        # as a carrying commit's claim is
        message = Message(att.run_id, att.step_id, att.attempt, att.token - 1, claimed.run.tenant)
        return actors.carry(self.engine, message, self.send, self.send, actors.CONTINUE_LIMIT, claimed=claimed)
