"""``map`` and ``parallel``: a child run per item (or branch), then one decision over their ends.

First claim of the step's attempt (:func:`start`): ``map.items`` is evaluated; anything but a list, a list
longer than ``max_items`` or heavier than :data:`MAX_ITEMS_BYTES` (the items are stored, one per child), or an
element that is not JSON fails the step with ``invalid_request``. Otherwise the attempt goes ``waiting`` and
its commit creates the children (:class:`~sealflow.store.changes.Spawn`), each running the
sub-flow's nested plan (:func:`child_plan`, stored content-addressed like any plan). No worker is held while
they run: the store promotes pending children and wakes the attempt when every child has ended or more have
failed than tolerated (:mod:`sealflow.store.sql.children`).

When woken (:func:`collect`): more failures than tolerated fail the step with the class of the first failure
(the one that ended first; its ``on_error`` route, if any, is taken; a fan-out step is never retried whole);
the commit that ends the attempt cancels the children still in flight. Otherwise the output is the list of the
children's outputs (a child's output is its last step's), in item (branch) order, ``null`` for a tolerated
failure; the failures are listed in the attempt's data and audited.
"""

from __future__ import annotations

import threading
from typing import Any

from sealflow.core import leases
from sealflow.core.jsonc import dumps
from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.core.states import RUN_FINAL
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.execution.context import Execution
from sealflow.store.records import ChildRecord, ChildSpec, Spawn

#: the bound on a map's items in bytes (JSON, summed): each is stored with its child run. Keep large
#: payloads behind claim-check keys (store the payload elsewhere, map over the keys).
MAX_ITEMS_BYTES = 8 * 1024 * 1024
#: how many failures the step's record lists (the rest are counted)
LISTED_FAILURES = 100
#: a woken attempt that still finds children in flight looks again after this many seconds
_RECHECK_S = 5.0

_plans: dict[tuple[str, str, int | None], Plan] = {}
_plans_lock = threading.Lock()


def child_plan(plan: Plan, step: PlanStep, branch: int | None = None) -> Plan:
    """The plan a child of ``step`` runs: the map's sub-flow, or branch ``branch`` of a parallel, with the
    parent plan's identity, permissions and action metadata (digested; the same for the same inputs)."""
    key = (plan.digest, step.id, branch)
    got = _plans.get(key)
    if got is not None:
        return got
    if step.map is not None:
        start, steps = step.map.start, step.map.steps
    else:
        assert step.parallel is not None and branch is not None
        start, steps = step.parallel.branches[branch].start, step.parallel.branches[branch].steps
    made = Plan(name=plan.name, version=plan.version, owner=plan.owner, language=plan.language,
                permissions=plan.permissions, budget=plan.budget, priority=plan.priority, start=start, steps=steps,
                actions=plan.actions).with_digest()
    with _plans_lock:
        if len(_plans) > 1024:
            _plans.clear()
        _plans[key] = made
    return made


def subflow_name(plan: Plan, step: PlanStep, branch: int | None = None) -> str:
    """The name a sub-flow's plan is stored under (``name#step``, ``name#step.branch``): never a definition's
    name, so looking a definition up by name never finds a sub-flow (a child run keeps the parent's name)."""
    return f"{plan.name}#{step.id}" + ("" if branch is None else f".{branch}")


def execute(x: Execution) -> Outcome:
    """Start the children, or (they exist: the attempt's data says so) decide over their ends. Claimed again
    after its worker died, the attempt is decided by what the store holds, never started twice."""
    return collect(x) if "fanout" in x.attempt.data else start(x)


def start(x: Execution) -> Outcome:
    step = x.step
    kind = step.kind
    if step.map is not None:
        items = x.evaluate(step.map.items)
        if not isinstance(items, list):
            return Failed("invalid_request", f"map step {step.id!r}: items ({step.map.items}) gave a "
                                             f"{type(items).__name__}, not a list")
        if len(items) > step.map.max_items:
            return Failed("invalid_request", f"map step {step.id!r}: items gave {len(items)} elements, more than its "
                                             f"max_items ({step.map.max_items})")
        try:
            encoded = [dumps(item) for item in items]
        except (TypeError, ValueError) as exc:
            return Failed("invalid_request", f"map step {step.id!r}: an item is not JSON ({exc})")
        size = sum(len(e.encode()) for e in encoded)
        if size > MAX_ITEMS_BYTES:
            return Failed("invalid_request", f"map step {step.id!r}: its items are {size} bytes of JSON, over the "
                                             f"{MAX_ITEMS_BYTES}-byte bound (each item is stored with its child run); "
                                             "keep large payloads behind claim-check keys and map over the keys")
        plan = child_plan(x.plan, step)
        first = leases.lease_ms(plan.step(plan.start).timeout_ms)
        children = tuple(ChildSpec(i, plan.digest, plan.start, first, e) for i, e in enumerate(encoded))
        plans: tuple[tuple[str, str, int, str], ...] = (
            (plan.digest, subflow_name(x.plan, step), plan.version, plan.to_json(indent=None)),)
        concurrency, tolerated = step.map.concurrency, step.map.tolerated(len(items))
    else:
        assert step.parallel is not None
        made = [child_plan(x.plan, step, j) for j in range(len(step.parallel.branches))]
        children = tuple(ChildSpec(j, p.digest, p.start, leases.lease_ms(p.step(p.start).timeout_ms))
                         for j, p in enumerate(made))
        plans = tuple({p.digest: (p.digest, subflow_name(x.plan, step, j), p.version, p.to_json(indent=None))
                       for j, p in enumerate(made)}.values())
        concurrency, tolerated = len(made), 0
    if not children:
        return Succeeded([])
    data = {"fanout": {"kind": kind, "items": len(children), "concurrency": concurrency, "tolerated": tolerated}}
    return Waiting(None, None, data, spawn=Spawn(children, concurrency, tolerated, plans))


def failures(kids: list[ChildRecord]) -> list[ChildRecord]:
    """The children that ended without completing, in the order they ended."""
    return sorted((k for k in kids if k.state in RUN_FINAL and k.state != "completed"),
                  key=lambda k: (k.updated_at, k.index))


def _listed(failed: list[ChildRecord]) -> list[dict[str, Any]]:
    return [{"index": k.index, "run": k.id, "state": k.state, "error_class": k.error_class,
             "message": k.error_message} for k in failed[:LISTED_FAILURES]]


def collect(x: Execution) -> Outcome:
    step, att = x.step, x.attempt
    store = x.services.store
    kids = store.children(x.run.id, att.step_id, att.attempt)
    info = dict(att.data.get("fanout") or {})
    tolerated = int(info.get("tolerated", 0))
    failed = failures(kids)
    data = {**att.data, "fanout": {**info, "failed": len(failed), "failures": _listed(failed)}}
    over = next((k for k in failed if k.error_class == "budget_exceeded"), None)
    if over is not None:  # a budget stops the fan-out whatever the tolerance
        return Failed("budget_exceeded", f"{step.kind} step {step.id!r} stopped: item {over.index} "
                                         f"{over.error_message}", data=data, detail={"failures": _listed(failed)})
    if len(failed) > tolerated:
        first = failed[0]
        what = "branch" if step.kind == "parallel" else "item"
        return Failed(first.error_class or "internal",
                      f"{step.kind} step {step.id!r}: {what} {first.index} failed ({first.error_class}: "
                      f"{first.error_message}); {len(failed)} of {len(kids)} failed, {tolerated} tolerated",
                      data=data, detail={"failures": _listed(failed)})
    if any(k.state not in RUN_FINAL for k in kids):  # woken early: look again shortly
        return Waiting(x.now + _RECHECK_S, "wait", att.data)
    output = [k.output if k.state == "completed" else None for k in kids]
    return Succeeded(output, data=data, detail={"failures": _listed(failed)} if failed else None)
