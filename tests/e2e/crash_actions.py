"""Actions for the crash tests: each records its effect once per idempotency key in a SQLite file,
and one of them can be told (by environment) to hang after its effect so the test can SIGKILL it."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from sealflow import action


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["CRASH_EFFECTS_DB"], timeout=10, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, step TEXT, n INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (step TEXT, key TEXT, at REAL)")
    return conn


def _maybe_hang(step: str, when: str) -> None:
    if os.environ.get("CRASH_AT") == f"{step}:{when}":
        marker = Path(os.environ["CRASH_MARKER"])
        marker.write_text(str(os.getpid()))
        time.sleep(120)  # the test kills the process here


@action("crash.effect", permissions=["crash:write"], effect="irreversible")
def effect(ctx, step: str) -> dict:
    """An effect that happens once per idempotency key, however often it is called."""
    conn = _db()
    conn.execute("INSERT INTO calls VALUES (?, ?, ?)", (step, ctx.idempotency_key, time.time()))
    _maybe_hang(step, "before")
    conn.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, 1)", (ctx.idempotency_key, step))
    _maybe_hang(step, "after")
    conn.close()
    return {"step": step, "key": ctx.idempotency_key}
