"""``switch``: the first branch whose ``when`` is true, else the default branch, else ``next``."""

from __future__ import annotations

from sealflow.core.outcomes import Outcome, Succeeded
from sealflow.dsl.expressions import truthy
from sealflow.execution.context import Execution


def execute(x: Execution) -> Outcome:
    for index, case in enumerate(x.step.switch or ()):
        if case.when is None or truthy(x.evaluate(case.when)):
            return Succeeded({"branch": index, "next": case.next}, next=case.next)
    return Succeeded({"branch": None, "next": x.step.next}, next=x.step.next)
