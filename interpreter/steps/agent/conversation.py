"""What the parts of an agent step share: an allow-listed :class:`Tool`, and the :class:`Conversation` the
loop keeps (:class:`~sealflow.steps.agent.loop.AgentLoop`), as the approval gates
(:mod:`~sealflow.steps.agent.approval`) and the pacing of model turns (:mod:`~sealflow.steps.agent.pacing`)
read and change it. Those modules are imported by the loop, so they name it by this protocol, not its class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from sealflow.core.outcomes import Failed
from sealflow.dsl.plan import AgentPlan
from sealflow.execution.actions import Action
from sealflow.execution.context import Execution
from sealflow.providers.base import ToolSpec


@dataclasses.dataclass
class Tool:
    """An allow-listed action, its spec for the model, and why it may not run (None: it may)."""

    name: str
    action: Action
    spec: ToolSpec
    #: the compiled JSON Schema validator of its arguments
    validator: Any
    denied: str | None = None
    approval: bool = False  # each call waits for a person's approval
    #: the MCP server of an MCP tool (steps/agent/mcp.py); None: a registered action
    server: str | None = None


class Conversation(Protocol):
    """One attempt of an agent step, as the approval gates and the pacing of turns use it."""

    x: Execution
    agent: AgentPlan
    transcript: list[dict[str, Any]]
    #: the minimised record of each proposed call
    calls: list[dict[str, Any]]
    tools: dict[str, Tool]
    tokens: int
    cost: float
    tool_calls: int
    turns: int
    refusals: int
    #: tokens, cost and tool calls already charged to the run (by a wait for a rate limit)
    billed: tuple[int, float, int]

    def unbilled(self) -> tuple[int, float, int]: ...

    def fail(self, error_class: str, message: str, retry_after: float | None = None, *,
             timed_out: bool = False, run_scope: bool = False) -> Failed: ...

    def execute(self, tool: Tool, arguments: dict[str, Any], entry: dict[str, Any],
                turn: dict[str, Any]) -> Failed | None: ...
