"""``agent``: a bounded model/tool loop; the model proposes, the system decides.

The loop itself, the checks every proposed tool call passes before it runs, the
budgets and the idempotency of tool calls are in :mod:`sealflow.steps.agent.loop`.
"""

from __future__ import annotations

from sealflow.core.outcomes import Outcome
from sealflow.execution.context import Execution


def execute(x: Execution) -> Outcome:
    from sealflow.steps.agent.loop import run

    return run(x)
