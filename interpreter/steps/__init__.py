"""Step kinds: one module per kind, each with ``execute(x: Execution) -> Outcome``.

Kinds that call out (``action``, ``ai``, ``agent``) run their call on a runner
thread bounded by the attempt's timeout (:mod:`sealflow.execution.timeouts`); the
others are pure and run inline on the worker thread.
"""

from __future__ import annotations

from collections.abc import Callable

from sealflow.core.kinds import StepKind
from sealflow.core.outcomes import Outcome
from sealflow.execution.context import Execution
from sealflow.steps import action, ai, approval, call, fail, fanout, succeed, switch, wait
from sealflow.steps import set as set_
from sealflow.steps.agent import step as agent

EXECUTORS: dict[str, Callable[[Execution], Outcome]] = {
    StepKind.ACTION: action.execute,
    StepKind.AI: ai.execute,
    StepKind.AGENT: agent.execute,
    StepKind.SWITCH: switch.execute,
    StepKind.APPROVAL: approval.execute,
    StepKind.WAIT: wait.execute,
    StepKind.SET: set_.execute,
    StepKind.FAIL: fail.execute,
    StepKind.SUCCEED: succeed.execute,
    StepKind.MAP: fanout.execute,
    StepKind.PARALLEL: fanout.execute,
    StepKind.CALL: call.execute,
}

__all__ = ["EXECUTORS"]
