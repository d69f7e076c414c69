"""The SQLite store (the embedded default): store (``SqliteStore``: the file, WAL, ``BEGIN IMMEDIATE``), schema
(tables and migrations), disk (I/O errors, the WAL bound). The statements it shares with PostgreSQL are in
:mod:`sealflow.store.sql`.
"""
