"""The PostgreSQL store's connection pool: psycopg_pool's, checking a connection only after it sat idle.

A connection that died with a database restart should be replaced before an operation fails on it, but a
check per checkout is a round trip per operation: so a connection is checked (an empty query) only when it
was unused for longer than :data:`CHECK_IDLE_AFTER_S`. The pool stamps each connection as it comes back
(:meth:`StorePool.putconn`, in the returning thread: psycopg_pool runs a configured ``reset`` on one of its
worker threads instead, a hand-off per operation).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

#: how long an operation waits for a pooled connection (psycopg_pool's default is 30 s) before it fails as
#: StoreUnavailable: with the database unreachable, a worker's loop notices a stop only between operations,
#: and a supervisor's grace before SIGKILL is often 30 s (Kubernetes's default)
POOL_WAIT_S = 10.0

#: a pooled connection unused for longer than this is checked (an empty query) before it is handed out: one
#: that died with a database restart is replaced instead of failing the operation. A connection in steady use
#: is not checked: that check was a round trip per store operation (and if such a connection died this very
#: moment, the operation fails clearly, nothing half-done, and is retried as after any outage).
CHECK_IDLE_AFTER_S = 1.0


def _check_if_idle(conn: psycopg.Connection) -> None:
    if time.monotonic() - getattr(conn, "_sealflow_idle_since", 0.0) > CHECK_IDLE_AFTER_S:
        ConnectionPool.check_connection(conn)


class StorePool(ConnectionPool):
    """A :class:`ConnectionPool` whose connections are checked after :data:`CHECK_IDLE_AFTER_S` idle."""

    def __init__(self, conninfo: str, **kwargs: Any) -> None:
        super().__init__(conninfo, check=_check_if_idle, timeout=POOL_WAIT_S, **kwargs)

    def putconn(self, conn: psycopg.Connection) -> None:
        conn._sealflow_idle_since = time.monotonic()  # type: ignore[attr-defined]  # the pool's stamp, on the connection
        super().putconn(conn)
