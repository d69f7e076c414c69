"""Sealflow's runtime. Importing this package stays light: actions and errors only."""

from sealflow.interpreter.core.errors import SealflowError, StepError
from sealflow.interpreter.execution.actions import REGISTRY, Action, Registry, action

__all__ = ["action", "Action", "Registry", "REGISTRY", "StepError", "SealflowError"]
