"""Fixtures for the interpreter tests: a store per backend, a fake clock, a runtime.

Helpers to build plans live in ``interp_helpers`` (importable from the tests).
"""

from __future__ import annotations

import random

import pytest

from interp_helpers import BACKENDS
from sealflow.interpreter.execution.actions import Registry
from sealflow.interpreter.core.clock import FakeClock
from sealflow.interpreter.service.runtime import Runtime
from sealflow.interpreter.store import open_store


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    """A fresh store of each backend."""
    if request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path}/state.db")
    else:  # pragma: no cover - future backends
        pytest.skip(f"no {request.param} store yet")
    yield s
    s.close()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def registry():
    return Registry()


@pytest.fixture
def providers():
    return {}


@pytest.fixture
def runtime(tmp_path, registry, providers, clock):
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/rt.db"), registry, providers, clock=clock,
                 rng=random.Random(7), worker_timeout_ms=20)
    yield rt
    rt.close()
    rt.store.close()
