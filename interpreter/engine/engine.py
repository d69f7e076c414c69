"""The engine: one step message in, one fenced commit out, and what it came to returned.

For a message ``(run_id, step_id, attempt, token, tenant)``, :meth:`Engine.handle` (the one step path: the step
actor's dispatched and carried messages, ``Runtime.run``'s inline first step and a worker's takeovers all call
it, and only it):

1. **claim** (:meth:`Store.claim`, :mod:`.claiming`): compare-and-set on the attempt's token and
   state, and the run's tenant; a stale, duplicate, forged or cross-tenant
   message is refused and audited (``message_refused``) and does nothing else
   (or the claim the caller carries, made by the commit before: ``claimed``);
2. **gate** the attempt: the ``before_execute`` hooks (:mod:`.hooks`, :mod:`.gates`: the trust gate, budgets,
   reauthorisation of a sensitive step) may refuse it, and then it does not run;
3. **execute** the step kind (:mod:`sealflow.steps`) with the expression
   context read from the store, inside the ``around_execute`` hooks (a circuit breaker); ``when`` false skips
   it; every failure is classified into an error class; the ``after_execute`` hooks amend the outcome
   (budgets charged);
4. **decide** (:mod:`sealflow.engine.decide`) and **commit**: one atomic write fenced
   by the claim's token and the run's revision (the ``before_commit`` hooks amend it: notifications). On a
   revision conflict (an operator cancelled or approved meanwhile) the engine re-reads the run and
   decides again; on a fencing failure (the lease expired and the attempt was
   handed to another worker, or the run timed out) it gives up: the late
   result changes nothing;
5. return what it came to (:class:`Handled`): the messages the commit made due, for the caller to enqueue, the
   state it left the run in, and the run's next attempt when the commit claimed it for the caller (``carry``).

Nothing is held in memory between messages except caches (plans by digest,
compiled validators), and nothing is left behind for the caller in a thread-local: a crash between any two
lines loses nothing the store does not know how to redo.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
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
from sealflow.engine import capability, compensation, fanout, gates, hooks, integrity, poison, recovery
from sealflow.engine import decide as flow
from sealflow.engine.claiming import Claiming, Results
from sealflow.engine.committing import commit_retrying, outlast
from sealflow.engine.hooks import EngineConfig, EngineHooks
from sealflow.engine.reads import named_results
from sealflow.execution.context import Execution, OutputCache, Services
from sealflow.execution.secrets import redact_commit
from sealflow.execution.timeouts import AttemptRunner
from sealflow.policy import coordination, trustgate
from sealflow.policy.access import AccessProvider
from sealflow.providers.registry import provider_lookup
from sealflow.steps import EXECUTORS
from sealflow.steps.checks import validation_failure
from sealflow.store.base import (
    AttemptRecord,
    AuditEvent,
    Claimed,
    Commit,
    Message,
    NextAttempt,
    RunRecord,
    StepChange,
    Store,
)
from sealflow.store.capabilities import Capabilities
from sealflow.store.errors import (
    ClaimDeferred,
    FencingError,
    InvalidOperation,
    MessageRefused,
    NotFound,
    PlanTampered,
    StoreUnavailable,
)
from sealflow.store.records import Committed, LazyResults

log = logging.getLogger("sealflow.engine")

_CANCEL_RECHECK_S = 0.5
#: plans kept in memory at most (each with its step index); past it the cache starts again, so a long-lived
#: worker that meets ever new plans (definitions edited and resubmitted) does not grow without bound
PLANS_MAX = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Handled:
    """What one step message came to (:meth:`Engine.handle`): returned, never left behind for the caller."""

    #: the messages the commit made due, to enqueue (or to carry on with: ``claimed``)
    messages: tuple[Message, ...] = ()
    #: the run's next attempt, claimed for the caller by the commit (``carry``): the caller handles that one
    #: message next, passing this as ``claimed``
    claimed: Claimed | None = None
    #: the state the commit left the run in (None: nothing was committed)
    run_state: str | None = None


#: a message that committed nothing (refused, deferred, left, fenced off)
NOTHING = Handled()


class Engine(Claiming):
    """Executes step messages against a store. Thread-safe; one per process is enough. Built whole: everything
    it reads is in its :class:`~sealflow.engine.hooks.EngineConfig`, nothing is assigned to it later."""

    def __init__(self, store: Store, config: EngineConfig, *, registry: Any = None, providers: Any = None,
                 clock: Clock, runner: AttemptRunner | None = None, rng: random.Random | None = None,
                 capabilities: Capabilities | None = None):
        self.store = store
        self.clock = clock
        self.config = config
        self._plans: dict[str, Plan] = {}
        self._steps: dict[str, dict[str, PlanStep]] = {}
        self.outputs = OutputCache()
        self._cancel_seen: dict[str, tuple[float, bool]] = {}
        self.parents = fanout.Parents(store)  # what a fan-out child sees of its parent run
        self.services = Services(store, registry, provider_lookup(providers), clock, runner or AttemptRunner(),
                                 rng or random.Random(), self.is_cancelled, config=config.settings,
                                 capabilities=capabilities if capabilities is not None else Capabilities.of(store),
                                 access=config.access)
        #: run id -> what this process lacks for the step it left unclaimed (engine.capability); drive reads it
        self.left: dict[str, list[capability.Lack]] = {}
        self._runs: dict[str, RunRecord] = {}  # run id -> its record as first read (digest, signer: immutable)
        # the engine's own gates first (engine.gates), then the configuration's middleware, in order
        own: list[EngineHooks] = [] if config.trust_gate is None else [gates.TrustHook(config.trust_gate, store,
                                                                                         self.plan)]
        own += [gates.BudgetHook(self.plan), gates.AccessHook(config.access), gates.BreakerHook()]
        self.hooks: tuple[EngineHooks, ...] = (*own, *config.hooks)
        self._on_refused = hooks.overrides(self.hooks, "claim_refused")
        self._on_deferred = hooks.overrides(self.hooks, "claim_deferred")
        self._before_execute = hooks.overrides(self.hooks, "before_execute")
        self._around_attempt = hooks.overrides(self.hooks, "around_attempt")
        self._around_execute = hooks.overrides(self.hooks, "around_execute")
        self._after_execute = hooks.overrides(self.hooks, "after_execute")
        self._before_commit = hooks.overrides(self.hooks, "before_commit")
        self._run_ended = hooks.overrides(self.hooks, "run_ended")

    # -- the configuration (read only) -------------------------------------------------------------
    @property
    def owner(self) -> str:
        return self.config.owner

    @property
    def actor(self) -> str:
        return self.config.actor

    @property
    def access(self) -> AccessProvider:
        return self.config.access

    @property
    def trust_gate(self) -> trustgate.TrustGate | None:
        return self.config.trust_gate

    @property
    def running_limit(self) -> Callable[[str], int | None] | None:
        return self.config.running_limit

    @property
    def pools(self) -> Mapping[str, int]:
        return self.config.pools

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

    def execution(self, run: RunRecord, attempt: AttemptRecord, results: Results, *, resumed: bool) -> Execution:
        plan = self.plan(run.plan_digest)
        base, gate = split_step_id(attempt.step_id)
        step = self._steps_of(run.plan_digest)[base]
        if isinstance(results, LazyResults):  # not read yet: read only the results the step can name
            results.narrow(named_results(plan, step))
        if run.parent_run_id is not None and not run.called:  # a fan-out child: the parent's steps and budget
            results = self.parents.child_view(run, plan, results)
        return Execution(self.services, plan, step, run, attempt, None, self.clock.now(), resumed=resumed, gate=gate,
                         results=results, outputs=self.outputs)

    # -- the message path --------------------------------------------------------------------------
    def handle(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None = None, *,
               carry: bool = False, claimed: Claimed | None = None) -> Handled:
        """Process one step message; return what it came to: the messages now due (to enqueue), the state the
        commit left the run in, and the run's next attempt when the commit claimed it for the caller. A message
        must name the run's tenant ("" when it names none, which the claim refuses).

        ``carry``: the caller goes on with the run's next step itself when it is the one message returned; the
        commit then claims it in the same transaction (``Handled.claimed``). ``claimed``: that claim (or a run's
        first attempt, claimed in its submit: runtime/inline.py), handed back with its message: it is used
        instead of claiming the attempt again."""
        slot_errors: list[StepError] = []
        began = time.monotonic()
        if claimed is not None:
            claimed = self._carried(claimed, run_id, step_id, attempt, token)
        try:
            if claimed is None and self._leaves(run_id, step_id, attempt, token, tenant):
                return NOTHING  # (a carried claim is never made for a step this process lacks: _may_carry)
            if claimed is None:  # (the first message of a plan here loads it outside the claim: .claiming)
                claimed = self._claim(run_id, step_id, attempt, token, tenant, slot_errors)
        except PlanTampered as exc:  # refused once: the run fails into the dead letters (.integrity)
            done, run = integrity.refuse(self.store, self.clock, exc, run_id, step_id, attempt, token, tenant,
                                         owner=self.owner, actor=self.actor, running_limit=self.running_limit)
            return self._done(run_id, done, created_at=run.created_at if run is not None else None)
        except MessageRefused as exc:
            log.info("%s", exc)
            self.claim_refused(exc.reason)
            return NOTHING
        except ClaimDeferred as exc:  # a bulkhead, lock or pool is full: the message comes back later
            log.debug("%s", exc)
            for hook in self._on_deferred:
                hooks.observed(hook, "claim_deferred", functools.partial(hook.claim_deferred, exc))
            return NOTHING
        if StepRef.parse(step_id).is_compensation:
            return self.compensate(claimed)
        x = self.execution(claimed.run, claimed.attempt, claimed.results, resumed=claimed.resumed)
        x.fencing_token = coordination.fencing_token(claimed.grants)
        refused = None
        for hook in self._before_execute:  # the trust gate, budgets, reauthorisation (engine.gates), ...
            refused = hook.before_execute(x) if hook.gating else \
                hooks.observed(hook, "before_execute", functools.partial(hook.before_execute, x))
            if refused is not None:
                break
        if slot_errors and refused is None:  # a lock template failed, or a pool has no limit: not started
            refused = Failed(slot_errors[0].error_class, slot_errors[0].message)
        resumed = claimed.resumed

        def proceed() -> tuple[Outcome, Handled]:
            return self._run_attempt(x, refused, resumed, carry)

        for hook in reversed(self._around_attempt):  # the first hook outermost: a span, the log context, metrics
            proceed = hooks.wrap(hook, "around_attempt", functools.partial(hook.around_attempt, x, refused, began),
                                 proceed)
        return proceed()[1]

    def claim_refused(self, reason: str) -> None:
        """Tell the hooks a message was refused before anything ran (the step actor's malformed ones too)."""
        for hook in self._on_refused:
            hooks.observed(hook, "claim_refused", functools.partial(hook.claim_refused, reason))

    def _run_attempt(self, x: Execution, refused: Failed | None, resumed: bool,
                     carry: bool) -> tuple[Outcome, Handled]:
        # an attempt lost before runs again, unless it is poison or its outcome a person's call (engine.poison);
        # an isolated child's death is judged the same way (poison.after_crash)
        outcome = refused or poison.lost(x)
        if outcome is None:
            outcome = poison.after_crash(x, self._execute_hooked(x))
            for hook in self._after_execute:  # budgets charged
                outcome = hook.after_execute(x, outcome) if hook.gating else \
                    hooks.observed(hook, "after_execute", functools.partial(hook.after_execute, x, outcome), outcome)
        counts = not resumed and refused is None and not isinstance(outcome, Skipped)
        return outcome, self._commit(x, outcome, actor=self.actor, counts_step=counts, carry=carry)

    def _execute_hooked(self, x: Execution) -> Outcome:
        """:meth:`execute` inside the ``around_execute`` hooks (the step's circuit breaker), the first outermost."""
        around = self._around_execute
        if not around:
            return self.execute(x)
        if len(around) == 1 and around[0].gating:  # (the usual: the engine's circuit breakers alone)
            return around[0].around_execute(x, self.execute)

        def call() -> Outcome:
            return self.execute(x)

        for hook in reversed(around):
            def call_hook(p: Callable[[], Outcome], h: EngineHooks = hook) -> Outcome:
                return h.around_execute(x, lambda _x: p())

            call = hooks.wrap(hook, "around_execute", call_hook, call)
        return call()

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
        except StoreUnavailable:
            # the store went away under the step's own reads (a server restarting): the worker's outage, not the
            # step's failure; the attempt stays claimed and runs again when its lease ends, as after a crash
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must fail the step, not the worker
            log.exception("engine error in step %r of run %s", step.id, x.run.id)
            return Failed("internal", f"engine error in step {step.id!r}: {type(exc).__name__}: {exc}",
                          trace=tracebacks.capture(exc).text)

    def commit(self, x: Execution, outcome: Outcome, *, actor: str, counts_step: bool) -> tuple[Message, ...]:
        """Decide and commit, re-deciding after a revision conflict; a fenced-off commit does nothing. The
        messages the commit made due."""
        return self._commit(x, outcome, actor=actor, counts_step=counts_step).messages

    def _commit(self, x: Execution, outcome: Outcome, *, actor: str, counts_step: bool,
                carry: bool = False) -> Handled:
        tries = 0

        def amendments(step: StepChange | None, nxt: NextAttempt | None, inline: bool,
                       expected_rev: int) -> dict[str, Any]:
            """What the engine adds to the store's part of the commit (every key, so that it replaces)."""
            a = x.attempt
            carried = carry and self._may_carry(x, nxt, inline)
            return {"holds_slots": coordination.needs_slots(x.plan, x.step),
                    "holds_reservation": traits_of(x.step.kind).reserves_budget,
                    "claim_as": self.owner if carried else None, "carry_from": x.run if carried else None,
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
            return self._amended(x, final)

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

    def _amended(self, x: Execution, commit: Commit) -> Commit:
        """``commit`` as the ``before_commit`` hooks amend it (the notifications of the gate it opens); an
        observer that fails leaves it as it was."""
        for hook in self._before_commit:
            commit = hooks.observed(hook, "before_commit", functools.partial(hook.before_commit, x, commit), commit)
        return commit

    def _done(self, run_id: str, done: Committed | None, *, created_at: float | None = None) -> Handled:
        if done is None:
            return NOTHING
        state = done.run_state
        if state in RUN_FINAL:
            self.outputs.forget(run_id)
            for hook in self._run_ended:
                hooks.observed(hook, "run_ended", functools.partial(hook.run_ended, run_id, state, created_at))
        return Handled(done.messages, done.claimed, state)

    def _fenced(self, exc: FencingError, x: Execution, actor: str, detail: dict[str, Any] | None = None) -> None:
        """A late result (the lease expired and the attempt moved on, or the run timed out): audited only."""
        log.warning("%s", exc)
        self.store.append_audit(AuditEvent(
            "commit_fenced", x.step_id, actor, run_id=x.run.id,
            detail={"attempt": x.attempt.attempt, "token": x.attempt.token, **(detail or {})}), self.clock.now())

    # -- compensation and repair -------------------------------------------------------------------
    def compensate(self, claimed: Claimed) -> Handled:
        """Run one claimed ``<step>@compensate`` attempt (:mod:`.compensation`) and commit its result."""
        run, att = claimed.run, claimed.attempt
        plan = self.plan(run.plan_digest)
        step = plan.step(StepRef.parse(att.step_id).step)
        results = claimed.results
        if run.parent_run_id is not None and not run.called:  # a fan-out child undoing its steps sees the parent's
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
        return NOTHING if done is None else Handled(done.messages, None, done.run_state)

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
        if not recovery.may_decide_again(run, last, outcome) or outcome is None:  # (None: it said no)
            return ()
        x = self.execution(run, last, store.results(run_id), resumed=False)
        return self.commit(x, outcome, actor="recovery", counts_step=False)

    # -- human decisions on a waiting attempt ------------------------------------------------------
    def resolve(self, run_id: str, step_id: str | None,
                decide: Callable[[Execution], Outcome | tuple[Outcome, tuple[AuditEvent, ...]]], *,
                actor: str, lost: bool = False, event: bool = False, callback: bool = False) -> tuple[Message, ...]:
        """Apply an approval or rejection to the run's waiting approval (fenced, re-read on conflict); with
        ``lost``, a person's decision on a lost attempt whose outcome is unknown (engine.poison); with ``event``,
        an event taken by a wait for one, with ``callback`` a result posted for an action step's callback
        (:mod:`sealflow.runtime.hearing`)."""
        what = "decision on a lost attempt" if lost else "wait for an event" if event else \
            "wait for a callback" if callback else "approval"

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
            poison.check_waits_for(x, lost=lost, event=event, callback=callback)
            decided = decide(x)  # an outcome, or (outcome, audit events of the decision)
            outcome, events = decided if isinstance(decided, tuple) else (decided, ())
            commit = flow.decide(x, outcome, actor=actor, counts_step=False)
            if events:
                commit = dataclasses.replace(commit, audit=commit.audit + tuple(events))
            return self._amended(x, redact_commit(compensation.amend(x, commit)))

        def fenced(exc: FencingError) -> None:
            raise InvalidOperation(f"the {what} of run {run_id} moved on meanwhile (timed out or decided); "
                                   f"see `sealflow status {run_id}`") from None

        return self._done(run_id, commit_retrying(self.store, self.clock, build, fenced=fenced,
                                                  gave_up=f"run {run_id} kept changing; try again")).messages

