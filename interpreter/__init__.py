"""Sealflow's runtime. Importing this package stays light: actions and errors only."""

from sealflow.interpreter.actions import Action, Registry, REGISTRY, action
from sealflow.interpreter.errors import StepError, SealflowError

__all__ = ["action", "Action", "Registry", "REGISTRY", "StepError", "SealflowError"]
