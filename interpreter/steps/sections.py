"""The section of a step that its kind always has (``x.step.ai`` of an ``ai`` step), narrowed from optional.

:class:`~sealflow.dsl.plan.PlanStep` holds every kind's section as an optional field; the compiler writes the
one its kind needs. A plan without it was not made by the compiler: the step fails as an internal error, as it
did before this check when the missing section was first read.
"""

from __future__ import annotations

from typing import TypeVar

from sealflow.execution.context import Execution

T = TypeVar("T")


def section(x: Execution, value: T | None, what: str) -> T:
    """``value`` (``what``: its name in the plan, for the error), which ``x.step``'s kind always has."""
    if value is None:
        raise LookupError(f"step {x.step.id!r} ({x.step.kind}) has no {what} in its plan")
    return value
