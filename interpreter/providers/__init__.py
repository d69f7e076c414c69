"""Model providers for ``ai`` and ``agent`` steps.

The runtime renders a step into a :class:`ModelRequest`, finds the provider with
``PROVIDERS.get(request.model)`` (a :class:`ProviderRegistry`) and calls
``provider.complete(request)``, which returns a :class:`ModelResult` or raises a
classified :class:`~sealflow.interpreter.core.errors.StepError`. The only built-in provider is the
deterministic :class:`LocalModel`, registered as ``default``; real providers are
adapters implementing :class:`Provider` and registered by model name or prefix::

    from sealflow.interpreter.providers import PROVIDERS
    PROVIDERS.register(MyOpenAIAdapter(), prefixes=["openai/"])
"""

from sealflow.interpreter.providers.base import ModelRequest, ModelResult, Provider, ToolCall, ToolSpec, error_for_status, remaining_seconds
from sealflow.interpreter.providers.local import LeadAssessment, LocalModel, assess_lead
from sealflow.interpreter.providers.registry import ProviderRegistry


def default_registry() -> ProviderRegistry:
    """A fresh registry serving the local model as ``default``."""
    registry = ProviderRegistry()
    registry.register(LocalModel(), "default")
    return registry


#: the process-wide registry the runtime uses unless it is given another
PROVIDERS = default_registry()

__all__ = ["ModelRequest", "ModelResult", "Provider", "ToolCall", "ToolSpec", "ProviderRegistry", "LocalModel",
           "LeadAssessment", "assess_lead", "default_registry", "error_for_status", "remaining_seconds", "PROVIDERS"]
