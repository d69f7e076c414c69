"""Sealflow's runtime. Importing this package stays light: actions and errors only."""

from sealflow.interpreter.execution.actions import Action, Registry, REGISTRY, action
from sealflow.interpreter.core.errors import StepError, SealflowError

__all__ = ["action", "Action", "Registry", "REGISTRY", "StepError", "SealflowError"]
