"""`sealflow store migrate`: a PostgreSQL schema is created and migrated when asked, and only then."""

from __future__ import annotations

import json

from sealflow.cli import main
from sealflow.store.postgres import LATEST
from sealflow.store.postgres.schema import MIGRATIONS

#: the migration numbers, in order (they may skip)
VERSIONS = [number for number, _, _ in MIGRATIONS]


def test_given_a_fresh_postgresql_schema_when_migrated_twice_then_the_second_run_applies_nothing(pg_schema, capsys):
    # Given a schema with no tables
    url = pg_schema.url()
    # When `sealflow store migrate` runs twice
    first = main(["store", "migrate", "--store", url, "--json"])
    applied = json.loads(capsys.readouterr().out)
    second = main(["store", "migrate", "--store", url])
    out = capsys.readouterr().out
    # Then the first applies every migration and the second says it is up to date
    assert first == 0 and applied == {"version": LATEST, "applied": VERSIONS}
    assert second == 0 and f"schema version {LATEST}: up to date" in out


def test_given_an_unreachable_store_when_migrating_then_a_usage_error_names_it_without_the_password(capsys):
    # Given a URL with a password at a port nothing listens on
    code = main(["store", "migrate", "--store", "postgresql://ana:hunter2@127.0.0.1:1/x"])
    err = capsys.readouterr().err
    # Then exit 2 with the store named, the password masked
    assert code == 2 and "127.0.0.1:1" in err and "hunter2" not in err and "internal error" not in err
