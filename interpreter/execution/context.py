"""What a step attempt executes with: the expression context, and the ``ctx`` an action gets.

The expression context is built from the store's ``results`` (the latest
visit of each step) and the run, never from memory, so a recovered run sees
exactly what the crashed one saw::

    {"input": ..., "steps": {id: {"output": ..., "status": ...}},
     "run": {id, workflow, version, initiator, tenant, attempt}, "output": None}

``run.attempt`` is 1 for a run's first life and grows by one with each
dead-letter redrive.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sealflow.core.clock import Clock
from sealflow.core.jsonc import DEFAULT_MAX_PAYLOAD_BYTES
from sealflow.dsl import expressions
from sealflow.dsl.expressions import templates
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.execution.actions import Registry
from sealflow.execution.callbacks import CallbackHandle
from sealflow.execution.secrets import SecretChain
from sealflow.execution.timeouts import AttemptRunner
from sealflow.store.base import AttemptRecord, RunRecord, Store
from sealflow.store.capabilities import Capabilities

_EMPTY: Mapping[str, str] = {}


class OutputCache:
    """Decoded step outputs by run, so a step does not re-parse every earlier output.

    Keyed by the JSON text itself: a changed output (a loop's next visit) is parsed again.
    Bounded; a run's entry is dropped when the run ends.
    """

    def __init__(self, max_runs: int = 4096):
        self._runs: dict[str, dict[str, tuple[str, Any]]] = {}
        self._max = max_runs

    def decode(self, run_id: str, step_id: str, text: str | None) -> Any:
        if text is None:
            return None
        per_run = self._runs.get(run_id)
        if per_run is None:
            if len(self._runs) >= self._max:
                try:
                    self._runs.pop(next(iter(self._runs)), None)
                except (StopIteration, RuntimeError):  # another thread changed it meanwhile
                    pass
            per_run = self._runs[run_id] = {}
        hit = per_run.get(step_id)
        if hit is not None and hit[0] == text:
            return hit[1]
        value = json.loads(text)
        per_run[step_id] = (text, value)
        return value

    def forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)


def expression_context(run: RunRecord, results: Mapping[str, tuple[str, str | None]],
                       cache: OutputCache | None = None) -> dict[str, Any]:
    if cache is None:
        steps = {sid: {"status": status, "output": None if out is None else json.loads(out)}
                 for sid, (status, out) in results.items()}
    else:
        decode, run_id = cache.decode, run.id
        steps = {sid: {"status": status, "output": decode(run_id, sid, out)} for sid, (status, out) in results.items()}
    context = {
        "input": run.input,
        "steps": steps,
        "run": {"id": run.id, "workflow": run.workflow, "version": run.workflow_version,
                "initiator": run.initiator, "tenant": run.tenant, "attempt": run.redrives + 1},
        "output": None,
    }
    if run.parent_run_id is not None and not run.called:  # a fan-out child: its item, position; `run` is the parent
        context["item"], context["index"] = run.item, run.item_index
        context["run"]["id"] = run.parent_run_id
    return context


class ExecutionConfig(Protocol):
    """What executing a step reads of the runtime configuration
    (:class:`sealflow.runtime.config.RuntimeConfig` is one)."""

    tempdir_max_bytes: int
    tempdir_root: str | None
    payload_max_bytes: int
    secrets_dir: str | None
    #: consecutive losses of a step's attempt before it is poison (engine/poison.py)
    lost_attempts: int
    #: how long an outcome-unknown gate waits for a person
    outcome_unknown_timeout_ms: int

    def limits(self, tenant: str) -> Any:
        """The tenant's limits (quotas, bulkheads): :class:`sealflow.runtime.config.TenantLimits`."""


@dataclasses.dataclass(slots=True)
class Services:
    """The engine's collaborators, shared by every execution."""

    store: Store
    registry: Registry
    #: model name -> its provider (:class:`sealflow.providers.base.ModelProvider`)
    provider_for: Callable[[str], Any]
    clock: Clock
    runner: AttemptRunner
    rng: random.Random
    is_cancelled: Callable[[str], bool]
    #: (plan digest, step id, what) -> a compiled JSON Schema validator (steps.checks)
    validators: dict[tuple[str, str, str], Any] = dataclasses.field(default_factory=dict)
    #: the runtime configuration (:class:`sealflow.runtime.config.RuntimeConfig`; None: defaults)
    config: ExecutionConfig | None = None
    #: where declared secrets come from (:class:`sealflow.execution.secrets.SecretChain`;
    #: None: env, then files)
    secret_chain: SecretChain | None = None
    #: the optional capabilities ``store`` declares (heartbeats, usage reservations, ...), decided once (here,
    #: unless the caller decided them already)
    capabilities: Capabilities = None  # type: ignore[assignment]
    #: who holds which permissions now (:class:`sealflow.policy.access.AccessProvider`; None: not checked
    #: here): an agent re-checks an MCP tool's permissions for the run's principal before each call
    access: Any = None

    def __post_init__(self) -> None:
        if self.capabilities is None:
            self.capabilities = Capabilities.of(self.store)


def payload_limit(config: ExecutionConfig | None) -> int:
    """The most a run's input or a step's output may weigh as stored JSON (``payloads.max_bytes``)."""
    return DEFAULT_MAX_PAYLOAD_BYTES if config is None else config.payload_max_bytes


class Execution:
    """One claimed attempt being executed and decided.

    The expression context is built on first use (a step without expressions never pays for it).
    """

    __slots__ = ("services", "plan", "step", "run", "attempt", "now", "resumed", "gate", "_results", "_outputs",
                 "_context", "fencing_token", "callback")

    def __init__(self, services: Services, plan: Plan, step: PlanStep, run: RunRecord, attempt: AttemptRecord,
                 context: dict[str, Any] | None, now: float, *, resumed: bool = False, gate: bool = False,
                 results: Mapping[str, tuple[str, str | None]] | None = None, outputs: OutputCache | None = None):
        self.services, self.plan, self.step, self.run, self.attempt = services, plan, step, run, attempt
        self.now = now
        #: claimed out of ``waiting`` (a timer fired), not a fresh attempt
        self.resumed = resumed
        #: the attempt is the approval gate of ``step`` (``requires_approval_if``)
        self.gate = gate
        self._results, self._outputs, self._context = results, outputs, context
        #: the fencing token of the step's lock for this attempt (None: no lock), see policy/coordination.py
        self.fencing_token: int | None = None
        #: an action step with ``callback:``: where the called system posts the result (execution/callbacks.py)
        self.callback: CallbackHandle | None = None

    @property
    def context(self) -> dict[str, Any]:
        if self._context is None:
            self._context = expression_context(self.run, self._results or {}, self._outputs)
        return self._context

    @property
    def step_id(self) -> str:
        return self.attempt.step_id

    def evaluate(self, text: str, *, output: Any = None, with_output: bool = False) -> Any:
        ctx = self.context
        if with_output:
            ctx = dict(ctx)
            ctx["output"] = output
        return expressions.evaluate(expressions.compile_cached(text), ctx, clock=self.services.clock.now)

    def render(self, value: Any) -> Any:
        return templates.render_value(value, self.context, clock=self.services.clock.now)

    def deadline(self) -> float:
        """When this attempt must be over: its timeout, or the run's deadline if sooner."""
        end = self.now + self.step.timeout_ms / 1000.0
        if self.run.deadline is not None and self.run.deadline < end:
            end = self.run.deadline
        return end


#: a fence is the attempt's number, then how often the attempt was lost, in the low bits
_FENCE_SHIFT = 20


def fence_of(attempt: AttemptRecord) -> int:
    """The fence of an execution of ``attempt``: ``attempt << 20 | leases_lost`` (see :attr:`StepContext.fence`)."""
    return (attempt.attempt << _FENCE_SHIFT) | min(attempt.leases_lost, (1 << _FENCE_SHIFT) - 1)


class StepContext:
    """The ``ctx`` argument of an action (DSL.md "Actions")."""

    __slots__ = ("run_id", "step_id", "attempt", "idempotency_key", "tenant", "deadline", "secrets", "_temp",
                 "_log", "_cancelled", "fencing_token", "fence", "callback")

    def __init__(self, x: Execution, idempotency_key: str | None, cancelled: Callable[[], bool]):
        self.run_id = x.run.id
        self.step_id = x.step_id
        self.attempt = x.attempt.try_no
        self.idempotency_key = idempotency_key
        self.tenant = x.run.tenant
        self.deadline = x.deadline()
        #: the step's ``lock:`` fencing token: larger for every later holder of the lock; pass it to the
        #: resource so it can refuse a writer whose lease has passed (None: the step has no lock)
        self.fencing_token: int | None = x.fencing_token
        #: this execution's fence: larger for every later execution of this step in this run (a new attempt, or
        #: the same attempt run again after its lease was lost); pass it with writes keyed by the step's
        #: idempotency key so the target can refuse a zombie's (docs/runtime.md, "Zombies")
        self.fence: int = fence_of(x.attempt)
        #: a step with ``callback:``: the URL and the single-use token the called system posts the result with
        #: (hand both to it; never log the token); None for other steps
        self.callback: CallbackHandle | None = x.callback
        self.secrets: Mapping[str, str] = _EMPTY
        # execution.tempfiles.TempArea, attached by execution.sandbox
        self._temp = None
        self._log: logging.LoggerAdapter[logging.Logger] | None = None
        self._cancelled = cancelled

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger that tags records with the run and step ids."""
        if self._log is None:
            self._log = logging.LoggerAdapter(logging.getLogger("sealflow.action"),
                                              {"run_id": self.run_id, "step_id": self.step_id})
        return self._log

    def cancelled(self) -> bool:
        """True once the run is being cancelled, this attempt timed out or its lease was lost (another
        worker may have taken it over): stop early if you can, and before any effect."""
        return self._cancelled()

    @property
    def tempdir(self) -> str | None:
        """This attempt's private directory (mode 0700, created on first use, removed when the attempt ends)."""
        return None if self._temp is None else self._temp.path

    def tempdir_usage(self) -> int:
        """Bytes used in :attr:`tempdir`; ``policy_denied`` once over the configured limit."""
        return 0 if self._temp is None else self._temp.usage()

    def __repr__(self) -> str:
        return f"StepContext(run_id={self.run_id!r}, step_id={self.step_id!r}, attempt={self.attempt})"
