"""Model providers for ``ai`` and ``agent`` steps.

The runtime renders a step into a :class:`ModelRequest`, finds the provider with
``PROVIDERS.get(request.model)`` (a :class:`ProviderRegistry`) and calls
``provider.complete(request)``, which returns a :class:`ModelResult` or raises a
classified :class:`~sealflow.core.errors.StepError`. The process-wide registry serves
the deterministic :class:`LocalModel` as ``default``. Real models come from the runtime
configuration's ``models:`` section: :func:`.loader.load_models` builds a registry of
adapters (:mod:`.openai_chat` for OpenAI-compatible servers, :mod:`.anthropic_messages`)
from it; :mod:`.recording` records and replays calls. Any other backend is an object
implementing :class:`Provider`, registered by model name or prefix::

    from sealflow.providers import PROVIDERS
    PROVIDERS.register(MyAdapter(), prefixes=["mine/"])

See docs/models.md. (The adapters are not imported here, so that importing this package
stays cheap.)
"""

from sealflow.providers.base import (
    ModelRequest,
    ModelResult,
    Provider,
    ToolCall,
    ToolSpec,
    error_for_status,
    remaining_seconds,
)
from sealflow.providers.local import LeadAssessment, LocalModel, assess_lead
from sealflow.providers.registry import ProviderRegistry


def default_registry() -> ProviderRegistry:
    """A fresh registry serving the local model as ``default``."""
    registry = ProviderRegistry()
    registry.register(LocalModel(), "default")
    return registry


#: the process-wide registry the runtime uses unless it is given another
PROVIDERS = default_registry()

__all__ = ["ModelRequest", "ModelResult", "Provider", "ToolCall", "ToolSpec", "ProviderRegistry", "LocalModel",
           "LeadAssessment", "assess_lead", "default_registry", "error_for_status", "remaining_seconds", "PROVIDERS"]
