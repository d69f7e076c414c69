"""The ``models:`` section of the runtime configuration: logical model names to providers.

::

    models:
      fast:                                  # used as `model: fast` or in `fallback: [fast]`
        provider: openai                     # openai | anthropic | local
        base_url: http://127.0.0.1:8000/v1   # default: the provider's public endpoint
        model: gpt-4o-mini                   # the provider's model id, sent in the request
        api_key: {secret: OPENAI_API_KEY}    # a secret reference; an inline key is refused
        timeout: 30s                         # per request; the step's timeout still bounds it
        price: {input_per_mtok: 0.15, output_per_mtok: 0.60}   # default: prices.json
        rate_limit: {requests_per_minute: 500, tokens_per_minute: 200000}
        circuit_breaker: {failures: 5, window: 60s, cool_down: 30s}

:func:`parse_models` checks the section and returns :class:`ModelConfig` values; every
error names the file and the key (``config.yaml: models.fast.timeout: ...``) and never
repeats an inline key. ``circuit_breaker`` is enforced on every call to the model (breaker
``model:<name>``, its state in the store: :mod:`sealflow.execution.breakers`).
``rate_limit`` is enforced on every call to the model by every worker sharing the store; a call over it
waits durably (:mod:`sealflow.policy.limits`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sealflow.core.config_maps import config_map
from sealflow.core.errors import ConfigError

PROVIDERS = ("openai", "anthropic", "local")
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1"}
DEFAULT_TIMEOUT = 60.0
_KEYS = ("provider", "base_url", "model", "api_key", "timeout", "price", "rate_limit", "circuit_breaker",
         "max_tokens", "strict_output")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}$")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1_000_000


@dataclass(frozen=True)
class RateLimit:
    """Requests and tokens per minute, shared by every worker (:mod:`sealflow.policy.limits`)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


@dataclass(frozen=True)
class CircuitBreaker:
    """Open after ``failures`` within ``window`` seconds; try again after ``cool_down`` seconds."""

    failures: int = 5
    window: float = 60.0
    cool_down: float = 30.0


@dataclass(frozen=True)
class ModelConfig:
    """One logical model. ``api_key_secret`` is the *name* of a secret, never its value."""

    name: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_secret: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    price: Price | None = None
    rate_limit: RateLimit | None = None
    circuit_breaker: CircuitBreaker | None = None
    max_tokens: int | None = None
    strict_output: bool = True
    where: str = field(default="", compare=False)

    @property
    def endpoint(self) -> str:
        """``base_url`` or the provider's public endpoint."""
        return (self.base_url or DEFAULT_BASE_URLS.get(self.provider, "")).rstrip("/")


def parse_duration(value: Any, where: str) -> float:
    """Seconds from a number or a text such as ``30s``, ``500ms``, ``2m``, ``1h``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: give a duration such as 30s, 500ms or 2m, not {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        got = _DURATION.match(str(value))
        if got is None:
            raise ConfigError(f"{where}: {value!r} is not a duration; write e.g. 30s, 500ms or 2m")
        seconds = float(got.group(1)) * _SECONDS[got.group(2) or "s"]
    if seconds <= 0:
        raise ConfigError(f"{where}: a duration must be positive")
    return seconds


def _number(value: Any, where: str, *, integer: bool = False, positive: bool = True) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ConfigError(f"{where}: expected {'an integer' if integer else 'a number'}, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where}: must be {'positive' if positive else 'zero or more'}, not {value!r}")
    return value


def _map(raw: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    return config_map(raw, keys, where)


def parse_price(raw: Any, where: str) -> Price:
    data = _map(raw, ("input_per_mtok", "output_per_mtok"), where)
    for key in ("input_per_mtok", "output_per_mtok"):
        if key not in data:
            raise ConfigError(f"{where}: missing {key} (USD per million tokens)")
    return Price(float(_number(data["input_per_mtok"], f"{where}.input_per_mtok", positive=False)),
                 float(_number(data["output_per_mtok"], f"{where}.output_per_mtok", positive=False)))


def _secret_ref(raw: Any, where: str) -> str:
    if isinstance(raw, str):
        # never echo the value: it may be a real key
        raise ConfigError(f"{where}: an inline API key is refused (it would sit in a file and in logs); write "
                          "api_key: {secret: NAME} and provide the secret NAME through SEALFLOW_SECRET_NAME or "
                          "the secrets directory")
    data = _map(raw, ("secret",), where)
    name = data.get("secret")
    if not isinstance(name, str) or not _SECRET_NAME.match(name):
        raise ConfigError(f"{where}.secret: expected a secret name (letters, digits, '_', '.', '-')")
    return name


def _check_base_url(url: Any, where: str) -> None:
    """An http(s) URL with a host and a valid port, and nothing a credential hides in (a user or password, a
    query, a fragment: they would show in ``models list``, ``doctor`` and errors); the URL is never echoed."""
    expected = f"{where}: expected an http(s) URL such as http://127.0.0.1:8000/v1"
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(expected)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number from 0 to 65535
    except ValueError:
        raise ConfigError(expected) from None
    if not parts.hostname:
        raise ConfigError(expected)
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{where}: a user or password in the URL is refused (it would show in `models list`, "
                          "`doctor` and logs); give the key as api_key: {secret: NAME}")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise ConfigError(f"{where}: a query or fragment in the URL is refused (a key in it would show in `models "
                          "list`, `doctor` and logs, and the request path is appended to it); give the key as "
                          "api_key: {secret: NAME}")


def parse_model(name: str, raw: Any, where: str) -> ModelConfig:
    """One entry of ``models:`` (``where`` locates it, e.g. ``config.yaml: models.fast``)."""
    data = _map(raw, _KEYS, where)
    provider = data.get("provider")
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider: expected one of {', '.join(PROVIDERS)}, not {provider!r}")
    model = data.get("model", name if provider == "local" else None)
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{where}.model: the provider's model id is required (e.g. gpt-4o-mini)")
    base_url = data.get("base_url")
    if base_url is not None:
        _check_base_url(base_url, f"{where}.base_url")
    if provider == "local" and base_url is not None:
        raise ConfigError(f"{where}.base_url: the local model has no endpoint; remove base_url")
    secret = _secret_ref(data["api_key"], f"{where}.api_key") if "api_key" in data else None
    if secret is None and provider != "local" and base_url is None:
        raise ConfigError(f"{where}.api_key: the public {provider} endpoint needs a key; write "
                          "api_key: {secret: NAME}")
    timeout = parse_duration(data["timeout"], f"{where}.timeout") if "timeout" in data else DEFAULT_TIMEOUT
    price = parse_price(data["price"], f"{where}.price") if "price" in data else None
    rate = None
    if "rate_limit" in data:
        r = _map(data["rate_limit"], ("requests_per_minute", "tokens_per_minute"), f"{where}.rate_limit")
        rate = RateLimit(*(_number(r[k], f"{where}.rate_limit.{k}", integer=True) if k in r else None
                           for k in ("requests_per_minute", "tokens_per_minute")))
        if rate.requests_per_minute is None and rate.tokens_per_minute is None:
            raise ConfigError(f"{where}.rate_limit: give requests_per_minute, tokens_per_minute or both")
    breaker = None
    if "circuit_breaker" in data:
        b = _map(data["circuit_breaker"], ("failures", "window", "cool_down"), f"{where}.circuit_breaker")
        breaker = CircuitBreaker(
            failures=_number(b.get("failures", 5), f"{where}.circuit_breaker.failures", integer=True),
            window=parse_duration(b.get("window", 60), f"{where}.circuit_breaker.window"),
            cool_down=parse_duration(b.get("cool_down", 30), f"{where}.circuit_breaker.cool_down"))
    max_tokens = _number(data["max_tokens"], f"{where}.max_tokens", integer=True) if "max_tokens" in data else None
    strict = data.get("strict_output", True)
    if not isinstance(strict, bool):
        raise ConfigError(f"{where}.strict_output: expected true or false")
    return ModelConfig(name=name, provider=provider, model=model, base_url=base_url, api_key_secret=secret,
                       timeout=timeout, price=price, rate_limit=rate, circuit_breaker=breaker,
                       max_tokens=max_tokens, strict_output=strict, where=where)


def parse_models(raw: Any, *, source: str | None = None) -> dict[str, ModelConfig]:
    """The ``models:`` section (None: no models configured) as logical name -> :class:`ModelConfig`."""
    where = f"{source}: models" if source else "models"
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a map of model names (as used in `model:`) to their configuration")
    out: dict[str, ModelConfig] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: {name!r} is not a valid model name (letters, digits, '_', '.', ':', "
                              "'/', '-')")
        out[name] = parse_model(name, entry, f"{where}.{name}")
    return out
