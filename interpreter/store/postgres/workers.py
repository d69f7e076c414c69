"""Liveness in the PostgreSQL store: workers heartbeat on the database clock (no host name, no pid).

A worker on a Redis broker records its Dramatiq broker id with each beat. Dramatiq keeps the ids of the
messages a worker fetched but has not acknowledged under that id, and gives them back to the queue only
once the worker's *Redis* heartbeat is a minute old (and then only at a random fetch). The store's
heartbeat, beaten every 2 s from its own thread, lapses sooner: :meth:`WorkersMixin.silent_brokers` names
the broker ids of workers silent for longer than a limit, so another worker can requeue those messages
(:func:`sealflow.runtime.liveness.requeue_silent`) and :meth:`WorkersMixin.forget_broker` marks
it done.
"""

from __future__ import annotations

from sealflow.store.sql import rows

_CURSOR = rows.CURSOR
_LIVE = "('queued','running','waiting','cancelling','compensating')"


class WorkersMixin:
    """Heartbeats, dead workers and silent brokers (mixed into the PostgreSQL store: ``self._conn()``)."""

    def heartbeat(self, owner: str, broker_id: str | None = None) -> None:
        """Record that worker ``owner`` is alive, on the database clock, and its broker id when given."""
        with self._conn() as raw:  # type: ignore[attr-defined]
            raw.execute("INSERT INTO workers (owner, broker_id) VALUES (%s, %s) ON CONFLICT (owner) DO UPDATE SET "
                        "heartbeat_at = now(), broker_id = COALESCE(EXCLUDED.broker_id, workers.broker_id)",
                        (owner, broker_id))

    def dead_workers(self, silent_for: float) -> list[str]:
        """Owners holding a lease whose last heartbeat is more than ``silent_for`` s old (or who never beat)."""
        with self._conn() as raw:  # type: ignore[attr-defined]
            got = raw.execute(
                f"SELECT DISTINCT a.lease_owner FROM runs r JOIN attempts a ON {_CURSOR} LEFT JOIN workers w ON "
                f"w.owner = a.lease_owner WHERE r.state IN {_LIVE} AND a.state = 'running' AND a.lease_owner IS NOT "
                "NULL AND (w.heartbeat_at IS NULL OR w.heartbeat_at < now() - make_interval(secs => %s))",
                (float(silent_for),)).fetchall()
        return [r[0] for r in got]

    def silent_brokers(self, silent_for: float) -> list[tuple[str, str]]:
        """``(owner, broker id)`` of the workers that recorded a broker id and whose last heartbeat is more
        than ``silent_for`` s old."""
        with self._conn() as raw:  # type: ignore[attr-defined]
            got = raw.execute(
                "SELECT owner, broker_id FROM workers WHERE broker_id IS NOT NULL AND "
                "heartbeat_at < now() - make_interval(secs => %s) ORDER BY owner", (float(silent_for),)).fetchall()
        return [(r[0], r[1]) for r in got]

    def forget_broker(self, owner: str, broker_id: str) -> bool:
        """Mark ``owner``'s broker id handled (its messages were requeued); False if it beat again meanwhile
        or another worker got there first."""
        with self._conn() as raw:  # type: ignore[attr-defined]
            cur = raw.execute("UPDATE workers SET broker_id = NULL WHERE owner = %s AND broker_id = %s",
                              (owner, broker_id))
            return bool(cur.rowcount)
