"""Fixtures for the interpreter tests: a store per backend, a fake clock, a runtime.

Helpers to build plans live in ``interp_helpers`` (importable from the tests).
"""

from __future__ import annotations

import os
import random

import pg_helpers
import pytest
from interp_helpers import BACKENDS
from security_helpers import policy, rt  # noqa: F401 - the secured runtime fixtures, for every interpreter test

from sealflow.core.clock import FakeClock
from sealflow.execution.actions import Registry
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


@pytest.fixture(scope="session")
def _pg_session():
    yield
    pg_helpers.drop_database()


@pytest.fixture
def pg_schema(_pg_session):
    """A fresh PostgreSQL schema, dropped afterwards (skips without PostgreSQL)."""
    schema = pg_helpers.Schema()
    yield schema
    schema.drop()


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path, clock):
    """A fresh store of each backend on the test's fake clock (PostgreSQL: a schema of its own, the caller's
    clock, migrated)."""
    if request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path}/state.db", clock=clock)
        yield s
        s.close()
    elif request.param == "postgres":
        schema = request.getfixturevalue("pg_schema")
        s = open_store(schema.url(clock="caller", migrate="1", pool_max="4"), clock=clock)
        yield s
        s.close()
    else:  # pragma: no cover - future backends
        pytest.skip(f"no {request.param} store yet")


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
def runtime(request, tmp_path, registry, providers, clock):
    if os.environ.get("SEALFLOW_TEST_RUNTIME_STORE") == "postgres":  # the engine's tests on PostgreSQL
        url = request.getfixturevalue("pg_schema").url(clock="caller", migrate="1")
    else:
        url = f"sqlite:///{tmp_path}/rt.db"
    # a test (module) that defines a ``tracer_provider`` fixture gets the runtime's spans recorded by it
    traced = request.getfixturevalue("tracer_provider") if "tracer_provider" in request.fixturenames else None
    made = Runtime(open_store(url, clock=clock), registry, providers, rng=random.Random(7), worker_timeout_ms=20,
                   tracer_provider=traced)
    yield made
    made.close()
    made.store.close()
