"""Undoing a failed fan-out's completed items: each completed child run compensates its own steps.

When a ``map`` or ``parallel`` step fails (more failures than tolerated, a budget, a bad item list after a
redrive), the commit that ends its attempt cancels the children still in flight (the store does that) and,
built here, starts compensation in every *completed* child whose sub-flow has completed steps with
``compensate:``: the child goes ``completed -> compensating`` with its first ``<step>@compensate`` attempt
scheduled, in the same transaction (:meth:`~sealflow.interpreter.store.sqlite.children.ChildrenMixin._undo_child`).
From there it is :mod:`sealflow.interpreter.engine.compensation` unchanged, per child run: newest completed
step first, each through the ledger under ``<child run>:<step>:compensate``, retried by ``compensate.retry``,
a compensation failing for good quarantines that child. The child then ends ``cancelled``. Children undo
concurrently (they are independent items); within one child, newest first.
"""

from __future__ import annotations

import dataclasses

from sealflow.interpreter.engine import compensation
from sealflow.interpreter.execution.context import Execution
from sealflow.interpreter.steps.fanout import child_plan
from sealflow.interpreter.store.base import Commit

_FAILED = ("failed", "timed_out")


def undo_completed(x: Execution, commit: Commit) -> Commit:
    """``commit`` (ending a fan-out attempt) with the compensations of its completed children to start."""
    step = commit.step
    if not commit.close_fanout or step is None or step.state not in _FAILED:
        return commit
    store = x.services.store
    undo = []
    why = (f"{x.step.kind} step {x.step.id!r} of run {x.run.id} failed ({step.error_class}); this item's steps "
           "are undone")
    for child in store.children(x.run.id, step.step_id, step.attempt):
        if child.state != "completed":
            continue
        plan = child_plan(x.plan, x.step, None if x.step.map is not None else child.index)
        if not compensation.has_compensations(plan):
            continue
        order = compensation.queue(store, child.id, plan)
        if order:
            data = {"end": "cancelled", "why": why, "dead_letter": None}
            undo.append((child.id, compensation.first_attempt(plan, order, data, x.now)))
    if not undo:
        return commit
    return dataclasses.replace(commit, undo_children=tuple(undo))
