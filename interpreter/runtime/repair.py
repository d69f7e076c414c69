"""Finding runs in flight again after a crash, and the dead-letter list (list, show, redrive)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dramatiq.brokers.stub import StubBroker

from sealflow.core.ids import split_step_id
from sealflow.engine import compensation, recovery
from sealflow.engine.decide import lease_ms
from sealflow.policy.operations import Operation, may, visible_runs
from sealflow.runtime import dlq, readiness
from sealflow.runtime.status import RunStatus
from sealflow.steps import approval
from sealflow.store.base import (
    DeadLetterRecord,
    NextAttempt,
)
from sealflow.store.errors import PlanTampered

if TYPE_CHECKING:
    import dramatiq

    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.policy.access import AccessProvider
    from sealflow.runtime.dispatcher import Dispatcher
    from sealflow.runtime.sweeper import Sweeper
    from sealflow.store.base import Message, RunRecord, Store


class Repair:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see its module); they use its store,
    engine, broker and clock."""

    if TYPE_CHECKING:  # the facade's (runtime/facade.py), which these methods use
        store: Store
        engine: Engine
        broker: dramatiq.Broker
        access: AccessProvider
        clock: Clock
        owner: str
        dispatcher: Dispatcher
        sweeper: Sweeper
        _dispatch_reset: bool

        def status(self, run_id: str, *, tenant: str | None = None, actor: str | None = None,
                   children_offset: int = 0) -> RunStatus: ...
        def send(self, message: Message, priority: str | None = None) -> None: ...
        def _scoped(self, run_id: str, tenant: str | None, actor: str | None,
                    operation: Operation) -> RunRecord: ...

    def recover(self, *, actor: str | None = None, tenant: str | None = None,
                leave_unready: bool = False) -> dict[str, Any]:
        """Find runs in flight and drive them on (see :mod:`sealflow.engine.recovery`). The
        report's run ids are those ``actor`` may read in ``tenant`` (an operator: every tenant's; no actor,
        trusted code: all, narrowed to ``tenant`` if given); the counts are the store's. With ``leave_unready``
        (an operator's ``sealflow recover``), a process that would execute runs in flight it lacks the actions,
        models, secrets or trust policy for recovers the others and leaves those as they are (no repair; their
        steps are left unclaimed for a process that has what they need, :mod:`.capability`): ``runs_left``
        names each one the caller may read with what it lacks and how to provide it, ``runs_left_unreadable``
        counts the others and ``lacks_unreadable`` says what they lack
        (:func:`~sealflow.runtime.readiness.unready`).

        A run whose stored plan is not what its digest says (:mod:`sealflow.engine.integrity`) never
        stops the recovery of the others: it is not repaired from that plan, its due step is refused by the
        engine as anywhere (the run fails into the dead-letter list), and, with ``leave_unready``,
        ``runs_refused`` names each one the caller may read (``run_id``, ``workflow``, ``version``, ``plan``,
        ``reason``, ``how``) and ``runs_refused_unreadable`` counts the others."""
        def visible(run_ids: list[str]) -> list[str]:
            return visible_runs(self.store, self.access, run_ids, tenant=tenant, actor=actor)

        left: list[dict[str, Any]] = []
        hidden: list[tuple[str, str]] = []
        unready: set[str] = set()
        tampered: dict[str, tuple[RunRecord, PlanTampered]] = {}  # run id -> (its record, PlanTampered)
        if leave_unready:
            active = self.store.active_runs()
            for run_id in active:
                run = self.store.get_run(run_id)
                refusal = readiness.plan_refusal(self, run)
                if refusal is not None:
                    tampered[run_id] = (run, refusal)
            trusted = [r for r in active if r not in tampered]
            left, hidden, unready = readiness.unready(self, trusted, visible(trusted))
        expired = recovery.expire_dead_owners(self.store, self.clock.now(), self.owner)
        reset = 0
        if isinstance(self.broker, StubBroker) and not self._dispatch_reset:
            reset = self.store.reset_dispatch()
            self._dispatch_reset = True
        report = self.sweeper.sweep()
        repaired = []
        for run_id in self.store.stalled_runs():
            if run_id in unready or run_id in tampered:
                continue  # left as it is for a process that can continue it; never repaired from a tampered plan
            try:
                messages = self.engine.repair(run_id)
            except PlanTampered as exc:  # (found here when not looked for above)
                tampered[run_id] = (self.store.get_run(run_id), exc)
                continue
            for message in messages:
                self.send(message)
            repaired.append(run_id)
        sent = self.dispatcher.flush()
        shown = set(visible(list(tampered)))
        refused = [readiness.refused_entry(run, exc) for run_id, (run, exc) in tampered.items() if run_id in shown]
        return {"leases_of_dead_workers": expired, "messages_resent": reset, "leases_expired": report.leases_expired,
                "timers_fired": report.timers_fired, "runs_timed_out": report.runs_timed_out,
                "runs_repaired": visible(repaired), "dispatched": sent,
                "runs_in_flight": visible(self.store.active_runs()), "runs_left": left,
                "runs_left_unreadable": len(unready) - len(left),
                "lacks_unreadable": [list(lack) for lack in hidden], "runs_refused": refused,
                "runs_refused_unreadable": len(tampered) - len(refused)}

    # -- dead letters and audit --------------------------------------------------------------------
    def dlq_list(self, *, tenant: str | None = None, actor: str | None = None) -> list[DeadLetterRecord]:
        """The dead letters ``actor`` may read (``dlq:read``) in ``tenant`` (None: every tenant, trusted code)."""
        letters = self.store.dead_letters()
        if tenant is None and actor is None:
            return letters
        keep = set(visible_runs(self.store, self.access, list(dict.fromkeys(d.run_id for d in letters)), tenant=tenant,
                                actor=actor, operation=Operation.DLQ_READ))
        return [d for d in letters if d.run_id in keep]

    def dlq_show(self, run_id: str, *, tenant: str | None = None, actor: str | None = None) -> dict[str, Any]:
        """A dead letter with its run, its failed attempts and the end of its audit trail (``dlq:read``; the
        audit events only with ``audit:read`` too, the attempts' tracebacks only with ``runs:read``)."""
        run = self._scoped(run_id, tenant, actor, Operation.DLQ_READ)
        shown = dlq.show(self.store, run_id)
        if actor is not None and not may(self.access, run, actor, Operation.AUDIT_READ):
            shown["audit"] = None  # reading dead letters is not reading audit trails
        if actor is not None and not may(self.access, run, actor, Operation.READ):
            for attempt in shown["failed_attempts"]:  # nor reading the run's code paths
                attempt["error_trace"] = None
        return shown

    def dlq_redrive(self, run_id: str, *, actor: str | None = None, tenant: str | None = None) -> RunStatus:
        """Rerun the failed step of a dead-lettered run, on the run's original plan digest (``dlq:redrive``)."""
        run = self._scoped(run_id, tenant, actor, Operation.REDRIVE)
        actor = actor or "operator"
        compensation.check_redrive(run)
        readiness.require_trusted(self, run_id, "redrive")  # PlanTampered: its plan is not what its digest says
        readiness.require_ready(self, run_id, "redrive")
        plan = self.engine.plan(run.plan_digest)
        step_id = run.cursor_step or plan.start
        base, gate = split_step_id(step_id)
        step = plan.step(base)
        now = self.clock.now()
        if gate:
            cursor = next(a for a in reversed(self.store.attempts(run_id)) if a.step_id == step_id)
            x = self.engine.execution(run, cursor, self.store.results(run_id), resumed=False)
            assert step.gate is not None  # (a gate's step id names a step that has one)
            data = approval.opening(x, step.gate, now)
            data["then"] = cursor.data.get("then")
            nxt = NextAttempt(step_id, 1, "waiting", now + step.gate.timeout_ms / 1000.0, lease_ms(step),
                              "approval_timeout", data)
        else:
            nxt = NextAttempt(step_id, 1, "scheduled", now, lease_ms(step))
        budget = plan.budget.max_runtime_ms
        self.store.redrive(run_id, nxt, now, actor=actor, deadline=None if budget is None else now + budget / 1000.0)
        return self.status(run_id)
