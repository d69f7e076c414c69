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
from typing import Any, Callable, Mapping

from dsl import expressions, templates
from dsl.plan import Plan, PlanStep

from .clock import Clock
from .store.base import AttemptRecord, RunRecord, Store
from .timeouts import AttemptRunner

_EMPTY: Mapping[str, str] = {}


def expression_context(run: RunRecord, results: Mapping[str, tuple[str, str | None]]) -> dict:
    steps = {sid: {"status": status, "output": None if out is None else json.loads(out)}
             for sid, (status, out) in results.items()}
    return {
        "input": run.input,
        "steps": steps,
        "run": {"id": run.id, "workflow": run.workflow, "version": run.workflow_version,
                "initiator": run.initiator, "tenant": run.tenant, "attempt": run.redrives + 1},
        "output": None,
    }


@dataclasses.dataclass(slots=True)
class Services:
    """The engine's collaborators, shared by every execution."""

    store: Store
    registry: Any  # interpreter.actions.Registry
    provider_for: Callable[[str], Any]
    clock: Clock
    runner: AttemptRunner
    rng: random.Random
    is_cancelled: Callable[[str], bool]
    validators: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class Execution:
    """One claimed attempt being executed and decided."""

    services: Services
    plan: Plan
    step: PlanStep
    run: RunRecord
    attempt: AttemptRecord
    context: dict
    now: float
    #: claimed out of ``waiting`` (a timer fired), not a fresh attempt
    resumed: bool = False
    #: the attempt is the approval gate of ``step`` (``requires_approval_if``)
    gate: bool = False

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


class StepContext:
    """The ``ctx`` argument of an action (DSL.md "Actions")."""

    __slots__ = ("run_id", "step_id", "attempt", "idempotency_key", "tenant", "deadline", "secrets", "tempdir",
                 "log", "_cancelled")

    def __init__(self, x: Execution, idempotency_key: str | None, cancelled: Callable[[], bool]):
        self.run_id = x.run.id
        self.step_id = x.step_id
        self.attempt = x.attempt.try_no
        self.idempotency_key = idempotency_key
        self.tenant = x.run.tenant
        self.deadline = x.deadline()
        self.secrets: Mapping[str, str] = _EMPTY
        self.tempdir = None
        self.log = logging.LoggerAdapter(logging.getLogger("sealflow.action"),
                                         {"run_id": self.run_id, "step_id": self.step_id})
        self._cancelled = cancelled

    def cancelled(self) -> bool:
        """True once the run is being cancelled or this attempt timed out: stop early if you can."""
        return self._cancelled()

    def __repr__(self) -> str:
        return f"StepContext(run_id={self.run_id!r}, step_id={self.step_id!r}, attempt={self.attempt})"
