"""Locks and pools: which slots an attempt needs before it starts (the store grants them or makes it wait).

* ``lock: <template>`` on a step: one holder at a time of ``lock:<tenant>:<rendered name>``, for the
  attempt (released when the attempt ends, expired with its lease); the lock's fencing token is given
  to the action as ``ctx.fencing_token``. Locks are per tenant: two tenants naming the same resource do
  not share (or learn of) a lock.
* ``concurrency: NAME`` on a step: at most ``pools.NAME`` (runtime configuration) attempts at once of
  ``pool:NAME``, across every process and tenant (a pool guards a shared downstream). A pool the
  configuration does not list takes the ``pools."*"`` limit, else :data:`DEFAULT_POOL_LIMIT` (1), with a
  warning at submit (:func:`check_plan`): never unlimited.
* run-level ``concurrency: {key, limit}``: at most ``limit`` runs of the tenant with the same rendered
  ``key`` at once, held from the run's first attempt until the run is final; the key is evaluated once
  per run, when its first attempt is claimed (from ``input`` and what else the expression context has).

The slots and their rules (all or nothing, arrival order, durable waiting, leases) are the store's:
:mod:`sealflow.store.coordination`. Compensation attempts and approval gates take no step
slot (they run after, or outside, the step's own attempts); a run that is being cancelled or
compensated asks for no slot at all (its attempt does not start, or undoes work already done).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from sealflow.core.errors import StepError
from sealflow.core.ids import StepRef, StepRole
from sealflow.dsl.errors import DslError
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.store.coordination import Grant, SlotRequest

log = logging.getLogger("sealflow.coordination")
#: a pool the runtime configuration does not list (and no ``"*"`` entry): at most this many at once
DEFAULT_POOL_LIMIT = 1
ANY_POOL = "*"
_WARNED: set[str] = set()
#: runs that take a run-level slot (an undoing or cancelled run does not start anything new)
_STARTING = ("queued", "running", "waiting")


def needs_slots(plan: Plan, step: PlanStep) -> bool:
    return bool(step.lock or step.concurrency or plan.concurrency)


def requests(plan: Plan, step: PlanStep, run: Any, step_id: str, render: Callable[[str], Any],
             pools: Mapping[str, int]) -> tuple[SlotRequest, ...]:
    """The slots the attempt ``step_id`` of ``run`` needs (``render`` evaluates a template in the run's
    expression context). Raises :class:`StepError` (``invalid_request``) when a template fails."""
    out: list[SlotRequest] = []
    if run.state not in _STARTING:  # a cancelling run's attempt does not start; a compensating run's undo
        return ()
    if StepRef.parse(step_id).role is StepRole.STEP:
        if step.lock:
            out.append(SlotRequest(f"lock:{run.tenant}:{_name(render, step.lock, f'the lock of step {step.id!r}')}"))
        if step.concurrency:
            out.append(SlotRequest(f"pool:{step.concurrency}", pool_limit(pools, step.concurrency)))
    if plan.concurrency:
        key = _name(render, plan.concurrency["key"], f"the concurrency key of workflow {plan.name!r}")
        out.append(SlotRequest(f"run:{run.tenant}:{key}", int(plan.concurrency.get("limit") or 1), "run"))
    return tuple(out)


def pool_limit(pools: Mapping[str, int], name: str) -> int:
    """The pool's limit: its own entry, else the ``"*"`` entry, else :data:`DEFAULT_POOL_LIMIT`."""
    return pools.get(name) or pools.get(ANY_POOL) or DEFAULT_POOL_LIMIT


#: plan digest -> the (step id, pool name) pairs of its steps that run in a pool (a plan is immutable)
_POOLS_OF: dict[str, tuple[tuple[str, str], ...]] = {}


def check_plan(plan: Plan, pools: Mapping[str, int]) -> None:
    """At submit: warn (once per pool) about a pool the runtime configuration does not list; it runs at
    the default limit (``pools."*"``, else 1), never unlimited."""
    used = _POOLS_OF.get(plan.digest) if plan.digest else None
    if used is None:
        used = tuple((step.id, step.concurrency) for _, step in plan.all_steps()  # fan-out sub-flows too
                     if step.concurrency)
        if plan.digest:
            if len(_POOLS_OF) >= 1024:
                _POOLS_OF.clear()
            _POOLS_OF[plan.digest] = used
    for step_id, name in used:
        if name not in pools and ANY_POOL not in pools and name not in _WARNED:
            _WARNED.add(name)
            log.warning("step %r of %s runs in pool %r, which the runtime configuration does not list: at most "
                        "%d attempt(s) at once; set pools.%s (or pools.\"*\") to choose", step_id, plan.name, name,
                        DEFAULT_POOL_LIMIT, name)


def fencing_token(grants: tuple[Grant, ...]) -> int | None:
    """The lock's fencing token among an attempt's grants (None: the step has no lock)."""
    for grant in grants:
        if grant.name.startswith("lock:"):
            return grant.fence
    return None


def _name(render: Callable[[str], Any], template: str, what: str) -> str:
    try:
        value = render(template)
    except DslError as exc:
        raise StepError("invalid_request", f"{what} ({template!r}) failed: {exc}") from None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if value is None or not text.strip():
        raise StepError("invalid_request", f"{what} ({template!r}) evaluated to nothing; it must name something")
    return text
