"""Run tags in SQL (:mod:`sealflow.store.tags`), shared by both backends: the table, the rows a new run writes, the
conditions that find runs by their tags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS run_tags (
  run_id TEXT NOT NULL, tenant TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY (run_id, name));
CREATE INDEX IF NOT EXISTS run_tags_find ON run_tags(tenant, name, value);
"""


class TagsMixin:
    """Expects ``_read`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def run_tags(self, run_id: str) -> dict[str, str]:
        """The tags run ``run_id`` was submitted with (name -> value; empty: none)."""
        return {str(r[0]): str(r[1]) for r in self._read("SELECT name, value FROM run_tags WHERE run_id = ? "
                                                         "ORDER BY name", (run_id,))}


def insert(c: Conn, run_id: str, tenant: str, tags: Mapping[str, str]) -> None:
    """Write ``tags`` of the new run ``run_id`` (inside the transaction that creates it)."""
    for name, value in sorted(tags.items()):
        c.execute("INSERT INTO run_tags (run_id, tenant, name, value) VALUES (?, ?, ?, ?)",
                  (run_id, tenant, name, value))


def filters(tags: tuple[tuple[str, str], ...]) -> tuple[list[str], list[object]]:
    """The conditions on ``runs`` (and their arguments) that keep the runs carrying every tag of ``tags``."""
    where: list[str] = []
    args: list[object] = []
    for name, value in tags:
        where.append("id IN (SELECT run_id FROM run_tags WHERE tenant = runs.tenant AND name = ? AND value = ?)")
        args.extend((name, value))
    return where, args
