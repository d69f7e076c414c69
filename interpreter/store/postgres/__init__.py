"""The PostgreSQL store: ``postgresql://user:pass@host:5432/db`` (see :mod:`.store`).

``migrate(url)`` applies the missing schema migrations (what ``sealflow store migrate`` runs) and returns
the versions it applied; it is idempotent.
"""

from __future__ import annotations

from sealflow.interpreter.store.postgres.schema import LATEST, MIGRATIONS, SchemaTooOld
from sealflow.interpreter.store.postgres.store import CHANNEL, PostgresStore, StoreUnavailable, mask, split_url


def migrate(url: str, *, target: int = LATEST) -> list[int]:
    """Bring the database at ``url`` to schema ``target``; the versions applied (none when up to date)."""
    from sealflow.interpreter.store.postgres import schema
    from sealflow.interpreter.store.postgres.store import _cause

    import psycopg

    conninfo, own = split_url(url)
    kwargs: dict = {"autocommit": True}
    if own.get("schema"):
        kwargs["options"] = f"-c search_path={own['schema']}"
    try:
        with psycopg.connect(conninfo, connect_timeout=10, **kwargs) as conn:
            return schema.migrate(conn, mask(url), target=target)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"PostgreSQL store {mask(url)}: migration failed, its transaction rolled back: "
                               f"{_cause(exc)}") from None


__all__ = ["PostgresStore", "StoreUnavailable", "SchemaTooOld", "migrate", "LATEST", "MIGRATIONS", "CHANNEL"]
