"""``agent``: a bounded model/tool loop; the model proposes, the system decides.

The loop itself, the checks every proposed tool call passes before it runs, the
budgets and the idempotency of tool calls are in :mod:`interpreter.agent_loop`.
"""

from __future__ import annotations

from ..context import Execution
from ..outcomes import Outcome


def execute(x: Execution) -> Outcome:
    from ..agent_loop import run

    return run(x)
