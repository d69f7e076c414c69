"""The engine: one step message in, one fenced commit out.

For a message ``(run_id, step_id, attempt, token, tenant)``:

1. **claim** (:meth:`Store.claim`, :mod:`.claiming`): compare-and-set on the attempt's token and
   state, and the run's tenant; a stale, duplicate, forged or cross-tenant
   message is refused and audited (``message_refused``) and does nothing else;
   a fresh attempt of a sensitive step is then reauthorised
   (:func:`sealflow.policy.authz.reauthorize`);
2. **execute** the step kind (:mod:`sealflow.steps`) with the expression
   context read from the store; ``when`` false skips it; every failure is
   classified into an error class;
3. **decide** (:mod:`sealflow.engine.decide`) and **commit**: one atomic write fenced
   by the claim's token and the run's revision. On a revision conflict (an
   operator cancelled or approved meanwhile) the engine re-reads the run and
   decides again; on a fencing failure (the lease expired and the attempt was
   handed to another worker, or the run timed out) it gives up: the late
   result changes nothing;
4. return the messages the commit made due, for the caller to enqueue.

Nothing is held in memory between messages except caches (plans by digest,
compiled validators): a crash between any two lines loses nothing the store
does not know how to redo.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sealflow.core import tracebacks
from sealflow.core.clock import Clock
from sealflow.core.errors import StepError
from sealflow.core.ids import StepRef, split_step_id
from sealflow.core.kinds import StepKind, traits_of
from sealflow.core.outcomes import Failed, Outcome, Skipped, Succeeded
from sealflow.core.states import RUN_FINAL
from sealflow.dsl.errors import DslError
from sealflow.dsl.expressions import truthy
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.engine import capability, compensation, fanout, integrity, poison, recovery
from sealflow.engine import decide as flow
from sealflow.engine.claiming import Claiming
from sealflow.engine.committing import commit_retrying, outlast
from sealflow.engine.reads import named_results
from sealflow.execution import breakers
from sealflow.execution.context import Execution, OutputCache, Services
from sealflow.execution.secrets import redact_commit
from sealflow.execution.timeouts import AttemptRunner
from sealflow.policy import authz, budgets, coordination, trustgate
from sealflow.policy.access import AccessProvider, OpenAccess
from sealflow.providers.registry import provider_lookup
from sealflow.steps import EXECUTORS
from sealflow.steps.checks import validation_failure
from sealflow.store.base import AuditEvent, Claimed, Commit, Message, RunRecord, Store
from sealflow.store.errors import ClaimDeferred, FencingError, InvalidOperation, MessageRefused, NotFound
from sealflow.store.records import Committed, LazyResults

log = logging.getLogger("sealflow.engine")

_CANCEL_RECHECK_S = 0.5
#: plans kept in memory at most (each with its step index); past it the cache starts again, so a long-lived
#: worker that meets ever new plans (definitions edited and resubmitted) does not grow without bound
PLANS_MAX = 1024


class Engine(Claiming):
    """Executes step messages against a store. Thread-safe; one per process is enough."""

    def __init__(self, store: Store, registry: Any, providers: Any = None, *, clock: Clock, owner: str,
                 access: AccessProvider | None = None,
                 runner: AttemptRunner | None = None, rng: random.Random | None = None):
        self.store = store
        self.clock = clock
        self.owner = owner
        self.actor = f"worker:{owner}"
        #: who holds which permissions now (reauthorisation before sensitive steps)
        self.access: AccessProvider = access if access is not None else OpenAccess()
        self._plans: dict[str, Plan] = {}
        self._steps: dict[str, dict[str, PlanStep]] = {}
        self.outputs = OutputCache()
        self._cancel_seen: dict[str, tuple[float, bool]] = {}
        #: per thread: ``want`` (the caller carries the run on) and ``claimed`` (the next attempt, claimed)
        self._carry = threading.local()
        self.parents = fanout.Parents(store)  # what a fan-out child sees of its parent run
        #: tenant -> its max_running_steps (bulkhead; None: no tenant has one), set by the runtime
        self.running_limit: Callable[[str], int | None] | None = None
        #: pool name -> limit (step ``concurrency: NAME``), set by the runtime from its configuration
        self.pools: Mapping[str, int] = {}
        #: which signers' definitions this process executes (None: no check, the embedded default)
        self.trust_gate: trustgate.TrustGate | None = None
        #: telemetry hooks (service/telemetry: metrics, traces), set by the runtime; None: nothing is recorded
        self.telemetry: Any = None
        #: adds the deliveries of the approval gate a commit opens (service/notifications), set by the runtime
        self.notifier: Any = None
        self.services = Services(store, registry, provider_lookup(providers), clock, runner or AttemptRunner(),
                                 rng or random.Random(), self.is_cancelled)
        #: run id -> what this process lacks for the step it left unclaimed (engine.capability); drive reads it
        self.left: dict[str, list[capability.Lack]] = {}
        self._runs: dict[str, RunRecord] = {}  # run id -> its record as first read (digest, signer: immutable)

    # -- caches ------------------------------------------------------------------------------------
    def plan(self, digest: str) -> Plan:
        plan = self._plans.get(digest)
        if plan is None:
            plan = integrity.load_plan(self.store, digest)  # PlanTampered: not what its digest says
            self.remember(plan)
        return plan

    def plan_step(self, digest: str, step_id: str) -> PlanStep | None:
        """The step ``step_id`` of plan ``digest`` (None: the plan has no such step)."""
        return self._steps_of(digest).get(step_id)

    def _steps_of(self, digest: str) -> dict[str, PlanStep]:
        steps = self._steps.get(digest)
        if steps is None:  # not read yet, or the cache started again since (PLANS_MAX)
            plan = self.plan(digest)
            steps = self._steps.get(digest) or plan.step_map()
        return steps

    def remember(self, plan: Plan) -> None:
        if plan.digest and plan.digest not in self._plans:
            if len(self._plans) >= PLANS_MAX:  # new dicts, not cleared ones: a reader holding the old keeps it
                self._plans, self._steps = {}, {}
            self._steps[plan.digest] = plan.step_map()
            self._plans[plan.digest] = plan

    def is_cancelled(self, run_id: str) -> bool:
        """Whether the run is being cancelled; read from the store at most every 0.5 s per run."""
        now = time.monotonic()
        seen = self._cancel_seen.get(run_id)
        if seen is not None and (seen[1] or now - seen[0] < _CANCEL_RECHECK_S):
            return seen[1]
        try:
            state = self.store.get_run(run_id).state
        except NotFound:
            state = "cancelled"
        flag = state in ("cancelling", "cancelled")
        self._cancel_seen[run_id] = (now, flag)
        return flag

    def note_cancelled(self, run_id: str) -> None:
        self._cancel_seen[run_id] = (time.monotonic(), True)

    def execution(self, run: RunRecord, attempt, results, *, resumed: bool) -> Execution:
        plan = self.plan(run.plan_digest)
        base, gate = split_step_id(attempt.step_id)
        step = self._steps_of(run.plan_digest)[base]
        if isinstance(results, LazyResults):  # not read yet: read only the results the step can name
            results.narrow(named_results(plan, step))
        if run.parent_run_id is not None:  # a fan-out child: see the parent's steps, spend the parent's budget
            results = self.parents.child_view(run, plan, results)
        return Execution(self.services, plan, step, run, attempt, None, self.clock.now(), resumed=resumed, gate=gate,
                         results=results, outputs=self.outputs)

    # -- the message path --------------------------------------------------------------------------
    def handle(self, run_id: str, step_id: str, attempt: int, token: int,
               tenant: str | None = None, *, carry: bool = False) -> tuple[Message, ...]:
        """Process one step message; return the messages now due (to enqueue). A message must name
        the run's tenant ("" when it names none, which the claim refuses).

        ``carry``: the caller goes on with the run's next step itself (in this thread) when it is the one
        message returned; the commit then claims it in the same transaction, and the caller's next ``handle``
        of that message uses the claim instead of making another (see :meth:`_carried`). A caller that passes
        ``carry`` must handle such a message next, in this thread."""
        slot_errors: list[StepError] = []
        began = time.monotonic()
        claimed = self._carried(run_id, step_id, attempt, token)
        try:
            if claimed is None and self._leaves(run_id, step_id, attempt, token, tenant):
                return ()  # (a carried claim is never made for a step this process lacks: _may_carry)
            if claimed is None:  # (the first message of a plan here loads it outside the claim: .claiming)
                claimed = self._claim(run_id, step_id, attempt, token, tenant, slot_errors)
        except integrity.PlanTampered as exc:  # refused once: the run fails into the dead letters (.integrity)
            done, run = integrity.refuse(self.store, self.clock, exc, run_id, step_id, attempt, token, tenant,
                                         owner=self.owner, actor=self.actor, running_limit=self.running_limit)
            return self._done(run_id, done, created_at=run.created_at if run is not None else None)
        except MessageRefused as exc:
            log.info("%s", exc)
            self.telemetry and self.telemetry.refused(exc.reason)
            return ()
        except ClaimDeferred as exc:  # a bulkhead, lock or pool is full: the message comes back later
            log.debug("%s", exc)
            self.telemetry and self.telemetry.deferred(exc)
            return ()
        self._carry.want = carry
        try:
            return self._handle_claimed(claimed, step_id, slot_errors, began)
        finally:
            self._carry.want = False

    def _handle_claimed(self, claimed: Claimed, step_id: str, slot_errors: list[StepError],
                        began: float) -> tuple[Message, ...]:
        if StepRef.parse(step_id).is_compensation:
            return self.compensate(claimed)
        x = self.execution(claimed.run, claimed.attempt, claimed.results, resumed=claimed.resumed)
        x.fencing_token = coordination.fencing_token(claimed.grants)
        refused = fanout.trusted(self.trust_gate, self.store, self.plan, x) or self.over_budget(x) \
            or authz.reauthorize(self.access, x)
        if slot_errors and refused is None:  # a lock template failed, or a pool has no limit: not started
            refused = Failed(slot_errors[0].error_class, slot_errors[0].message)
        # an attempt lost before runs again, unless it is poison or its outcome a person's call (engine.poison);
        # the step's circuit breaker, if it names one: an open breaker fails the attempt without running it
        if self.telemetry is not None:  # a span per attempt, metrics and log context (service/telemetry)
            return self.telemetry.attempt(x, refused, lambda: self._run_attempt(x, refused, claimed.resumed), began)
        return self._run_attempt(x, refused, claimed.resumed)[1]

    def _run_attempt(self, x: Execution, refused: Failed | None, resumed: bool) -> tuple[Outcome, tuple[Message, ...]]:
        outcome = refused or poison.lost(x) or budgets.after(x, poison.after_crash(
            x, breakers.guarded(x, self.execute)))
        counts = not resumed and refused is None and not isinstance(outcome, Skipped)
        return outcome, self.commit(x, outcome, actor=self.actor, counts_step=counts)

    @staticmethod
    def over_budget(x: Execution) -> Failed | None:
        """Why the claimed attempt must not start (it is not run): the run is being cancelled, or it
        would exceed a budget (:func:`sealflow.policy.budgets.before`)."""
        if x.run.state == "cancelling":
            return Failed("cancelled", f"the run is being cancelled; step {x.step.id!r} did not start")
        return budgets.before(x)

    def execute(self, x: Execution) -> Outcome:
        step = x.step
        kind = StepKind.APPROVAL if x.gate else step.kind
        try:
            if not x.resumed and not x.gate and step.when is not None and "fanout" not in x.attempt.data \
                    and not truthy(x.evaluate(step.when)):  # (a fan-out deciding over its children: it ran)
                return Skipped(flow.skip_target(step))
            outcome = EXECUTORS[kind](x)
            if isinstance(outcome, Succeeded) and traits_of(kind).calls_out and step.validations:
                failed = validation_failure(x, outcome.output)
                if failed is not None:
                    failed.tokens, failed.cost_usd, failed.tool_calls = \
                        outcome.tokens, outcome.cost_usd, outcome.tool_calls
                    failed.ledger_key, failed.ledger_output = outcome.ledger_key, outcome.output
                    return failed
            return outcome
        except DslError as exc:
            return Failed("invalid_request", f"an expression of step {step.id!r} failed: {exc}")
        except StepError as exc:
            return Failed(exc.error_class, exc.message, exc.retry_after)
        except Exception as exc:  # noqa: BLE001 - a bug must fail the step, not the worker
            log.exception("engine error in step %r of run %s", step.id, x.run.id)
            return Failed("internal", f"engine error in step {step.id!r}: {type(exc).__name__}: {exc}",
                          trace=tracebacks.capture(exc).text)

    def commit(self, x: Execution, outcome: Outcome, *, actor: str, counts_step: bool) -> tuple[Message, ...]:
        """Decide and commit, re-deciding after a revision conflict; a fenced-off commit does nothing."""
        tries = 0

        def amendments(step, nxt, inline: bool, expected_rev: int) -> dict:
            """What the engine adds to the store's part of the commit (every key, so that it replaces)."""
            a = x.attempt
            carry = self._may_carry(x, nxt, inline)
            return {"holds_slots": coordination.needs_slots(x.plan, x.step),
                    "holds_reservation": traits_of(x.step.kind).reserves_budget,
                    "claim_as": self.owner if carry else None, "carry_from": x.run if carry else None,
                    # written on this view, checked by the store (Commit.seen); after a conflict, read first
                    "seen": (x.run.state, x.run.tenant, x.run.parent_run_id, a.state)
                    if tries == 1 and step is not None and (step.step_id, step.attempt, step.token) == (
                        a.step_id, a.attempt, a.token) and expected_rev == x.run.rev else None}

        def build() -> Commit:
            nonlocal tries
            tries += 1
            commit = flow.decide(x, outcome, actor=actor, counts_step=counts_step, amend=amendments)
            final = redact_commit(fanout.undo_completed(x, compensation.amend(x, commit)))
            if final is not commit:  # undoing, compensating or redacting changed it: amended again, on what it is
                final = dataclasses.replace(final, **amendments(final.step, final.next, final.dispatch_inline,
                                                                final.expected_rev))
            return self._notified(x, final)

        def conflict() -> None:
            x.run = self.store.get_run(x.run.id)
            if x.run.state == "cancelling":
                self.note_cancelled(x.run.id)

        return self._done(x.run.id, commit_retrying(
            self.store, self.clock, build, conflict=conflict,
            fenced=lambda exc: self._fenced(exc, x, actor, {"outcome": type(outcome).__name__}),
            illegal=lambda exc: log.error("%s", exc),
            unavailable=outlast(self.clock, x.attempt.lease_expires, f"step {x.step_id!r} of run {x.run.id}"),
            gave_up=f"run {x.run.id} kept changing while step {x.step_id!r} committed; try again"),
            created_at=x.run.created_at)

    def _notified(self, x: Execution, commit: Commit) -> Commit:
        """``commit`` with the notifications of the gate it opens; a failure to build them never fails the step."""
        if self.notifier is None:
            return commit
        try:
            return self.notifier.amend(x.run, x.attempt.data, commit, x.now)
        except Exception:  # noqa: BLE001 - a notification is never worth a run
            log.exception("the approval notifications of run %s could not be built; the gate opens without them",
                          x.run.id)
            return commit

    def hand_over(self, claimed: Claimed) -> None:
        """Give this thread an attempt claimed for it elsewhere (a run's first, in its submit: service/inline.py),
        to be handled next as the claim a carrying commit makes (:meth:`handle` of its message)."""
        self._carry.claimed = claimed

    def last_state(self, run_id: str) -> str | None:
        """The state this thread's last commit left ``run_id`` in (None: its last commit was another run's)."""
        last = getattr(self._carry, "last", None)
        return last[1] if last is not None and last[0] == run_id else None

    def _done(self, run_id: str, done: Committed | None, *, created_at: float | None = None) -> tuple[Message, ...]:
        if done is None:
            return ()
        self._carry.last = (run_id, done.run_state)
        if done.claimed is not None:
            self._carry.claimed = done.claimed
        if done.run_state in RUN_FINAL:
            self.outputs.forget(run_id)
            self.telemetry and self.telemetry.run_done(run_id, done.run_state, created_at)
        return done.messages

    def _fenced(self, exc: FencingError, x: Execution, actor: str, detail: dict | None = None) -> None:
        """A late result (the lease expired and the attempt moved on, or the run timed out): audited only."""
        log.warning("%s", exc)
        self.store.append_audit(AuditEvent(
            "commit_fenced", x.step_id, actor, run_id=x.run.id,
            detail={"attempt": x.attempt.attempt, "token": x.attempt.token, **(detail or {})}), self.clock.now())

    # -- compensation and repair -------------------------------------------------------------------
    def compensate(self, claimed: Claimed) -> tuple[Message, ...]:
        """Run one claimed ``<step>@compensate`` attempt (:mod:`.compensation`) and commit its result."""
        run, att = claimed.run, claimed.attempt
        plan = self.plan(run.plan_digest)
        step = plan.step(StepRef.parse(att.step_id).step)
        results = claimed.results
        if run.parent_run_id is not None:  # a fan-out child undoing its steps sees the parent's too
            results = {**self.parents.adopt(run), **results}
        x = Execution(self.services, plan, step, run, att, None, self.clock.now(), results=results,
                      outputs=self.outputs)
        outcome = poison.lost(x) or poison.after_crash(x, compensation.execute(x))

        def conflict() -> None:
            x.run = self.store.get_run(run.id)

        done = commit_retrying(
            self.store, self.clock, lambda: redact_commit(compensation.decide(x, outcome, actor=self.actor)),
            conflict=conflict, fenced=lambda exc: self._fenced(exc, x, self.actor),
            gave_up=f"run {run.id} kept changing while {x.step_id!r} committed; try again")
        return () if done is None else done.messages

    def repair(self, run_id: str) -> tuple[Message, ...]:
        """Decide again from the run's latest finished attempt (or schedule its start if it has none):
        the safety net of :mod:`.recovery` for an active run without an active attempt."""
        store = self.store
        run = store.get_run(run_id)
        plan = self.plan(run.plan_digest)
        attempts = store.attempts(run_id)
        store.append_audit(AuditEvent("run_repaired", None, "recovery", run_id=run_id,
                                      detail={"state": run.state, "attempts": len(attempts)}), self.clock.now())
        if not attempts:
            return store.commit(recovery.start_commit(run, plan, self.clock.now()), self.clock.now()).messages
        last = recovery.last_finished(attempts)
        outcome = recovery.outcome_of(last, plan.step(split_step_id(last.step_id)[0]))
        if not recovery.may_decide_again(run, last, outcome):
            return ()
        x = self.execution(run, last, store.results(run_id), resumed=False)
        return self.commit(x, outcome, actor="recovery", counts_step=False)

    # -- human decisions on a waiting attempt ------------------------------------------------------
    def resolve(self, run_id: str, step_id: str | None, decide: Callable[[Execution], Outcome], *,
                actor: str, lost: bool = False) -> tuple[Message, ...]:
        """Apply an approval or rejection to the run's waiting approval (fenced, re-read on conflict); with
        ``lost``, a person's decision on a lost attempt whose outcome is unknown (engine.poison)."""
        what = "decision on a lost attempt" if lost else "approval"

        def build() -> Commit:
            run = self.store.get_run(run_id)
            att = self.store.active_attempt(run_id)
            if att is None or att.state != "waiting":
                raise InvalidOperation(f"run {run_id} has no {what} waiting (it is {run.state}); see "
                                       f"`sealflow status {run_id}`")
            base = split_step_id(att.step_id)[0]
            if step_id is not None and step_id not in (att.step_id, base):
                raise InvalidOperation(f"run {run_id} is waiting at step {att.step_id!r}, not {step_id!r}")
            x = self.execution(run, att, self.store.results(run_id), resumed=False)
            poison.check_waits_for(x, lost=lost)
            decided = decide(x)  # an outcome, or (outcome, audit events of the decision)
            outcome, events = decided if isinstance(decided, tuple) else (decided, ())
            commit = flow.decide(x, outcome, actor=actor, counts_step=False)
            if events:
                commit = dataclasses.replace(commit, audit=commit.audit + tuple(events))
            return self._notified(x, redact_commit(compensation.amend(x, commit)))

        def fenced(exc: FencingError) -> None:
            raise InvalidOperation(f"the {what} of run {run_id} moved on meanwhile (timed out or decided); "
                                   f"see `sealflow status {run_id}`") from None

        return self._done(run_id, commit_retrying(self.store, self.clock, build, fenced=fenced,
                                                  gave_up=f"run {run_id} kept changing; try again"))
