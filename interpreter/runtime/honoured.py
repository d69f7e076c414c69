"""Refusing at submit what this deployment cannot honour: a declared control is enforced or refused,
never silently ignored.

:data:`NOT_YET` names the workflow fields whose enforcement is not part of this build, with why.
:func:`check` refuses a plan that uses one of them (``configuration``, naming the field and the step), so
a run never starts believing it is protected. ``tests/test_no_silent_field.py`` walks every property of
the workflow schema and requires each to be exercised by a runtime test, compile-time only with a
reason, or listed here.
"""

from __future__ import annotations

from sealflow.core.errors import StepError
from sealflow.dsl.plan import Plan

#: workflow-schema field -> why this build cannot enforce it (remove the entry when its enforcement lands)
NOT_YET: dict[str, str] = {
    # every declared control of the language is enforced by this build (locks, pools, run-level
    # concurrency: policy/coordination.py; priority: service/priority.py; breakers: execution/breakers.py;
    # fan-out, map and parallel: steps/fanout.py with child runs, store/sql/children.py)
}

def uses(plan: Plan) -> list[tuple[str, str | None]]:
    """The ``(field, step id or None)`` pairs of :data:`NOT_YET` fields the plan uses."""
    found: list[tuple[str, str | None]] = []
    if not NOT_YET:  # (every control is enforced: nothing to look for)
        return found
    if "workflow.concurrency" in NOT_YET and plan.concurrency:
        found.append(("workflow.concurrency", None))
    for _, step in plan.all_steps():
        for field in ("lock", "concurrency", "map", "parallel"):
            if f"step.{field}" in NOT_YET and getattr(step, field, None):
                found.append((f"step.{field}", step.id))
    return found


def check(plan: Plan) -> None:
    """Raise ``StepError("configuration")`` naming the first field of ``plan`` this build cannot honour."""
    found = uses(plan)
    if not found:
        return
    field, step = found[0]
    where = f"step {step!r}" if step else "the workflow"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise StepError("configuration", f"{plan.name} v{plan.version}: {where} declares {field.split('.', 1)[1]}:"
                                     f"{more}, which this deployment cannot enforce: {NOT_YET[field]}. The run is "
                                     "refused rather than started unprotected; remove the field, or run it on a "
                                     "sealflow that enforces it")


def refuses(*fields: str) -> bool:
    """Whether this build refuses any of ``fields`` (e.g. ``"step.concurrency"``) at submit."""
    return any(f in NOT_YET for f in fields)
