"""What the engine does for fan-out child runs: what a child sees of its parent, trusting a child, and
undoing a failed fan-out's completed items.

A child's expressions see its parent's steps before the fan-out (:class:`Parents`: read once per fan-out
attempt and process, they cannot change while it waits) and its budget checks the parent's counters and
deadline (read when the plan declares a budget). A trust-gated worker trusts a child as its parent run,
provided the child's plan is the sub-flow the parent's verified plan derives (:func:`trusted`).

Undoing (:func:`undo_completed`): each completed child run compensates its own steps.

When a ``map`` or ``parallel`` step fails (more failures than tolerated, a budget, a bad item list after a
redrive), the commit that ends its attempt cancels the children still in flight (the store does that) and,
built here, the first compensation attempt of every *completed* child whose sub-flow has completed steps with
``compensate:``. The store undoes those children one at a time, newest completed first, across items
(:meth:`~sealflow.store.sql.children.ChildrenMixin._undo_next`): the newest goes
``completed -> compensating`` in that commit, each next one in the transaction that ends the previous one's
undo. Within a child it is :mod:`sealflow.engine.compensation` unchanged: newest completed step
first, each through the ledger under ``<child run>:<step>:compensate``, retried by ``compensate.retry``, a
compensation failing for good quarantines that child (the next child's undo still starts: items are
independent). The child then ends ``cancelled``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from sealflow.core.outcomes import Failed
from sealflow.dsl.plan import BudgetPlan, Plan
from sealflow.engine import compensation
from sealflow.execution.context import Execution
from sealflow.policy import trustgate
from sealflow.steps.fanout import child_plan
from sealflow.store.base import Commit, NextAttempt, RunRecord, Store

_FAILED = ("failed", "timed_out")
_NO_BUDGET = BudgetPlan()

#: a run's results: step id -> (status, output JSON text or None)
_Results = dict[str, tuple[str, str | None]]


class Parents:
    """The parent run as its fan-out children see it (one per engine; bounded cache). A child's row does not
    copy the parent's input (``null``): it is the parent's, read with the parent's results."""

    def __init__(self, store: Store, size: int = 256):
        self.store = store
        #: (parent run, its fan-out step, that step's attempt) -> (the parent's results, the parent's input)
        self._seen: dict[tuple[str | None, str | None, int | None], tuple[_Results, Any]] = {}
        self._size = size

    def adopt(self, child: RunRecord) -> _Results:
        """The parent's results, and ``child.input`` set to the parent's input: both fixed while the fan-out
        attempt waits, so read once per (parent, step, attempt) in this process."""
        key = (child.parent_run_id, child.parent_step_id, child.parent_attempt)
        got = self._seen.get(key)
        if got is None:
            parent = child.parent_run_id or ""
            got = (self.store.results(parent), self.store.get_run(parent).input)
            if len(self._seen) >= self._size:
                self._seen.clear()
            self._seen[key] = got
        child.input = got[1]
        return got[0]

    def child_view(self, child: RunRecord, plan: Plan, results: Mapping[str, tuple[str, str | None]]) -> _Results:
        """``results`` with the parent's before them; under a budget ``child`` carries the parent's counters
        (every child's usage is added to them by the store) and deadline from here on."""
        if plan.budget != _NO_BUDGET:
            child.steps_executed, child.tokens, child.cost_usd, child.tool_calls, child.deadline = \
                self.store.run_usage(child.parent_run_id or "")
        return {**self.adopt(child), **results}


def derived(plan: Plan, step_id: str | None) -> set[str]:
    """The plan digests a child of ``plan``'s step ``step_id`` may run: a map's sub-flow, a parallel's branches,
    the workflow a call pins (empty: no such step, or one that starts no children)."""
    fan = plan.step_map().get(step_id or "")
    if fan is None:
        return set()
    if fan.call is not None:
        return {fan.call.digest}
    branches: tuple[None] | range = (None,) if fan.map is not None else \
        range(len(fan.parallel.branches)) if fan.parallel is not None else range(0)
    return {child_plan(plan, fan, b).digest for b in branches}


#: how many parents a child's trust walks up (calls nest at most CALL_DEPTH_MAX deep, each may fan out once)
_MAX_CHAIN = 16


def trusted(gate: trustgate.TrustGate | None, store: Store, plan_of: Callable[[str], Plan],
            x: Execution) -> Failed | None:
    """The trust gate's refusal of the run. A child run (a fan-out's item or branch, a called workflow) is trusted
    as its root run, provided each run between is what its parent's (verified) plan derives for it: a sub-flow
    (:func:`steps.fanout.child_plan`) or the digest a ``call`` pins (whose signature the root's verification
    checked under the same trust policy: sealflow.dsl.trust)."""
    if gate is None or x.run.parent_run_id is None:
        return trustgate.check(gate, x)
    chain: list[tuple[RunRecord, RunRecord]] = []
    run = x.run
    while run.parent_run_id is not None:
        if len(chain) >= _MAX_CHAIN:
            return Failed("unauthorized", f"run {x.run.id}: its parents nest deeper than {_MAX_CHAIN}; refused")
        parent = store.get_run(run.parent_run_id)
        chain.append((run, parent))
        run = parent
    refused = trustgate.check(gate, x, run=run)
    if refused is not None:
        return refused
    for child, parent in reversed(chain):
        if child.plan_digest not in derived(plan_of(parent.plan_digest), child.parent_step_id):
            what = "the workflow its step calls" if child.called else "a sub-flow"
            return Failed("unauthorized", f"run {child.id}: its plan is not {what} of its parent run's verified "
                                          "plan; refused")
    return None


def undo_completed(x: Execution, commit: Commit) -> Commit:
    """``commit`` (ending a fan-out attempt) with the compensations of its completed children to start."""
    step = commit.step
    if not commit.close_fanout or step is None or step.state not in _FAILED or x.step.call is not None:
        return commit  # (a failed call's child did not complete: it undid its own steps as it failed)
    store = x.services.store
    undo: list[tuple[str, NextAttempt]] = []
    seen, undoable = 0, False
    why = (f"{x.step.kind} step {x.step.id!r} of run {x.run.id} failed ({step.error_class}); this item's steps "
           "are undone")
    for child in store.children(x.run.id, step.step_id, step.attempt):
        plan = child_plan(x.plan, x.step, None if x.step.map is not None else child.index)
        if not compensation.has_compensations(plan):
            continue
        undoable = True
        if child.state != "completed":
            continue
        seen += 1
        order = compensation.queue(store, child.id, plan)
        if order:
            data = {"end": "cancelled", "why": why, "dead_letter": None}
            undo.append((child.id, compensation.first_attempt(plan, order, data, x.now)))
    if not undoable:
        return commit
    return dataclasses.replace(commit, undo_children=tuple(undo), undo_seen=seen)
