"""The maintained price table (``prices.json``, package data) and cost accounting.

A model's cost is ``input_tokens * input_per_mtok + output_tokens * output_per_mtok``
over a million, with the price from the model's ``price:`` in the configuration when set,
else from the table (exact provider model id, else the longest id that prefixes it). A
model in neither costs 0 and is reported by ``sealflow models check``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from sealflow.providers.config import ModelConfig, Price


@lru_cache(maxsize=1)
def price_table() -> dict[str, dict[str, Price]]:
    """provider -> model id -> :class:`Price`, from the package's ``prices.json``."""
    raw = json.loads(resources.files("sealflow.providers").joinpath("prices.json").read_text("utf-8"))
    return {provider: {model: Price(float(p["input_per_mtok"]), float(p["output_per_mtok"]))
                       for model, p in models.items()}
            for provider, models in raw.items() if isinstance(models, dict) and not provider.startswith("_")}


def table_price(provider: str, model: str) -> Price | None:
    """The table's price of ``provider``'s ``model`` (exact id, else the longest prefix), or None."""
    models = price_table().get(provider, {})
    if model in models:
        return models[model]
    prefixes = [m for m in models if model.startswith(m)]
    return models[max(prefixes, key=len)] if prefixes else None


def price_for(config: ModelConfig) -> Price | None:
    """The configured price, else the table's, else None (unknown: cost 0)."""
    if config.provider == "local":
        return Price(0.0, 0.0)
    return config.price or table_price(config.provider, config.model)


def cost_usd(price: Price | None, input_tokens: int, output_tokens: int) -> float:
    """USD for the tokens at ``price`` (0 when the price is unknown), rounded to 1e-9."""
    return 0.0 if price is None else round(price.cost(input_tokens, output_tokens), 9)
