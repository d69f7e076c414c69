"""A pytest plugin to test workflows against recorded model answers.

Enable it in your ``conftest.py``::

    pytest_plugins = ["sealflow.testing.pytest_plugin"]

and use the ``model_replay`` fixture: called with a recording's path (and the live
registry to record with), it returns the registry to hand to the runtime::

    def test_triage(model_replay, store):
        providers = model_replay("tests/recordings/triage.jsonl",
                                 record_with=lambda: load_models(yaml.safe_load(open("sealflow.yaml"))))
        runtime = Runtime(store, providers=providers)
        ...

Normally it replays (no network, no key); a call that is not in the recording fails the
test. With ``SEALFLOW_RECORD_MODELS=1`` in the environment it calls the live models
instead (``record_with``, a registry or a function returning one) and rewrites the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from sealflow.providers.recording import RecordingRegistry, ReplayProvider, ReplayRegistry
from sealflow.providers.registry import ProviderRegistry

RECORD_ENV = "SEALFLOW_RECORD_MODELS"


class ModelReplay(Protocol):
    """``model_replay``'s value: ``(path, record_with=None) -> ProviderRegistry``."""

    def __call__(self, path: str | os.PathLike[str],
                 record_with: ProviderRegistry | Callable[[], ProviderRegistry] | None = None) -> ProviderRegistry: ...


@pytest.fixture
def model_replay(request: pytest.FixtureRequest) -> Iterator[ModelReplay]:
    """``model_replay(path, record_with=None) -> ProviderRegistry`` (see the module docstring)."""
    replays: list[ReplayProvider] = []

    def make(path: str | os.PathLike[str], record_with: ProviderRegistry | Callable[[], ProviderRegistry] | None = None
             ) -> ProviderRegistry:
        target = Path(path)
        if not target.is_absolute():
            target = Path(str(request.config.rootpath)) / target
        if os.environ.get(RECORD_ENV) == "1":
            if record_with is None:
                pytest.fail(f"{RECORD_ENV}=1 but model_replay({str(path)!r}) was given no record_with registry")
            live = record_with() if callable(record_with) else record_with
            target.unlink(missing_ok=True)
            return RecordingRegistry(live, target)
        replay = ReplayProvider(target)
        replays.append(replay)
        return ReplayRegistry(replay)

    yield make
    misses = [m for r in replays for m in r.misses]
    if misses:
        pytest.fail("model calls missing from the recording:\n" + "\n".join(misses), pytrace=False)
