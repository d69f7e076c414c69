"""How the engine comes to hold an attempt: the claim side of the message path.

Before a message runs, the engine either takes the attempt or leaves it alone:

* **leaving**: a step this process lacks an action, model, secret or trust policy for (:mod:`.capability`)
  is left unclaimed, nothing changed, for a process that has it;
* **the claim** (:meth:`Store.claim`), with the lock and pool slots the attempt needs
  (:mod:`sealflow.policy.coordination`), computed inside the claim from the cached plan;
* **carrying**: the claim the caller's last commit made of the run's next attempt (``Commit.claim_as``,
  returned in ``Handled.claimed`` and handed back with the message), used instead of claiming it again, and
  when a commit may make one.

These are methods of :class:`~sealflow.engine.engine.Engine` (a mixin, as
``runtime/driving.py`` is the ``Runtime``'s); they use its store, clock, caches and configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from sealflow.core.errors import StepError
from sealflow.core.ids import StepRef, split_step_id
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.engine import capability
from sealflow.execution.context import Execution
from sealflow.policy import coordination
from sealflow.store.base import AttemptRecord, AuditEvent, Claimed, NextAttempt, RunRecord
from sealflow.store.errors import NotFound, StoreError

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.engine.fanout import Parents
    from sealflow.execution.context import OutputCache, Services
    from sealflow.store.base import Store
    from sealflow.store.coordination import SlotRequest

#: a run's results as a claim reads them: step id -> (status, output JSON text or None)
Results = Mapping[str, tuple[str, str | None]]

log = logging.getLogger("sealflow.engine")


class _PlanNeeded(Exception):
    """Raised inside a claim (rolling it back) when the run's plan is not cached in this process yet."""

    def __init__(self, digest: str):
        super().__init__(digest)
        self.digest = digest


class RunIdentity(Protocol):
    """What deciding where a run's attempt may run reads of the run: its plan and who signed it (a run record, or
    the run about to be written)."""

    @property
    def plan_digest(self) -> str: ...

    @property
    def signer(self) -> str | None: ...


class Claiming:
    """Methods of :class:`~sealflow.engine.engine.Engine` (see this module)."""

    if TYPE_CHECKING:  # what they use of the Engine they are mixed into (engine.py sets them)
        store: Store
        clock: Clock
        services: Services
        outputs: OutputCache
        parents: Parents
        left: dict[str, list[capability.Lack]]
        _plans: dict[str, Plan]
        _steps: dict[str, dict[str, PlanStep]]
        _runs: dict[str, RunRecord]

        @property
        def owner(self) -> str: ...

        @property
        def actor(self) -> str: ...

        @property
        def running_limit(self) -> Callable[[str], int | None] | None: ...

        @property
        def pools(self) -> Mapping[str, int]: ...

        def plan(self, digest: str) -> Plan: ...

    @staticmethod
    def _carried(got: Claimed, run_id: str, step_id: str, attempt: int, token: int) -> Claimed | None:
        """The claim the caller carries (``claimed``), if it is this message's attempt's."""
        att = got.attempt
        if (got.run.id, att.step_id, att.attempt, att.token) != (run_id, step_id, attempt, token + 1):
            log.warning("a carried-on claim of run %s step %r was not handled next; its lease will expire and it "
                        "will be retried", got.run.id, att.step_id)
            return None
        return got

    def _may_carry(self, x: Execution, nxt: NextAttempt | None, inline: bool) -> bool:
        """Whether a commit making ``nxt`` due (``inline``: dispatched with it) may claim it for the caller, who
        asked to carry the run on: it is scheduled now, and neither a bulkhead nor a lock or pool stands in the
        way (those claims wait in line: not here)."""
        if nxt is None or not inline:
            return False
        if nxt.state != "scheduled" or nxt.due_at is not None and nxt.due_at > self.clock.now():
            return False
        ref = StepRef.parse(nxt.step_id)
        if ref.is_compensation:
            return False
        step = self._steps.get(x.run.plan_digest, {}).get(split_step_id(nxt.step_id)[0])
        return step is not None and self.may_claim_at_once(x.plan, step, x.run, nxt.step_id)

    def may_claim_at_once(self, plan: Plan, step: PlanStep, run: RunIdentity, step_id: str) -> bool:
        """Whether this process may claim attempt ``step_id`` (of ``step``) of ``run`` for the thread at hand
        without a message: no bulkhead, lock or pool to wait in line for, and nothing it needs missing here.
        A commit that carries its run on asks it of the next step; ``Runtime.run`` of a new run's first."""
        return self.running_limit is None and not coordination.needs_slots(plan, step) \
            and not capability.step_lacks(self, run, step_id)

    def _leaves(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None) -> bool:
        """Whether this process lacks what the step needs (:mod:`.capability`): then the message is left
        unclaimed, nothing changed, for a process that has it (the outbox row is sent again). Only a message
        the claim would take is left: one naming another tenant, a stale token or an attempt that is not
        claimable goes on to the claim, which refuses it and audits why."""
        run = self._runs.get(run_id)
        if run is None:
            try:
                run = self.store.get_run(run_id)
            except NotFound:
                return False  # the claim refuses it, audited
            if len(self._runs) >= 4096:
                self._runs.clear()
            self._runs[run_id] = run
        missing = capability.step_lacks(self, run, step_id)
        if not missing:
            if self.left:
                self.left.pop(run_id, None)
            return False
        if not self._claimable(run, step_id, attempt, token, tenant):
            return False
        if self.left.get(run_id) != missing:
            log.warning("left step %r (attempt %s) of run %s (%s v%s) for a process that can run it, nothing "
                        "changed: %s", step_id, attempt, run_id, run.workflow, run.workflow_version,
                        "; ".join(capability.describe_lack(*lack) for lack in missing))
            self._record_left(run, step_id, attempt, missing)
        if len(self.left) >= 4096:
            self.left.clear()
        self.left[run_id] = missing
        return True

    def _record_left(self, run: RunRecord, step_id: str, attempt: int, missing: list[capability.Lack]) -> None:
        """Say in the store that this process left the attempt and what it lacks (audited ``step.left``, once
        per process and attempt): ``sealflow status`` and the HTTP API in any process show why the step waits,
        and a ``sealflow run`` waiting for its own run takes the step over when it has what is needed
        (:mod:`sealflow.runtime.driving`). Nothing of the run changes; a store that cannot take the
        event only costs the hint."""
        event = AuditEvent(capability.LEFT_EVENT, step_id, self.actor, run_id=run.id, tenant=run.tenant,
                           detail={"attempt": attempt, "owner": self.owner, "lacks": [list(lack) for lack in missing]})
        try:
            self.store.append_audit(event, self.clock.now())
        except StoreError as exc:
            log.warning("could not record that step %r of run %s was left here: %s", step_id, run.id, exc)

    def _claimable(self, run: RunRecord, step_id: str, attempt: int, token: int, tenant: str | None) -> bool:
        """Whether the claim would take this message (read only when a step is to be left: the rare path)."""
        if tenant is not None and tenant != run.tenant:
            return False
        att = next((a for a in self.store.attempts(run.id) if (a.step_id, a.attempt) == (step_id, attempt)), None)
        return att is not None and att.token == token and att.state in ("scheduled", "waiting")

    def _claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None,
               slot_errors: list[StepError]) -> Claimed:
        """Claim the attempt; the first message of a plan in this process loads the plan outside the claim
        (:meth:`_slots` reads no store inside its transaction) and claims again."""
        try:
            return self._claim_once(run_id, step_id, attempt, token, tenant, slot_errors)
        except _PlanNeeded as need:
            self.plan(need.digest)
            return self._claim_once(run_id, step_id, attempt, token, tenant, slot_errors)

    def _claim_once(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None,
                    slot_errors: list[StepError]) -> Claimed:
        return self.store.claim(run_id, step_id, attempt, token, tenant or "", owner=self.owner,
                                now=self.clock.now(), running_limit=self.running_limit,
                                slots=lambda run, att, results: self._slots(run, att, results, slot_errors),
                                slotless=self._slotless(run_id, step_id))

    def _slotless(self, run_id: str, step_id: str) -> bool:
        """Whether the step a message names surely needs no lock or pool slot (the run and its plan are known
        here: the run as first read, its plan cached), so the store need not ask :meth:`_slots`."""
        run = self._runs.get(run_id)
        if run is None:
            return False
        plan, steps = self._plans.get(run.plan_digest), self._steps.get(run.plan_digest)
        if plan is None or steps is None:
            return False
        step = steps.get(split_step_id(step_id)[0])
        return step is not None and not coordination.needs_slots(plan, step)

    def _slots(self, run: RunRecord, att: AttemptRecord, results: Callable[[], Results],
               errors: list[StepError]) -> tuple[SlotRequest, ...]:
        """Locks and pools (:mod:`sealflow.policy.coordination`): the slots the attempt needs,
        called by the store inside the claim; a failure is noted in ``errors`` (the attempt then fails).
        The plan must be cached already (no store read inside the claim's transaction)."""
        plan, steps = self._plans.get(run.plan_digest), self._steps.get(run.plan_digest)
        if plan is None or steps is None:
            raise _PlanNeeded(run.plan_digest)
        step = steps[split_step_id(att.step_id)[0]]
        if not coordination.needs_slots(plan, step):
            return ()
        seen = results() if run.parent_run_id is None or run.called else {**self.parents.adopt(run), **results()}
        x = Execution(self.services, plan, step, run, att, None, self.clock.now(), results=seen, outputs=self.outputs)
        try:
            return coordination.requests(plan, step, run, att.step_id, x.render, self.pools)
        except StepError as exc:
            errors[:] = [exc]
            return ()
