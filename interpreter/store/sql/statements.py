"""Statements both backends run unchanged (see :mod:`sealflow.store.sql`).

Each is an upsert in the SQL standard's form shared by SQLite and PostgreSQL (``ON CONFLICT ... DO``), never
SQLite's ``INSERT OR IGNORE`` / ``INSERT OR REPLACE``, and names the table's column where an update reads it
(``t.col + excluded.col``: unqualified is ambiguous in PostgreSQL).
"""

from __future__ import annotations

#: an outbox row, due at ``due_at``, written anew or moved (its sent time set as given: None = unsent)
OUTBOX_PUT = ("INSERT INTO outbox (run_id, step_id, attempt, token, due_at, sent_at) VALUES (?,?,?,?,?,?) "
              "ON CONFLICT (run_id, step_id, attempt, token) DO UPDATE SET due_at = excluded.due_at, "
              "sent_at = excluded.sent_at")

#: a plan stored once by its digest (a second store of the same digest changes nothing)
PLAN_PUT = ("INSERT INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT DO NOTHING")


def tenant_is(tenant: str | None) -> str:
    """The condition on a ``tenant`` column matching ``tenant`` (None: the rows that name none), with one
    parameter when it names one (then pass ``tenant_args(tenant)``)."""
    return "tenant IS NULL" if tenant is None else "tenant = ?"


def tenant_args(tenant: str | None) -> tuple[str, ...]:
    """The parameters of :func:`tenant_is`."""
    return () if tenant is None else (tenant,)
