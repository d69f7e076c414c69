"""The runtime: submit runs, drive them, answer approvals, operate the dead-letter list.

On the embedded default everything runs in this process: the SQLite store,
a Dramatiq ``StubBroker`` with an in-process ``dramatiq.Worker``, the outbox
dispatcher and the sweeper. :meth:`Runtime.drive` runs them until the run
*settles*: it completes, fails, is cancelled, or waits on something further
away than ``sleep_threshold`` seconds (a human, a long ``wait``). Shorter
timers (a retry backoff, a short ``wait``) are slept through. With another
broker (Redis) the same actor runs in ``sealflow worker`` processes and
``drive`` only dispatches, sweeps and watches the store.

    rt = Runtime(open_store(), registry, providers)
    run_id = rt.submit(plan, {"lead_id": "lead_1"}, initiator="user:ana")
    rt.drive(run_id).state          # 'completed', or 'waiting' at an approval
    rt.approve(run_id, actor="user:ben"); rt.drive(run_id)
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, cast

import dramatiq

from sealflow.core import breakers as breaker_rules
from sealflow.core import states
from sealflow.core.clock import SYSTEM, Clock
from sealflow.core.errors import ConfigError, StepError
from sealflow.core.jsonc import MAX_REASON_CHARS, clean_text
from sealflow.engine import compensation, recovery
from sealflow.engine.engine import Engine
from sealflow.engine.hooks import EngineConfig, EngineHooks
from sealflow.execution import isolation, secrets
from sealflow.execution.actions import REGISTRY
from sealflow.execution.timeouts import AttemptRunner
from sealflow.operations import notifications
from sealflow.policy.access import AccessProvider, OpenAccess, is_open
from sealflow.policy.approvals import NO_EDIT
from sealflow.policy.operations import Operation, authorize_run
from sealflow.policy.trustgate import TrustGate
from sealflow.runtime import approvals, liveness, outcomes, priority, readiness, takeover, telemetry
from sealflow.runtime.actors import QUEUE, CarryWatch, declare_step_actors, embedded_broker
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.dispatcher import Dispatcher
from sealflow.runtime.driving import Driving
from sealflow.runtime.hearing import CallbackHearing, Hearing
from sealflow.runtime.inline import Inline
from sealflow.runtime.liveness import BrokerUnavailable
from sealflow.runtime.reading import Reading
from sealflow.runtime.repair import Repair
from sealflow.runtime.review import Reviewing
from sealflow.runtime.serving import Serving
from sealflow.runtime.shared import Shared
from sealflow.runtime.status import RunStatus, run_status
from sealflow.runtime.stepview import reader_detail
from sealflow.runtime.submitting import Submitting
from sealflow.runtime.sweeper import Sweeper
from sealflow.store import open_store
from sealflow.store.base import AuditEvent, AuditRecord, Message, RunRecord, Store
from sealflow.store.capabilities import Capabilities
from sealflow.store.errors import IllegalTransition, InvalidOperation, PlanTampered


def _persons_text(text: str, what: str) -> str:
    """A person's comment or reason as the store keeps it: at most :data:`MAX_REASON_CHARS` characters (more is
    refused, nothing changed: never cut without saying), with what no store holds (NUL, unpaired surrogates)
    replaced."""
    if len(text) > MAX_REASON_CHARS:
        raise StepError("invalid_request", f"{what} is {len(text)} characters long; at most {MAX_REASON_CHARS} are "
                                           "kept: shorten it (link to a longer text)")
    return clean_text(text)


def model_providers(config: RuntimeConfig) -> Any:
    """The providers the configuration's ``models:`` section names (plus the local ``default``), else the
    process-wide registry (the local model)."""
    if "models" not in config.extra:
        from sealflow.providers import PROVIDERS

        return PROVIDERS
    from sealflow.providers.loader import load_models

    return load_models(config.extra, secrets.chain_for(config), source=config.source)

def _one_clock(store: Any, clock: Clock | None) -> Clock:
    """The clock of a runtime on ``store``: the store's own (given when it was opened), which an explicit
    ``clock`` must be; a store that keeps no clock (a test double) takes the runtime's."""
    held = getattr(store, "clock", None)
    if not callable(getattr(held, "now", None)):
        return clock or SYSTEM
    if clock is not None and clock is not held:
        raise ConfigError(f"the store {getattr(store, 'url', '')!r} keeps time on another clock than the one given "
                          "to the Runtime; open the store on that clock (open_store(url, clock=clock)) and give the "
                          "Runtime the store alone, or the URL with the clock")
    return cast(Clock, held)  # (a clock: it has a callable ``now``)


class Runtime(Submitting, Inline, Repair, Driving, Serving, Reading, Reviewing, Shared, Hearing, CallbackHearing):
    """Submit, drive and operate runs on one store (see the module docstring)."""

    def __init__(self, store: Store | str | None = None, registry: Any = None, providers: Any = None, *,
                 clock: Clock | None = None, broker: dramatiq.Broker | None = None, queue_name: str = QUEUE,
                 worker_threads: int = 2, worker_timeout_ms: int = 100, sleep_threshold: float = 3.0,
                 redeliver_after: float = 60.0, rng: random.Random | None = None,
                 access: AccessProvider | None = None, config: RuntimeConfig | None = None,
                 priorities: tuple[str, ...] | None = None, owner: str | None = None,
                 trust_gate: TrustGate | Callable[[str], TrustGate | None] | None = None,
                 hooks: tuple[EngineHooks, ...] = (), tracer_provider: Any = None, watch: CarryWatch | None = None):
        """``owner``: this process's lease owner name (default: ``host:pid:n``, :func:`recovery.owner_id`);
        ``trust_gate``: which signers' definitions this process executes, or a function of the engine's actor
        name making it (None: no check); ``hooks``: engine middleware after telemetry and notifications
        (:mod:`sealflow.engine.hooks`); ``tracer_provider``: the OpenTelemetry provider of the step spans
        (None: the global one); ``watch``: told what each step message's thread does (which step it carried its
        run on to, the run's state at its end: the worker's step log, :class:`~sealflow.runtime.actors.CarryWatch`)."""
        # a URL (or None: $SEALFLOW_STORE, else the embedded default) is opened on this runtime's clock, and
        # closed with the runtime; a store given keeps time on its own clock, which the runtime then keeps too
        self._owns_store = store is None or isinstance(store, str)
        self.store: Store = open_store(store, clock=clock) if store is None or isinstance(store, str) else store
        clock = _one_clock(self.store, clock)
        self.registry = registry if registry is not None else REGISTRY
        #: tenant limits, temporary storage, secrets, models (sealflow.runtime.config);
        #: None: $SEALFLOW_CONFIG or defaults
        self.config: RuntimeConfig = config if config is not None else RuntimeConfig.from_env()
        #: which provider serves which model name: the configuration's ``models:`` section, else the local model
        self.providers = providers if providers is not None else model_providers(self.config)
        self.clock: Clock = clock
        self.owner = owner or recovery.owner_id()
        #: who holds what (sealflow.policy.access); none configured: open development mode
        self.access: AccessProvider = access if access is not None else OpenAccess()
        if is_open(self.access):
            logging.getLogger("sealflow.access").warning("%s", self.access.describe())
        isolation.worker_default(self.config)  # a wrong worker-wide isolation fails here, not at the first step
        secrets.install_log_filter()
        self.broker = broker or embedded_broker()
        self.queue_name = queue_name
        #: the priorities this process's worker takes messages of (None: all)
        self.priorities = priority.parse_priorities(priorities)
        breaker_rules.check_config(self.config.extra)
        self.notify = notifications.load(self.config)  # approval notifications: the config checked here, at start
        #: the optional capabilities the store declares (store/capabilities.py), decided once
        self.capabilities = Capabilities.of(self.store)
        #: metrics, traces, log context (runtime/telemetry): the engine's first middleware
        self.telemetry = telemetry.install(self, tracer_provider=tracer_provider)
        actor = EngineConfig(owner=self.owner).actor
        gate = trust_gate(actor) if callable(trust_gate) else trust_gate
        # the engine, built whole: everything it reads is in its configuration (engine/hooks.py)
        engine_config = EngineConfig(
            owner=self.owner, access=self.access, settings=self.config, trust_gate=gate,
            running_limit=self.config.running_limit if self.config.has_bulkheads else None,
            pools=self.config.pools,  # step `concurrency: NAME` limits (policy/coordination.py)
            hooks=(self.telemetry, *notifications.hooks(self.notify), *hooks))
        # runner threads kept idle: one per worker thread (each runs at most one attempt at a time), so a busy
        # worker does not start and end a thread per attempt once more than 16 run at once
        self.engine = Engine(self.store, engine_config, registry=self.registry, providers=self.providers,
                             clock=self.clock, rng=rng, runner=AttemptRunner(max_idle=max(16, worker_threads + 1)),
                             capabilities=self.capabilities)
        #: run priority -> its step actor and queue (sealflow.runtime.priority)
        self.actors = declare_step_actors(self.broker, self.engine, queue_name=queue_name, route=self.send,
                                          watch=watch)
        self.actor = self.actors["normal"]
        self.priority_of = priority.PriorityOf(lambda run_id: self.store.get_run(run_id).priority)
        self.starvation_after = priority.starvation_after(self.config.extra)
        self.dispatcher = Dispatcher(self.store, self.send, self.clock)
        self.sweeper = Sweeper(self.store, self.clock, redeliver_after=redeliver_after,
                               past_deadline=self._past_deadline)
        self.redeliver_after = redeliver_after
        self.sleep_threshold = sleep_threshold
        self.worker_threads = worker_threads
        self.worker_timeout_ms = worker_timeout_ms  # idle wake-up of worker threads; bounds close() time
        self._worker: dramatiq.Worker | None = None
        self.heartbeat_every = 2.0  # seconds between this process's heartbeats, where the store keeps them
        self._heartbeats: liveness.Heartbeats | None = None
        self._start_lock = threading.Lock()
        self._dispatch_reset = self._recovered = False
        #: a serving worker's takeovers (service/takeover.py), closed with it
        self._left_steps: takeover.LeftSteps | None = None
        self._input_validators: dict[str, Any] = {}
        self._plan_json: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def _past_deadline(self, run_id: str) -> bool:
        try:
            compensation.stop_called(self.store, self.engine.plan, self.clock, run_id, actor="sweeper",
                                     why=f"its caller {run_id} passed its deadline")
            return compensation.deadline(self.store, self.engine.plan, self.clock, run_id)
        except PlanTampered as exc:  # no compensation from a plan not to be believed: the sweep times it out
            logging.getLogger("sealflow.runtime").error("run %s passed its deadline and is timed out without "
                                                        "compensation: %s", run_id, exc)
            return False

    def send(self, message: Message, priority: str | None = None) -> None:
        """Enqueue ``message`` on the queue of its run's priority (``priority`` when the caller has it, else
        looked up once per run); :class:`BrokerUnavailable` if that fails."""
        if priority is None or priority not in self.actors:
            priority = self.priority_of(message.run_id)
        else:
            self.priority_of.note(message.run_id, priority)
        actor = self.actors[priority]
        try:
            actor.send(*message)
        except Exception as exc:  # noqa: BLE001 - each broker's client raises its own kinds: all mean "not sent"
            raise BrokerUnavailable(f"sending step {message.step_id!r} of run {message.run_id} to the broker failed: "
                                    f"{type(exc).__name__}: {exc}") from exc

    @property
    def queue_names(self) -> tuple[str, ...]:
        """The queues this process's worker consumes (one per priority it serves)."""
        return tuple(priority.queue_for(self.queue_name, p) for p in self.priorities)

    def start(self) -> None:
        """Start the in-process worker and recover what is in flight (idempotent)."""
        with self._start_lock:
            if self._worker is None:
                if self._heartbeats is None:  # known to be alive before the first claim (service/liveness.py)
                    self._heartbeats = liveness.Heartbeats(self.capabilities.heartbeats, self.owner,
                                                           every=self.heartbeat_every,
                                                           broker_id=liveness.broker_id_of(self.broker))
                    self._heartbeats.begin()
                self._worker = dramatiq.Worker(self.broker, worker_threads=self.worker_threads,
                                               worker_timeout=self.worker_timeout_ms, queues=set(self.queue_names))
                priority.install_guard(self._worker, self.starvation_after)
                self._worker.start()
                self.recover()
                self._recovered = True  # else a worker's serve() retries it (a broker or store lost at start)

    def close(self, *, grace: float = 5.0) -> None:
        """Stop the worker (running attempts get ``grace`` seconds to finish and commit; messages not
        started go back to the broker), then release the broker and the store."""
        left = self._left_steps  # takeovers (service/takeover.py) share the grace
        started = time.monotonic()
        if self._worker is not None:
            self._worker.stop(timeout=int(grace * 1000))
            self._worker = None
        if left is not None:
            self._left_steps = None
            for run_id, step_id, attempt in left.close(timeout=max(0.0, grace - (time.monotonic() - started))):
                logging.getLogger("sealflow.worker").warning(
                    "run %s: step %s attempt %s (taken over): abandoned; its lease ends and another worker runs it "
                    "again", run_id, step_id, attempt)
        if self._heartbeats is not None:
            self._heartbeats.stop()
            self._heartbeats = None
        self.engine.services.runner.close()
        self.broker.close()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- runs --------------------------------------------------------------------------------------
    def _scoped(self, run_id: str, tenant: str | None, actor: str | None, operation: Operation) -> RunRecord:
        """The run, if ``actor`` may do ``operation`` to it and ``tenant`` (a claim) owns it; otherwise the
        answer for an unknown run, audited (:func:`sealflow.policy.operations.authorize_run`).
        ``actor=None`` is trusted in-process code: only ``tenant`` narrows."""
        return authorize_run(self.store, self.access, self.clock.now(), run_id, actor=actor, tenant=tenant,
                             operation=operation)

    # Every operation below takes the acting principal (``actor=``) and authorises it against the run's
    # tenant (docs/security.md, "Operating runs"); ``tenant=`` is only a narrowing claim. Embedding code
    # that passes no actor is trusted as before: it is not a principal's request.
    def status(self, run_id: str, *, tenant: str | None = None, actor: str | None = None,
               children_offset: int = 0) -> RunStatus:
        """The run, its attempts (oldest first) and what it waits for (``runs:read``, or its initiator); a run
        that fans out also its items by state and a page of its child runs from ``children_offset``; with what its
        readers see of each step (outputs, attempts, model calls: :mod:`.stepview`)."""
        self._scoped(run_id, tenant, actor, Operation.READ)
        found = run_status(self.store, run_id, children_offset=children_offset)
        found.read_detail = lambda: reader_detail(self.store, run_id)  # (read only when shown: status_json)
        return found

    def approve(self, run_id: str, step_id: str | None = None, *, actor: str, tenant: str | None = None,
                roles: tuple[str, ...] | list[str] | None = None, comment: str | None = None,
                edit: Any = NO_EDIT) -> RunStatus:
        """Approve the run's waiting approval as ``actor`` (see :mod:`sealflow.policy.approvals`; ``roles``,
        when given, narrows the roles ``actor`` acts under; ``edit``, the gate's show value as the approver
        changed it, for an ``editable`` gate). A process that would execute the run's next steps but lacks what
        they need is refused first (:class:`~sealflow.runtime.readiness.NotReady`)."""
        self._ready(run_id, tenant, actor, Operation.DECIDE, "approve")
        comment = None if comment is None else _persons_text(comment, "the approval's comment")
        approvals.approve(self._desk(), run_id, step_id, actor=actor, tenant=tenant, roles=roles, comment=comment,
                          edit=edit)
        return self.status(run_id)

    def reject(self, run_id: str, step_id: str | None = None, *, actor: str, tenant: str | None = None,
               roles: tuple[str, ...] | list[str] | None = None, reason: str = "") -> RunStatus:
        """Reject the run's waiting approval (a reason is required): the step fails with ``policy_denied``."""
        self._ready(run_id, tenant, actor, Operation.DECIDE, "reject")
        reason = _persons_text(reason, "the rejection's reason")
        approvals.reject(self._desk(), run_id, step_id, actor=actor, tenant=tenant, roles=roles, reason=reason)
        return self.status(run_id)

    def resolve(self, run_id: str, decision: str, *, actor: str, reason: str, output: Any = None,
                tenant: str | None = None) -> RunStatus:
        """Decide the outcome of the run's lost attempt that waits for a person (``runs:resolve``): ``retry``,
        ``succeeded`` (with ``output``) or ``failed`` (:mod:`sealflow.runtime.outcomes`)."""
        decide = outcomes.decision(decision, actor=actor, reason=_persons_text(reason, "the reason"), output=output)
        self._ready(run_id, tenant, actor, Operation.RESOLVE, "resolve")
        for message in self.engine.resolve(run_id, None, decide, actor=actor, lost=True):
            self.send(message)
        return self.status(run_id)

    def _ready(self, run_id: str, tenant: str | None, actor: str | None, operation: Operation, verb: str) -> None:
        """Before acting on a run: a caller who may not is told there is no such run, then a process that
        would execute the run's steps but lacks what they need refuses (nothing changed; readiness.py)."""
        self._scoped(run_id, tenant, actor, operation)
        readiness.require_trusted(self, run_id, verb)  # PlanTampered: its plan is not what its digest says
        readiness.require_ready(self, run_id, verb)

    def approvals_waiting(self, principal: str, tenant: str) -> list[dict[str, Any]]:
        """The approval gates of ``tenant`` that ``principal`` may decide now (none unless it is a member)."""
        return approvals.waiting_for(self._desk(), principal, tenant)

    def approvals_withheld(self, principal: str, tenant: str) -> list[dict[str, Any]]:
        """The gates ``principal`` approves but may not decide: its own runs (separation of duties)."""
        return approvals.withheld_from(self._desk(), principal, tenant)

    def _desk(self) -> approvals.Desk:
        return approvals.Desk(self.store, self.clock, self.access, self.engine.resolve, self.send)

    def cancel(self, run_id: str, *, actor: str | None = None, reason: str = "",
               tenant: str | None = None) -> RunStatus:
        """Cancel the run (``runs:cancel``, or its initiator); a running attempt finishes (its
        ``ctx.cancelled()`` turns true) then it stops. A run already ended is refused with
        :class:`~sealflow.store.errors.InvalidOperation` (audited ``cancel_refused``); a run
        already cancelling or compensating is left as it is.

        Any process may cancel, whatever action modules it lacks: cancelling runs no action. Compensations do;
        they are attempts like any step, so a process lacking an undo action leaves its compensation for one that
        has it (:mod:`sealflow.engine.capability`), and that process runs it. A run whose stored
        plan is not what its digest says is refused (:class:`~sealflow.store.errors.PlanTampered`,
        nothing changed): what to undo comes from that plan."""
        self._scoped(run_id, tenant, actor, Operation.CANCEL)
        who = actor or "system"
        reason = _persons_text(reason, "the cancel's reason")
        run = self.store.get_run(run_id)
        if run.state in states.RUN_FINAL:  # cancelling / compensating: nothing changes (undoing must finish)
            self._refuse_cancel(run, who)
        if run.state in states.RUN_ACTIVE:  # its compensations would come from its plan: refused if tampered
            readiness.require_trusted(self, run_id, "cancel")
        # completed steps to undo and nothing running: cancel and start compensating in one commit; the runs its
        # call steps started first, each undoing its own
        try:
            compensation.stop_called(self.store, self.engine.plan, self.clock, run_id, actor=who,
                                     why=f"its caller {run_id} was cancelled" + (f": {reason}" if reason else ""))
            if not compensation.cancel(self.store, self.engine.plan, self.clock, run_id, actor=who, reason=reason):
                self.store.cancel(run_id, self.clock.now(), actor=who, reason=reason)
        except IllegalTransition:  # it ended meanwhile
            self._refuse_cancel(self.store.get_run(run_id), who)
        self.engine.note_cancelled(run_id)
        return self.status(run_id)

    def _refuse_cancel(self, run: Any, actor: str) -> NoReturn:
        if run.state == "cancelled":
            message = f"run {run.id} is already cancelled"
        else:
            message = f"run {run.id} has already ended ({run.state}); only a run in progress can be cancelled"
        self.store.append_audit(AuditEvent("cancel_refused", None, actor, run_id=run.id,
                                           detail={"state": run.state}), self.clock.now())
        raise InvalidOperation(message)


    def audit(self, run_id: str, *, tenant: str | None = None, actor: str | None = None) -> list[AuditRecord]:
        """The run's audit trail, oldest first (``audit:read``)."""
        self._scoped(run_id, tenant, actor, Operation.AUDIT_READ)
        return self.store.audit(run_id)
