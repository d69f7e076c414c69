"""Actions for the outcome-unknown tests: ``sms.send`` stands for a gateway that cannot deduplicate. It records
the message as sent (the effect), then, on its first call only, SIGKILLs the process running it before the
result can be committed: the effect happened, and nobody knows."""

from __future__ import annotations

import os
import signal
import sqlite3

from sealflow import action


@action("sms.send", permissions=["sms:send"], effect="irreversible", honours_idempotency_key=False)
def send(ctx, to: str) -> dict:
    conn = sqlite3.connect(os.environ["SMS_DB"], timeout=10, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS sent (recipient TEXT, fence INTEGER)")
    conn.execute("INSERT INTO sent VALUES (?, ?)", (to, ctx.fence))
    first = conn.execute("SELECT COUNT(*) FROM sent").fetchone()[0] == 1
    conn.close()
    if first:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"sent": True, "to": to}
