"""The store conformance kit (sealflow.testing.conformance.kit) run against the repository's two backends, as a
third party runs it against its own; and the type-level check's functions (sealflow.testing.conformance.backends,
which mypy reads) hand each backend back as every protocol."""

from __future__ import annotations

import pg_helpers
import pytest
from test_store_capabilities import DECLARED

from sealflow.store import open_store
from sealflow.testing.conformance.backends import postgres_conforms, sqlite_conforms
from sealflow.testing.conformance.kit import StoreConformance


class TestSqliteConformance(StoreConformance):
    capabilities = frozenset(DECLARED["sqlite"])

    @pytest.fixture
    def store(self, clock, tmp_path):
        s = open_store(f"sqlite:///{tmp_path}/state.db", clock=clock)
        yield s
        s.close()

    def test_the_type_level_check_hands_it_back_as_every_protocol(self, store):
        # Given the SQLite store / When the type-level check's function takes it / Then each protocol is the store
        assert all(got is store for got in sqlite_conforms(store))


class TestPostgresConformance(StoreConformance):
    capabilities = frozenset(DECLARED["postgres"])

    @pytest.fixture
    def store(self, clock, _pg_session):
        schema = pg_helpers.Schema()
        s = open_store(schema.url(clock="caller", migrate="1", pool_max="4"), clock=clock)
        yield s
        s.close()
        schema.drop()

    def test_the_type_level_check_hands_it_back_as_every_protocol(self, store):
        # Given the PostgreSQL store / When the type-level check's function takes it / Then each protocol is it
        assert all(got is store for got in postgres_conforms(store))
