"""Sealflow: a declarative YAML language for AI workflows, and the interpreter that runs them.

The public API (docs/architecture.md, "Public API")::

    from sealflow import Context, Runtime, StepError, action, open_store

    @action("crm.get_lead", permissions=["crm:read"], effect="read")
    def get_lead(ctx: Context, lead_id: str) -> dict: ...

    rt = Runtime(open_store(), registry, providers)

Importing this package stays light: actions and errors only; ``Runtime``, ``open_store`` and ``Context`` are
loaded on first use. Everything else is internal to its room (docs/architecture.md): ``sealflow.dsl`` (text ->
plan), ``sealflow.core``, ``sealflow.store``, ``sealflow.engine``, ... (plan -> effects), ``sealflow.runtime``
(the facade), ``sealflow.server`` (HTTP API and pages), ``sealflow.operations`` (notifications, retention,
webhooks), ``sealflow.cli`` (the command line), ``sealflow.testing`` (test doubles and the conformance kit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.core.errors import SealflowError, StepError
from sealflow.execution.actions import REGISTRY, Action, Registry, action

if TYPE_CHECKING:
    from sealflow.execution.context import StepContext as Context
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store

__all__ = ["Action", "Context", "REGISTRY", "Registry", "Runtime", "SealflowError", "StepError", "action",
           "open_store"]


def __getattr__(name: str) -> Any:
    if name == "Context":
        from sealflow.execution.context import StepContext

        return StepContext
    if name == "Runtime":
        from sealflow.runtime.facade import Runtime

        return Runtime
    if name == "open_store":
        from sealflow.store import open_store

        return open_store
    raise AttributeError(f"module 'sealflow' has no attribute {name!r}")
