"""Tampering with a store's ``plans`` table behind its back, as someone with the database's password would.

    tamper(rt.store, plan.digest)          # the row's body edited, its recorded digest kept

Works on the SQLite and the PostgreSQL store (the ``store`` fixture of ``tests/interpreter/conftest.py``, or
a runtime's store). Nothing is cached here: a process that already loaded the plan keeps its copy, so tests
drop the engine's caches (:func:`forget_plans`) or use a fresh runtime.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def edited(body: str) -> str:
    """The body with the plan's name changed and its recorded digest kept: it no longer hashes to it."""
    return body.replace('"name": "', '"name": "x', 1).replace('"name":"', '"name":"x', 1)


def tamper(store, digest: str, rewrite: Callable[[str], str] = edited) -> None:
    """Rewrite the ``plans`` row of ``digest`` in ``store``'s own database."""
    body = store.get_plan(digest)
    changed = rewrite(body)
    assert changed != body, "the rewrite changed nothing"
    path = getattr(store, "path", None)
    if path is not None:  # SQLite
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE plans SET body = ? WHERE digest = ?", (changed, digest))
        return
    with store._connect() as conn:  # PostgreSQL: a connection of its own, on the store's schema
        conn.execute("UPDATE plans SET body = %s WHERE digest = %s", (changed, digest))


def forget_plans(runtime) -> None:
    """The runtime's engine forgets the plans it loaded (as a new process would not have them)."""
    runtime.engine._plans.clear()
    runtime.engine._steps.clear()
