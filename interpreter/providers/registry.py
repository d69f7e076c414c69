"""Which provider serves which model name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.base import Provider


class ProviderRegistry:
    """Model names (and name prefixes) to providers.

    Exact names win over prefixes; among prefixes the longest wins, so an adapter can
    claim a family (``register(openai, prefixes=["openai/"])``) while a specific name is
    routed elsewhere::

        providers = ProviderRegistry()
        providers.register(LocalModel(), "default")
        providers.get("default").complete(request)
    """

    def __init__(self) -> None:
        self._models: dict[str, Provider] = {}
        self._prefixes: dict[str, Provider] = {}

    def register(self, provider: Provider, *models: str, prefixes: list[str] | tuple[str, ...] = ()) -> Provider:
        """Route each of ``models`` (exact names) and ``prefixes`` to ``provider``; the latest registration wins."""
        if not models and not prefixes:
            raise ValueError("register(provider, 'model-name', ...) needs at least one model name or prefix")
        for name in (*models, *prefixes):
            if not isinstance(name, str) or not name:
                raise ValueError(f"model names and prefixes are non-empty strings, not {name!r}")
        for model in models:
            self._models[model] = provider
        for prefix in prefixes:
            self._prefixes[prefix] = provider
        return provider

    def get(self, model: str) -> Provider:
        """The provider for ``model``; ``StepError("configuration")`` naming the known models if none."""
        provider = self._models.get(model)
        if provider is not None:
            return provider
        for prefix in sorted(self._prefixes, key=len, reverse=True):
            if model.startswith(prefix):
                return self._prefixes[prefix]
        raise StepError("configuration", f"unknown model {model!r}; known: {', '.join(self.known()) or '(none)'}")

    def known(self) -> list[str]:
        """Known model names, then prefixes written as ``prefix*``."""
        return sorted(self._models) + [f"{p}*" for p in sorted(self._prefixes)]

    def __contains__(self, model: str) -> bool:
        try:
            self.get(model)
        except StepError:
            return False
        return True


def provider_lookup(providers: Any) -> Callable[[str], Any]:
    """Normalise ``providers`` (a registry with ``get``, a mapping, or a callable) to ``model -> provider``."""
    if providers is None:
        def missing(model: str) -> Any:
            raise StepError("configuration", f"no model providers are configured, so model {model!r} cannot be "
                                             "called; pass providers=... to the runtime")
        return missing
    if isinstance(providers, Mapping):
        def from_mapping(model: str) -> Any:
            found = providers.get(model)
            if found is None:
                raise StepError("configuration", f"unknown model {model!r}; known: {', '.join(sorted(providers))}")
            return found
        return from_mapping
    if hasattr(providers, "get"):
        get: Callable[[str], Any] = providers.get
        return get
    if callable(providers):
        call: Callable[[str], Any] = providers
        return call
    raise TypeError("providers must be a ProviderRegistry, a mapping of model name to provider, or a callable")
