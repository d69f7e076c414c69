"""``agent``: a bounded model/tool loop. Not available yet: it needs a provider with tool use.

The slot is kept so plans with agent steps compile and fail cleanly at run
time with a ``configuration`` error (never retried) that says what is missing.
"""

from __future__ import annotations

from ..context import Execution
from ..outcomes import Failed, Outcome


def execute(x: Execution) -> Outcome:
    model = x.step.agent.model if x.step.agent else "?"
    return Failed("configuration", f"agent steps need a provider with tool use, and none serves model {model!r} "
                                   "in this build; use an ai step plus action steps instead")
