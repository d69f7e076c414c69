"""The PostgreSQL store: ``postgresql://user:pass@host:5432/db`` (see :mod:`.store`).

``migrate(url)`` applies the missing schema migrations (what ``sealflow store migrate`` runs) and returns
the versions it applied; it is idempotent.
"""

from __future__ import annotations

import psycopg

from sealflow.store.postgres import schema
from sealflow.store.postgres.connection import (
    StoreUnavailable,
    cause,
    conn_kwargs,
    connect,
    mask,
    own_params,
    split_url,
)
from sealflow.store.postgres.schema import LATEST, MIGRATIONS, SchemaTooOld
from sealflow.store.postgres.store import CHANNEL, PostgresStore


def migrate(url: str, *, target: int = LATEST) -> list[int]:
    """Bring the database at ``url`` to schema ``target``; the versions applied (none when up to date)."""
    conninfo, own = split_url(url)
    own_params(own, mask(url))
    with connect(conninfo, conn_kwargs(own), mask(url)) as conn:
        try:
            return schema.migrate(conn, mask(url), target=target, schema=own.get("schema"))
        except psycopg.Error as exc:
            raise StoreUnavailable(f"PostgreSQL store {mask(url)}: migration failed, its transaction rolled back: "
                                   f"{cause(exc)}") from None


__all__ = ["PostgresStore", "StoreUnavailable", "SchemaTooOld", "migrate", "LATEST", "MIGRATIONS", "CHANNEL"]
