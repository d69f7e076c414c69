"""The engine's own gates, as middleware (:mod:`.hooks`): they come first in every engine, in this order.

* :class:`TrustHook`: the trust gate (:mod:`sealflow.policy.trustgate`): a run whose definition this process
  does not trust is refused (a fan-out child as its parent run, :func:`.fanout.trusted`);
* :class:`BudgetHook`: a run being cancelled, or an attempt that would exceed a budget, does not start
  (:func:`sealflow.policy.budgets.before`); what an attempt used is charged after it
  (:func:`sealflow.policy.budgets.after`);
* :class:`AccessHook`: a sensitive step is reauthorised against who holds which permissions now
  (:func:`sealflow.policy.authz.reauthorize`);
* :class:`BreakerHook`: the step's circuit breaker, if it names one: an open breaker fails the attempt without
  running it (:func:`sealflow.execution.breakers.guarded`).
"""

from __future__ import annotations

from collections.abc import Callable

from sealflow.core.outcomes import Failed, Outcome
from sealflow.dsl.plan import Plan
from sealflow.engine import fanout
from sealflow.engine.hooks import EngineHooks
from sealflow.execution import breakers
from sealflow.execution.context import Execution
from sealflow.policy import authz, budgets, trustgate
from sealflow.policy.access import AccessProvider
from sealflow.store.base import Store


class TrustHook(EngineHooks):
    name, gating = "trust_gate", True

    def __init__(self, gate: trustgate.TrustGate, store: Store, plan_of: Callable[[str], Plan]):
        self.gate, self.store, self.plan_of = gate, store, plan_of

    def before_execute(self, x: Execution) -> Failed | None:
        return fanout.trusted(self.gate, self.store, self.plan_of, x)


class BudgetHook(EngineHooks):
    name, gating = "budgets", True

    def __init__(self, plan_of: Callable[[str], Plan]):
        self.plan_of = plan_of

    def before_execute(self, x: Execution) -> Failed | None:
        """Why the claimed attempt must not start: the run is being cancelled, or it would exceed a budget (its
        own, or one of a run that called it)."""
        if x.run.state == "cancelling":
            return Failed("cancelled", f"the run is being cancelled; step {x.step.id!r} did not start")
        return budgets.before(x) or budgets.callers(x, self.plan_of)

    def after_execute(self, x: Execution, outcome: Outcome) -> Outcome:
        return budgets.after(x, outcome)


class AccessHook(EngineHooks):
    name, gating = "access", True

    def __init__(self, access: AccessProvider):
        self.access = access

    def before_execute(self, x: Execution) -> Failed | None:
        return authz.reauthorize(self.access, x)


class BreakerHook(EngineHooks):
    name, gating = "breakers", True

    def around_execute(self, x: Execution, execute: Callable[[Execution], Outcome]) -> Outcome:
        return breakers.guarded(x, execute)
