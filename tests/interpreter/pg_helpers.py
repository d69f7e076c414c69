"""PostgreSQL for the tests: one database per test session, one schema per test (dropped afterwards).

PostgreSQL is expected at 127.0.0.1:5432, user ``postgres`` with trust auth (``SEALFLOW_TEST_PG`` names
another server). Without it the tests that need it skip with the reason; ``.ci/run`` starts it and turns
skips into failures (SEALFLOW_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import os
import uuid

import pytest

SERVER = os.environ.get("SEALFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
_state: dict = {}


def database_url() -> str:
    """The session's test database (created on first use); skips when PostgreSQL is not reachable."""
    if "url" in _state:
        return _state["url"]
    if "error" in _state:
        pytest.skip(_state["error"])
    try:
        import psycopg

        name = f"sealflow_test_{os.getpid()}"
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
    except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL for these tests
        cause = (str(exc).strip().splitlines() or [""])[0]
        _state["error"] = f"PostgreSQL not reachable at {SERVER} ({type(exc).__name__}: {cause})"
        pytest.skip(_state["error"])
    _state["name"] = name
    _state["url"] = f"{SERVER}/{name}"
    return _state["url"]


def drop_database() -> None:
    name = _state.pop("name", None)
    _state.pop("url", None)
    if name is None:
        return
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Schema:
    """A fresh schema in the session's database: ``url(**params)`` opens stores on it."""

    def __init__(self):
        import psycopg

        self.base = database_url()
        self.name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.name}")

    def url(self, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"schema": self.name, **params}.items())
        return f"{self.base}?{query}"

    def connect(self):
        import psycopg

        return psycopg.connect(self.base, autocommit=True, options=f"-c search_path={self.name}")

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
