"""Build the provider registry from the runtime configuration's ``models:`` section.

Wiring (the CLI and the runtime configuration call these)::

    registry = load_models(runtime_config.extra, SecretChain(directory=secrets_dir), source=path)
    Runtime(..., providers=registry)                 # `sealflow run/worker --config FILE`
    for row in list_models(runtime_config.extra): ...               # `sealflow models list`
    for check in check_models(runtime_config.extra, secrets, probe=True): ...   # `sealflow models check`

``config`` is the configuration file's top-level map (only its ``models`` key is read).
The registry serves the local model as ``default`` unless ``models:`` names a ``default``,
then each configured name. A model whose API key secret cannot be resolved is still
registered: its calls fail with ``configuration`` (so a step's ``fallback`` moves on) and
``check_models`` reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sealflow.core.errors import StepError
from sealflow.providers.anthropic_messages import AnthropicAdapter
from sealflow.providers.base import ModelRequest, ModelResult, Provider
from sealflow.providers.config import ModelConfig, parse_models
from sealflow.providers.local import LocalModel
from sealflow.providers.openai_chat import OpenAIAdapter
from sealflow.providers.prices import price_for
from sealflow.providers.registry import ProviderRegistry

ADAPTERS = {"openai": OpenAIAdapter, "anthropic": AnthropicAdapter}


class Secrets(Protocol):
    def resolve(self, names: Any) -> Mapping[str, str]: ...


class Misconfigured:
    """Stands in for a model that cannot be built: every call fails with ``configuration``."""

    def __init__(self, name: str, problem: str, secret: str | None = None):
        self.name = f"misconfigured:{name}"
        self.problem = problem
        #: the api_key secret this process does not hold (named, never its value), if that is the problem
        self.secret = secret

    def complete(self, request: ModelRequest) -> ModelResult:
        raise StepError("configuration", self.problem)


def _models(config: Mapping[str, Any] | None, source: str | None) -> dict[str, ModelConfig]:
    return parse_models((config or {}).get("models"), source=source)


def _key(model: ModelConfig, secrets: Secrets | Mapping[str, str] | None) -> str | None:
    """The model's API key; ``StepError("configuration")`` when its secret is missing."""
    name = model.api_key_secret
    if name is None:
        return None
    if secrets is None:
        from sealflow.execution.secrets import SecretChain

        secrets = SecretChain()
    if isinstance(secrets, Mapping):
        from sealflow.execution.secrets import REDACTOR

        if name not in secrets:
            raise StepError("configuration", f"secret {name!r} (api_key of model {model.name!r}) is not configured")
        REDACTOR.remember(name, secrets[name])  # blanked out of logs, audit and recordings from now on
        return secrets[name]
    return secrets.resolve([name])[name]


def build_provider(model: ModelConfig, secrets: Secrets | Mapping[str, str] | None = None) -> Provider:
    """The provider serving one configured model."""
    if model.provider == "local":
        local = LocalModel()
        local.config = model  # type: ignore[attr-defined]  # its rate_limit and circuit_breaker apply too
        return local
    try:
        key = _key(model, secrets)
    except StepError as exc:
        return Misconfigured(model.name, f"model {model.name!r} cannot be called: {exc.message}", model.api_key_secret)
    return ADAPTERS[model.provider](model, key)


def load_models(config: Mapping[str, Any] | None, secrets: Secrets | Mapping[str, str] | None = None, *,
                source: str | None = None) -> ProviderRegistry:
    """The registry for ``config``'s ``models:`` section (``ConfigError`` naming the key if it is invalid)."""
    registry = ProviderRegistry()
    registry.register(LocalModel(), "default")
    for name, model in _models(config, source).items():
        registry.register(build_provider(model, secrets), name)
    return registry


def list_models(config: Mapping[str, Any] | None, *, source: str | None = None) -> list[dict[str, Any]]:
    """One row per logical model (``default`` first), for ``sealflow models list``; no secret values."""
    models = _models(config, source)
    rows: list[dict[str, Any]] = []
    if "default" not in models:
        rows.append({"name": "default", "provider": "local", "model": "local", "endpoint": "", "price": "free",
                     "rate_limit": None})
    for name, m in models.items():
        price = price_for(m)
        limit = m.rate_limit
        rows.append({"name": name, "provider": m.provider, "model": m.model,
                     "endpoint": m.endpoint if m.provider != "local" else "",
                     "price": f"${price.input_per_mtok:g}/${price.output_per_mtok:g} per Mtok in/out"
                     if price else "unknown (cost counted as 0)",
                     "rate_limit": None if limit is None else {"requests_per_minute": limit.requests_per_minute,
                                                               "tokens_per_minute": limit.tokens_per_minute}})
    return rows


def rate_limit_text(limit: Mapping[str, Any] | None) -> str:
    """A row's rate limit as `models list` prints it."""
    if not limit:
        return "no rate limit"
    parts = [f"{limit[k]} {what}/min" for k, what in (("requests_per_minute", "requests"),
                                                      ("tokens_per_minute", "tokens")) if limit.get(k) is not None]
    return "limit " + ", ".join(parts) + " (all workers)"


@dataclass
class ModelCheck:
    """What ``check_models`` found for one model: ``ok`` unless ``problems`` has entries."""

    name: str
    provider: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_models(config: Mapping[str, Any] | None, secrets: Secrets | Mapping[str, str] | None = None, *,
                 source: str | None = None, probe: bool = False, probe_timeout: float = 10.0) -> list[ModelCheck]:
    """Check each configured model: its secret resolves, its price is known and, with ``probe``, that a
    one-token request is answered (the answer itself does not matter, only that the endpoint, the model id
    and the key are accepted). ``ConfigError`` when the section itself is invalid."""
    checks = []
    for name, model in _models(config, source).items():
        check = ModelCheck(name, model.provider)
        provider = build_provider(model, secrets)
        if isinstance(provider, Misconfigured):
            check.problems.append(provider.problem)
        if price_for(model) is None:
            check.notes.append(f"no price for {model.provider} model {model.model!r}: its cost is counted as 0; "
                               "add price: {input_per_mtok: ..., output_per_mtok: ...}")
        if probe and check.ok and model.provider != "local":
            import time

            request = ModelRequest(model=name, prompt="Reply with the word OK.", max_tokens=1,
                                   deadline=time.time() + probe_timeout)
            try:
                provider.complete(request)
            except StepError as exc:
                if exc.error_class not in ("invalid_output", "policy_denied"):
                    check.problems.append(f"{exc.error_class}: {exc.message}")
        checks.append(check)
    return checks
