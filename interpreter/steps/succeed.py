"""``succeed``: end the run successfully; its output is ``succeed: {output}`` or the plan's ``output``."""

from __future__ import annotations

from sealflow.core.outcomes import EndRun, Outcome
from sealflow.execution.context import Execution


def execute(x: Execution) -> Outcome:
    spec = x.step.succeed_output if x.step.succeed_output is not None else x.plan.output
    return EndRun("completed", output=x.render(spec) if spec is not None else None)
