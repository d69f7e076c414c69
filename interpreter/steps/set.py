"""``set``: evaluate each value (a bare expression); the step's output is the resulting map."""

from __future__ import annotations

from sealflow.core.outcomes import Outcome, Succeeded
from sealflow.execution.context import Execution


def execute(x: Execution) -> Outcome:
    out = {}
    for name, value in (x.step.assign or {}).items():
        out[name] = x.evaluate(value) if isinstance(value, str) else value
    return Succeeded(out)
