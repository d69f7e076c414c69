"""Fixtures for the model adapter tests: one fake model server on loopback for the module."""

from __future__ import annotations

import pytest
from fake_model_servers import FakeModelServer
from model_helpers import KEY

from sealflow.providers.anthropic_messages import AnthropicAdapter
from sealflow.providers.config import parse_model
from sealflow.providers.openai_chat import OpenAIAdapter


@pytest.fixture(scope="module")
def server():
    with FakeModelServer(api_key=KEY, slow_seconds=1.5) as fake:
        yield fake


@pytest.fixture
def adapter(server):
    """``adapter(provider, model_id, **config)``: an adapter for the fake server holding the test key."""

    def make(provider: str, model: str = "fake-model", *, key: str | None = KEY, **config):
        entry = {"provider": provider, "model": model, "base_url": server.base_url, **config}
        if key is not None:
            entry["api_key"] = {"secret": "FAKE_KEY"}
        cls = OpenAIAdapter if provider == "openai" else AnthropicAdapter
        return cls(parse_model("m", entry, "models.m"), key)

    return make
