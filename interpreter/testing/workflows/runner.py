"""Running one case of a workflow test: the real engine on a fresh embedded store, in virtual time.

Each case gets its own SQLite store in a temporary folder, a :class:`~sealflow.core.clock.FakeClock` that only
moves when the runner (or a timer it sleeps through) moves it, and the real engine driving the run inline,
as ``sealflow run`` does. Around the definition's actions sits a script: an action answers what the case says
for its step (``steps:``), else for its name (``actions:``), else the action registered by the project runs
(the demo world's for the definitions shipped here); a fault fails the first ``times`` calls at a step with
its error class. Models never leave the process: an ``ai`` step answers what the case gives for it
(``answers:``), else the local model (the embedded default's deterministic model) answers. Approval gates are
answered as the case says (``expire`` moves the clock past the gate's timeout; no one waits). A ``crash`` at a
step stops the attempt after the step's work and before its result is committed, as a worker that dies there
(:class:`_Crashes`): nothing of it is committed, its lease ends in virtual time, and the engine's own recovery
runs it again.

What must hold (``expect:``) is compared at the end; each difference becomes a message naming the case, the
step and the difference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sealflow.core import states
from sealflow.core.clock import FakeClock
from sealflow.core.errors import SealflowError, StepError
from sealflow.dsl.errors import Location
from sealflow.dsl.plan import Plan
from sealflow.engine.hooks import EngineHooks
from sealflow.execution.actions import REGISTRY, Action, Registry
from sealflow.execution.callbacks import CallbackRefused
from sealflow.policy.access import ALL, POLICY
from sealflow.policy.coordination import ANY_POOL, DEFAULT_POOL_LIMIT
from sealflow.providers.base import ModelRequest, ModelResult, Provider
from sealflow.providers.local import LocalModel
from sealflow.providers.recording import ReplayMiss, ReplayProvider
from sealflow.providers.registry import ProviderRegistry
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.runtime.status import RunStatus
from sealflow.store import auditverify
from sealflow.testing.workflows.spec import Answer, CallbackResult, Case, Event

INITIATOR = "user:sealflow-test"
#: approvers are distinct people, one more for each approval a quorum needs: the gate's named users first, then
#: these (who hold every role in open access)
APPROVER = "user:sealflow-test-approver-{n}"
#: the fault that returns a malformed answer instead of raising, and the answer it returns
MALFORMED = "malformed"
MALFORMED_VALUE = "Sure! Here is the answer you asked for {"
#: the actions of this package act on the demo world, which each case makes afresh: they may run unanswered
DEMO_PACKAGE = "sealflow.demo."
#: the fault that delivers a step's messages again once the run has ended
DUPLICATE = "duplicate"
#: the source of an event a case delivers, when neither it nor the wait names one
TEST_SOURCE = "sealflow-test"
#: the fault that kills the worker running the step after the step's work, before its result is committed
CRASH = "crash"
#: faults that are not a call failing (the script does not raise them at the call)
_NOT_AT_THE_CALL = (DUPLICATE, CRASH)
#: a run that still moves after this many rounds of answering gates is reported, not followed further
MAX_ROUNDS = 50


@dataclasses.dataclass
class CaseResult:
    """One case's verdict: the differences found, each ``file:line:column: what`` (none: it passed), and what
    the run did."""

    name: str
    location: Location
    #: each difference: where in the test file it is written, and what differs
    problems: list[tuple[Location, str]] = dataclasses.field(default_factory=list)
    state: str | None = None
    run_id: str | None = None
    steps: list[str] = dataclasses.field(default_factory=list)
    #: virtual seconds the run's clock moved (approval expiries, waits, backoffs)
    virtual_seconds: float = 0.0
    #: the engine's invariants this run broke (:func:`invariants`; also in ``failures``)
    violations: list[str] = dataclasses.field(default_factory=list)
    #: step id -> how many attempts it had, and the attempts' states in order
    attempts: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: step id -> how many times its action or model was called (failures included)
    called: Counter[str] = dataclasses.field(default_factory=Counter)

    def calls_at(self, step: str) -> int:
        return self.called[step]

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def failures(self) -> list[str]:
        """Each difference as ``file:line:column: what``."""
        return [f"{where}: {what}" for where, what in self.problems]

    def fail(self, where: Location, what: str) -> None:
        self.problems.append((where, what))


@dataclasses.dataclass
class _Calls:
    """Every call the script answered: (step id, action name, idempotency key, returned?); and which of them
    returned into an attempt that crashed before committing (indexes into ``made``): the target acted, the
    engine never heard."""

    made: list[tuple[str, str, str | None, bool]] = dataclasses.field(default_factory=list)
    lost: set[int] = dataclasses.field(default_factory=set)

    def count(self, name: str, *, applied: bool) -> int:
        rows = [c for c in self.made if name in (c[0], c[1]) and (c[3] or not applied)]
        if not applied:
            return len(rows)
        # a target that honours the idempotency key applies each key once; a call without a key applies each time
        keyed = {(c[1], c[2]) for c in rows if c[2] is not None}
        return len(keyed) + sum(1 for c in rows if c[2] is None)


class _Script:
    """The case's answers, faults and cancellation, applied around each action call."""

    def __init__(self, case: Case, calls: _Calls, cancel: Callable[[str], None]):
        self.case, self.calls, self.cancel = case, calls, cancel
        self.faults_left: Counter[str] = Counter()
        for f in case.faults:
            if f.error not in _NOT_AT_THE_CALL:  # delivered again after the run, or a crash: not a call's failure
                self.faults_left[f.step] += f.times
        self.fault_class = {f.step: f.error for f in case.faults}
        #: model calls the case's recording does not hold
        self.misses: list[str] = []
        #: write and irreversible calls the case left unanswered and may not make for real (not called)
        self.unanswered: list[str] = []
        #: step id -> the callback token its action was last given (a step with ``callback:``)
        self.tokens: dict[str, str] = {}

    def may_act(self, act: Action) -> bool:
        """Whether ``act`` may run for real when the case does not answer it: it only reads, it acts on the demo
        world (fresh for each case), or the test file lists it in ``real_actions``."""
        return act.effect == "read" or act.name in self.case.real_actions \
            or str(getattr(act.fn, "__module__", "")).startswith(DEMO_PACKAGE)

    def before(self, step: str, name: str, key: str | None) -> bool:
        """Raise the fault still due at ``step`` (recording the failed call); True when the call's answer is to
        come back malformed instead."""
        if self.faults_left[step] <= 0:
            return False
        self.faults_left[step] -= 1
        fault = self.fault_class[step]
        if fault == MALFORMED:
            return True
        self.calls.made.append((step, name, key, False))
        if fault == "refused":
            raise StepError("policy_denied", f"injected by the test: {name} refused to answer (content policy)")
        raise StepError(fault, f"injected by the test: {fault}")

    def after(self, step: str, name: str, key: str | None, run_id: str) -> None:
        """Record a call that returned; cancel the run if the case says so here."""
        self.calls.made.append((step, name, key, True))
        if self.case.cancel_at == step:
            self.cancel(run_id)

    def wrap(self, real: Action) -> Action:
        script = self

        @functools.wraps(real.fn)  # its signature is the action's: the engine and agents pass arguments by it
        def scripted(ctx: Any, **kwargs: Any) -> Any:
            step = str(ctx.step_id).split("@", 1)[0]
            key = getattr(ctx, "idempotency_key", None)
            handle = getattr(ctx, "callback", None)
            if handle is not None:  # the token the called system would get: the case posts its result with it
                script.tokens[step] = handle.token
            if script.before(step, real.name, key):
                script.calls.made.append((step, real.name, key, False))
                return MALFORMED_VALUE
            answer: Answer | None = script.case.steps.get(step) or script.case.actions.get(real.name)
            if answer is not None and answer.error is not None:
                script.calls.made.append((step, real.name, key, False))
                raise StepError(answer.error, f"the test's answer for {step}: {answer.error}")
            if answer is None and not script.may_act(real):
                script.unanswered.append(f"step {step} calls {real.name} ({real.effect}) and the case gives no "
                                         f"answer for it: a test does not act on the world. Answer it (steps: "
                                         f"{{{step}: {{return: ...}}}} or actions: {{{real.name}: ...}}), or let it "
                                         f"act on a world the test owns (real_actions: [{real.name}])")
                script.calls.made.append((step, real.name, key, False))
                raise StepError("invalid_request", f"sealflow test: {real.name} has no answer and is not in "
                                                   f"real_actions; it was not called")
            value = answer.value if answer is not None else real.fn(ctx, **kwargs)
            script.after(step, real.name, key, ctx.run_id)
            return value

        mock = dataclasses.replace(real, fn=scripted)
        # the action's declared parameters and result still apply: the runtime checks arguments and answers
        mock.__dict__["input_schema"] = real.input_schema
        mock.__dict__["output_schema"] = real.output_schema
        return mock


class SimulatedCrash(Exception):
    """The worker running an attempt died here (a ``crash`` fault): nothing after this point happens."""


class _Faults(EngineHooks):
    """What the case injects at the commits of the run's steps.

    * ``revoke_before``: the commit that makes that step due next revokes its permissions (so the steps before
      it, which may need the same ones, still run; the step's re-authorisation then refuses it).
    * ``crash``: at a named step, the attempt's commit is never made, as if the worker running it died after the
      step's work (its action called, its model answered) and before the store heard of it. The hook raises where
      the commit would begin; the worker thread logs the loss and moves on, the attempt stays claimed under its
      lease, and the engine's own recovery takes over: the lease ends (virtual time), the sweeper counts the loss
      and the attempt runs again (or, lost ``lost_attempts`` times in a row, the run is quarantined; an action
      whose target cannot deduplicate waits for a person). A crash fault's ``times`` is how many attempts in a
      row die so.
    """

    name = "sealflow-test-faults"
    gating = True  # (its exception must go up as a dead worker's would, not be logged away as an observer's)

    def __init__(self, case: Case, calls: _Calls, access: _Access):
        self.left: Counter[str] = Counter()
        for f in case.faults:
            if f.error == CRASH:
                self.left[f.step] += f.times
        self.calls, self.access, self.revoke_before = calls, access, case.revoke_before
        #: (run, step, attempt) -> where its calls begin in ``calls.made``
        self.began: dict[tuple[str, str, int], int] = {}
        #: step id -> how many of its attempts died
        self.crashed: Counter[str] = Counter()

    def before_execute(self, x: Any) -> None:
        self.began[(x.run.id, x.step_id, x.attempt.attempt)] = len(self.calls.made)
        return None

    def before_commit(self, x: Any, commit: Any) -> Any:
        step = x.step.id
        if self.revoke_before is not None and commit.next is not None \
                and commit.next.step_id.split("@", 1)[0] == self.revoke_before:
            self.access.armed = True
        if self.left[step] <= 0 or x.attempt.state != "running":
            return commit
        self.left[step] -= 1
        self.crashed[step] += 1
        start = self.began.pop((x.run.id, x.step_id, x.attempt.attempt), len(self.calls.made))
        self.calls.lost.update(i for i in range(start, len(self.calls.made))
                               if self.calls.made[i][0] == step and self.calls.made[i][3])
        raise SimulatedCrash(f"injected by the test: the worker running step {x.step_id!r} attempt "
                             f"{x.attempt.attempt} died before committing its result")


class _QuietCrashes(logging.Filter):
    """Keeps a simulated crash's traceback out of the test's output (the worker logs it as a real loss)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], SimulatedCrash))


#: the loggers a simulated crash reaches (the worker thread that loses the attempt)
_CRASH_LOGGERS = ("sealflow.actors", "sealflow.worker", "dramatiq")


class _Access:
    """Who holds what in a case: every principal every permission and role (as in open development mode, but
    checked as under a policy, so re-authorisation happens), until the initiator loses the permissions of the
    case's ``revoke_before`` step once the run is submitted."""

    mode = POLICY
    _EVERYTHING = frozenset({ALL})

    def __init__(self, plan: Plan, case: Case):
        step = next((s for s in plan.steps if s.id == case.revoke_before), None)
        self.revoked = frozenset(step.permissions) if step is not None else frozenset()
        self.kept = frozenset(p for s in plan.steps for p in s.permissions) | frozenset(plan.permissions)
        self.armed = False

    def permissions(self, tenant: str, principal: str) -> frozenset[str]:
        if self.armed and self.revoked and principal == INITIATOR:
            return self.kept - self.revoked
        return self._EVERYTHING

    def roles(self, tenant: str, principal: str) -> frozenset[str]:
        return self._EVERYTHING

    def is_operator(self, principal: str) -> bool:
        return True

    def describe(self) -> str:
        return "sealflow test: every principal holds every permission and role, unless the case revokes one"


class _ScriptedModel:
    """A model that answers what the case gives for the step, else the local model's answer; the case's faults
    and cancellation at an ``ai`` step apply to its model call."""

    def __init__(self, script: _Script, local: Provider):
        self.script, self.answers, self.local = script, script.case.answers, local

    def models(self) -> list[str]:
        return ["*"]

    def complete(self, request: ModelRequest) -> ModelResult:
        step, run_id = _step_of(request)
        if step is None or run_id is None:
            return self.local.complete(request)
        if self.script.before(step, f"model:{request.model}", None):
            self.script.calls.made.append((step, f"model:{request.model}", None, False))
            return ModelResult(output=MALFORMED_VALUE, text=MALFORMED_VALUE, input_tokens=1, output_tokens=1,
                               model=request.model)
        if step in self.answers and not request.tools:  # an agent's turns are the recording's or the local model's
            output = self.answers[step]
            text = output if isinstance(output, str) else json.dumps(output)
            result = ModelResult(output=output, text=text, input_tokens=max(1, len(request.prompt) // 4),
                                 output_tokens=max(1, len(text) // 4), model=request.model)
        else:
            try:
                result = self.local.complete(request)
            except ReplayMiss as miss:  # the case fails saying so; the step fails as a misconfigured model would
                self.script.misses.append(f"step {step}: {miss}")
                raise StepError("configuration", f"no recorded answer for step {step}") from None
        self.script.after(step, f"model:{request.model}", None, run_id)
        return result


def _step_of(request: ModelRequest) -> tuple[str | None, str | None]:
    # an ai step's call is keyed run:step:attempt (steps/ai.py), an agent's turn run:step:attempt:turnN
    # (steps/agent/loop.py): (step id, run id)
    parts = (request.idempotency_key or "").split(":")
    if len(parts) >= 3:
        return parts[1].split("@", 1)[0], parts[0]
    return None, None


class _ScriptedProviders(ProviderRegistry):
    def __init__(self, model: _ScriptedModel):
        super().__init__()
        self.model = model

    def get(self, model: str) -> Provider:
        return self.model  # type: ignore[return-value]

    def known(self) -> list[str]:
        return ["*"]


#: sets up the world the real actions act on for one case, in the case's own folder (the CLI's: a fresh demo
#: world), and tears it down
World = Callable[[Path], AbstractContextManager[None]]
#: a world may name the MCP servers its definitions' agents reach (an ``mcp:`` section: ``world.mcp``), as the
#: demo world names its carrier; MCP calls are not scripted: they reach the named servers


def _config(world: World | None) -> RuntimeConfig:
    servers = getattr(world, "mcp", None)
    return RuntimeConfig(pools={ANY_POOL: DEFAULT_POOL_LIMIT}, extra={"mcp": dict(servers)} if servers else {})


def run_case(plan: Plan, case: Case, *, registry: Registry = REGISTRY, world: World | None = None) -> CaseResult:
    """Run ``case`` against ``plan`` and compare what happened with what it expects."""
    result = CaseResult(case.name, case.location)
    calls = _Calls()
    clock = FakeClock()
    started = clock.now()
    with tempfile.TemporaryDirectory(prefix="sealflow-test-") as tmp, \
            (world(Path(tmp)) if world is not None else contextlib.nullcontext()):
        holder: dict[str, Runtime] = {}

        def cancel(run_id: str) -> None:
            holder["rt"].cancel(run_id, actor=INITIATOR, reason="the test cancels here")

        script = _Script(case, calls, cancel)
        scripted = Registry()
        for _, real in registry.items():
            scripted.register(script.wrap(real))
        fallback: Provider = ReplayProvider(case.recording) if case.recording is not None else LocalModel()
        providers = _ScriptedProviders(_ScriptedModel(script, fallback))
        access = _Access(plan, case)
        faults = _Faults(case, calls, access)
        # the run is driven in this thread; the embedded worker's threads only idle, so they poll briefly
        rt = Runtime(f"sqlite:///{Path(tmp) / 'test.db'}", scripted, providers, clock=clock, access=access,
                     # (one run at a time: every pool at the default limit, said so, so nothing warns of it)
                     config=_config(world), worker_threads=1, worker_timeout_ms=10,
                     hooks=(faults,))
        holder["rt"] = rt
        quiet = _QuietCrashes()
        for name in _CRASH_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        try:
            status = _drive(rt, plan, case, clock, result, access, script.tokens)
            if status is not None:
                for fault in case.faults:
                    if fault.error == DUPLICATE:
                        result.violations += _redeliver(rt, status, fault.step, calls)
                status = rt.status(status.run.id) if status is not None else None
            audit = rt.audit(status.run.id) if status is not None else []
            chain = auditverify.verify(rt.store, status.run.tenant) if status is not None else None
        finally:
            rt.close()
            for name in _CRASH_LOGGERS:
                logging.getLogger(name).removeFilter(quiet)
    result.virtual_seconds = clock.now() - started
    for miss in script.misses:
        result.fail(case.location, f"recording: {miss}")
    for call in dict.fromkeys(script.unanswered):
        result.fail(case.location, f"unanswered: {call}")
    for step, left in faults.left.items():
        if left > 0 and status is not None:
            result.fail(case.location, f"crash: step {step} committed no attempt that could die there "
                                       f"({left} crash(es) not injected): is it reached?")
    result.called = Counter(c[0] for c in calls.made)
    if status is None:
        if case.expect.get("state") == "refused":
            result.problems.clear()
        result.state = "refused"
        return result
    result.state, result.run_id = status.state, status.run.id
    result.steps = sorted({a.step_id.split("@", 1)[0] for a in status.attempts})
    for a in status.attempts:
        result.attempts.setdefault(a.step_id, []).append(a.state)
    for key, what in _compare(case, status, audit, calls):
        result.fail(case.expect_at.get(key, case.location), f"{key}: {what}")
    result.violations = invariants(plan, case, status, audit, calls, registry) + result.violations
    if chain is not None and not chain.ok:
        result.violations.append(f"the audit chain does not verify: {chain.first}")
    for violation in result.violations:
        result.fail(case.location, f"invariant: {violation}")
    return result


def invariants(plan: Plan, case: Case, status: RunStatus, audit: list[Any], calls: _Calls,
               registry: Registry = REGISTRY) -> list[str]:
    """What must hold of every run, whatever the case expects: the engine's own promises."""
    out: list[str] = []
    run = status.run
    if run.state not in states.RUN_FINAL and case.expect.get("state") != "waiting":
        out.append(f"the run ended {run.state}, not in a final state")
    injected = {f.error for f in case.faults} | {a.error for a in (*case.steps.values(), *case.actions.values())
                                                  if a.error}
    internal = [a for a in status.attempts if a.error_class == "internal" and "internal" not in injected]
    if internal:
        out.append(f"step {internal[0].step_id} failed as internal (an engine bug): {internal[0].error_message}")
    for step in plan.steps:
        tries = [a.try_no for a in status.attempts if a.step_id == step.id]
        if tries and max(tries) > max(step.retry.max_attempts, 1):
            out.append(f"step {step.id} ran try {max(tries)}, over its max_attempts {step.retry.max_attempts}")
    if plan.budget.max_steps is not None and run.steps_executed > plan.budget.max_steps:
        out.append(f"{run.steps_executed} steps executed, over max_steps {plan.budget.max_steps}")
    # a call whose attempt crashed before committing was never completed as far as the engine knows: running it
    # again under the same key is recovery (its target applies the key once), not a completed effect repeated
    # (an action whose step waits for a callback completes nothing when it returns: a retry after the callback's
    # timeout calls it again under the same key, to hand the provider the new attempt's callback)
    called_back = {s.id for s in plan.steps if s.callback is not None}
    done = Counter((c[1], c[2]) for i, c in enumerate(calls.made) if c[3] and c[2] is not None
                   and i not in calls.lost and c[0] not in called_back)
    again = [key for key, n in done.items() if n > 1]
    if again:
        out.append(f"{again[0][0]} completed twice with the same idempotency key {again[0][1]!r}: a completed "
                   f"effect was run again")
    for i in sorted(calls.lost):
        at, name, key, _ = calls.made[i]
        act = registry.get(name)
        if key is None and act is not None and act.effect != "read" \
                and any(c[0] == at and c[1] == name and c[3] for c in calls.made[i + 1:]):
            out.append(f"step {at}: {name} ({act.effect}) acted, its worker crashed before the result was "
                       f"committed, and it acted again: the effect was applied twice (give the step an "
                       f"idempotency_key: its target then applies it once)")
            break
    illegal = [r for r in audit if r.event == "illegal_transition"]
    if illegal:
        out.append(f"an illegal transition was attempted: {illegal[0].detail}")
    return out


def _drive(rt: Runtime, plan: Plan, case: Case, clock: FakeClock, result: CaseResult,
           access: _Access, tokens: dict[str, str]) -> RunStatus | None:
    events: list[Event | CallbackResult] = [*case.events, *case.callbacks]
    # with events to deliver, a run stops at its waits (their timeouts are not slept through until none is left)
    until = "settled" if events else "final"
    try:
        if case.revoke_before is None:
            status = rt.run(plan, case.input, initiator=INITIATOR, until=until)
        else:  # submitted with every permission; the step's are revoked once the run is about to reach it
            run_id = rt.submit(plan, case.input, initiator=INITIATOR)
            access.armed = access.armed or case.revoke_before == plan.start  # (else by the commit before: _Faults)
            status = rt.drive(run_id, until=until)
    except SealflowError as exc:  # refused at submit (its input, a limit): `expect: {state: refused}` says so
        result.fail(case.location, f"the run was refused at submit: {exc}")
        return None
    approvals: Counter[str] = Counter()
    for _ in range(MAX_ROUNDS):
        waiting = status.waiting
        if events and status.state not in states.RUN_FINAL \
                and (waiting is None or waiting.get("kind") != "approval"):
            # events left to deliver: the run settled at a wait (or a timer before one). Deliver those due at the
            # wait it is at, else move the clock to its next timer (a wait's timeout when no event is given)
            if not _deliver(rt, plan, status, events, tokens):
                # (a wait's timeout, a retry's backoff, or a crashed attempt's lease: whatever comes first)
                due = rt.store.next_due(status.run.id, redeliver_after=rt.redeliver_after)
                if due is None:
                    return status
                clock.advance(max(0.0, float(due) - clock.now()) + 0.001)
            status = rt.drive(status.run.id, until="settled" if events else "final")
            continue
        if status.state != "waiting" or waiting is None or waiting.get("kind") != "approval":
            return status
        step = str(waiting["step"]).split("@", 1)[0]
        decision = case.approvals.get(step)
        if decision is None:
            result.fail(case.location, f"the run waits for an approval at {step}; the case does not say how to answer "
                                       f"it (approvals: {{{step}: approve | reject | expire}})")
            return status
        approver = _approver(waiting.get("approvers") or [], approvals[step])
        approvals[step] += 1
        try:
            if isinstance(decision, dict):  # approve with the show value edited
                rt.approve(status.run.id, waiting["step"], actor=approver, edit=decision.get("edit"))
            elif decision == "approve":
                rt.approve(status.run.id, waiting["step"], actor=approver)
            elif decision == "reject":
                rt.reject(status.run.id, waiting["step"], actor=approver, reason="rejected by the test")
        except SealflowError as exc:
            verb = "approve with an edit" if isinstance(decision, dict) else decision
            result.fail(case.location, f"{verb} at {step} as {approver} was refused: {exc}")
            return status
        if decision == "expire":
            due = waiting.get("due_at")
            clock.advance(max(0.0, (due or clock.now()) - clock.now()) + 1.0)
        status = rt.drive(status.run.id, until="settled" if events else "final")
    result.fail(case.location, f"the run still waits after {MAX_ROUNDS} answered approvals")
    return status


def _deliver(rt: Runtime, plan: Plan, status: RunStatus, events: list[Event | CallbackResult],
             tokens: dict[str, str]) -> bool:
    """Deliver the case's events (or post its callback results) for what the run waits for now, removing them from
    ``events``; whether any was."""
    active = rt.store.active_attempt(status.run.id)
    if active is None or active.state != "waiting":
        return False
    step = active.step_id.split("@", 1)[0]
    if active.data.get("callback"):
        result = next((e for e in events if isinstance(e, CallbackResult) and e.step == step), None)
        if result is None or step not in tokens:
            return False
        events.remove(result)
        try:
            rt.complete_callback(tokens[step], data=result.data, failed=result.error, message=result.message,
                                 actor=INITIATOR)
        except CallbackRefused:  # (a result failing the step's schema: audited; the step keeps waiting)
            pass
        return True
    if not active.data.get("event"):
        return False
    due = [e for e in events if isinstance(e, Event) and e.step == step]
    for event in due:
        events.remove(event)
        spec = plan.step(step).wait
        rt.offer_event(status.run.tenant or "default", event.source or (spec.source if spec else None) or TEST_SOURCE,
                       event.id or f"sealflow-test-{uuid.uuid4().hex}", event.type or (spec.event if spec else "")
                       or "", event.data)
    return bool(due)


def _redeliver(rt: Runtime, status: RunStatus, step: str, calls: _Calls) -> list[str]:
    """Deliver ``step``'s messages again (each attempt's claimed token and the one before it: a redelivery and a
    copy): each must be refused, without calling the step's action and without changing the run."""
    problems: list[str] = []
    attempts = [a for a in status.attempts if a.step_id == step]
    if not attempts:
        return [f"duplicate: step {step} never ran, so nothing could be delivered again"]
    before, made = rt.status(status.run.id).run, len(calls.made)
    for a in attempts:
        for token in (a.token - 1, a.token):
            handled = rt.engine.handle(a.run_id, a.step_id, a.attempt, token, status.run.tenant or "")
            if handled.run_state is not None or handled.messages:
                problems.append(f"duplicate: a delivery of step {step} attempt {a.attempt} (token {token}) again "
                                f"was not refused: it committed")
    after = rt.status(status.run.id).run
    if len(calls.made) != made:
        problems.append(f"duplicate: step {step}'s action ran again on a repeated delivery")
    if (after.state, after.rev) != (before.state, before.rev):
        problems.append(f"duplicate: a repeated delivery of step {step} changed the run ({before.state} rev "
                        f"{before.rev} -> {after.state} rev {after.rev})")
    return problems


def _approver(approvers: list[str], n: int) -> str:
    """The n-th distinct approver (from 0) a gate accepts: its named users in order, else a person holding its
    roles (in open access everyone does)."""
    users = [a for a in approvers if a.startswith("user:") and a != INITIATOR]
    if n < len(users):
        return users[n]
    return APPROVER.format(n=n + 1 - len(users))


def _compare(case: Case, status: RunStatus, audit: list[Any], calls: _Calls) -> list[tuple[str, str]]:
    """Each difference from ``expect:`` as (the expectation's key, what differs)."""
    want = case.expect
    out: list[tuple[str, str]] = []
    ran = {a.step_id.split("@", 1)[0] for a in status.attempts if a.state not in ("pending", "skipped")}
    if "state" in want and status.state != want["state"]:
        error = status.run.error_class
        why = f" ({error}: {status.run.error_message})" if error else ""
        out.append(("state", f"expected {want['state']}, got {status.state}{why}"))
    if "error" in want and status.run.error_class != want["error"]:
        out.append(("error", f"expected {want['error']}, got {status.run.error_class or 'none'}"))
    if "output" in want and status.output != want["output"]:
        out.append(("output", f"expected {_show(want['output'])}, got {_show(status.output)}"))
    if "output_includes" in want:
        out += [("output_includes", f"output{where}: {what}")
                for where, what in _subset(want["output_includes"], status.output, "")]
    for step in want.get("ran", []):
        if step not in ran:
            out.append(("ran", f"step {step} did not run"))
    for step in want.get("not_ran", []):
        if step in ran:
            out.append(("not_ran", f"step {step} ran"))
    for name, n in want.get("effects", {}).items():
        got = calls.count(name, applied=True)
        if got != n:
            out.append(("effects", f"{name} applied its effect {got} time(s), expected {n}"))
    for name, n in want.get("calls", {}).items():
        got = calls.count(name, applied=False)
        if got != n:
            out.append(("calls", f"{name} was called {got} time(s), expected {n}"))
    events = {r.event for r in audit}
    for event in want.get("audit", []):
        if event not in events:
            out.append(("audit", f"no {event!r} event in the run's trail (it has: {', '.join(sorted(events))})"))
    if "max_tokens" in want and status.run.tokens > want["max_tokens"]:
        out.append(("max_tokens", f"the run used {status.run.tokens} tokens, more than {want['max_tokens']}"))
    if "max_cost_usd" in want and status.run.cost_usd > want["max_cost_usd"]:
        out.append(("max_cost_usd", f"the run cost ${status.run.cost_usd:.6f}, more than ${want['max_cost_usd']}"))
    return out


def _subset(want: Any, got: Any, at: str) -> list[tuple[str, str]]:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [(at, f"expected a map including {_show(want)}, got {_show(got)}")]
        found: list[tuple[str, str]] = []
        for key, value in want.items():
            if key not in got:
                found.append((f"{at}.{key}", f"missing (expected {_show(value)})"))
            else:
                found += _subset(value, got[key], f"{at}.{key}")
        return found
    return [] if want == got else [(at, f"expected {_show(want)}, got {_show(got)}")]


def _show(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
