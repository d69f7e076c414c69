"""Actions for the poison-step tests: ``poison.pill`` records its call, then SIGKILLs its own process
(the worker, or under ``isolation: process`` the attempt's child); ``poison.regex`` holds the GIL in C
code (a catastrophic regular expression) for far longer than its timeout."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time

from sealflow import action


@action("poison.pill", permissions=["poison:write"], effect="write")
def pill(ctx) -> dict:
    """Record the call, then die as an out-of-memory kill or a segfault would: at once, without a word."""
    conn = sqlite3.connect(os.environ["POISON_CALLS_DB"], timeout=10, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (pid INTEGER, attempt INTEGER, at REAL)")
    conn.execute("INSERT INTO calls VALUES (?, ?, ?)", (os.getpid(), ctx.attempt, time.time()))
    conn.close()
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


@action("poison.regex", permissions=["poison:write"])
def regex(ctx, n: int = 40) -> dict:
    """Backtracking that takes hours, in C code that never releases the GIL."""
    return {"matched": bool(re.match(r"^(a+)+$", "a" * n + "b"))}
