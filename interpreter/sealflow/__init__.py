"""Sealflow: a declarative YAML language for AI workflows, and the interpreter that runs them.

The public face for action authors::

    from sealflow import Context, StepError, action

    @action("crm.get_lead", permissions=["crm:read"], effect="read")
    def get_lead(ctx: Context, lead_id: str) -> dict: ...

Everything else lives in the layers below: ``sealflow.dsl`` (text -> plan), ``sealflow.interpreter``
(plan -> effects) and ``sealflow.cli`` (the command line that wires them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.interpreter.core.errors import StepError
from sealflow.interpreter.execution.actions import action

if TYPE_CHECKING:
    from sealflow.interpreter.execution.context import StepContext as Context

__all__ = ["Context", "StepError", "action"]


def __getattr__(name: str) -> Any:
    # Context pulls in the execution layer; import it only when an author asks for it
    if name == "Context":
        from sealflow.interpreter.execution.context import StepContext as Context

        return Context
    raise AttributeError(f"module 'sealflow' has no attribute {name!r}")
