"""What the SQL backends really share, written once in SQL both SQLite (3.35+) and PostgreSQL accept as it is.

No statement is rewritten for a dialect: where the two differ, each backend writes its own statement. The
only per-dialect step left is the driver's parameter marker (``?`` for :mod:`sqlite3`, ``%s`` for psycopg),
which the PostgreSQL connection renders (:class:`sealflow.store.postgres.dialect.PgConn`).
"""
