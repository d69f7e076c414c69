"""``fail``: end the run as failed with the step's error class and rendered message."""

from __future__ import annotations

from sealflow.core.outcomes import EndRun, Outcome
from sealflow.dsl.expressions import to_text
from sealflow.execution.context import Execution
from sealflow.steps.sections import section


def execute(x: Execution) -> Outcome:
    spec = section(x, x.step.fail, "fail")
    message = to_text(x.render(spec.message)) if spec.message else spec.error
    return EndRun("failed", error_class=spec.error, message=message)
