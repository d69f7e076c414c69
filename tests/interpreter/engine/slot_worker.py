"""A worker process for the cross-process lock and pool tests (run by test_locks_across_processes.py).

``python slot_worker.py URL INTERVALS_DB KIND COUNT PREFIX TOTAL``: submits COUNT runs whose step takes
``lock: resource-1`` (KIND ``lock``) or pool ``email`` of limit 2 (KIND ``pool``), works and sweeps until
TOTAL runs in the store are final, then exits. The action records (label, pid, fencing token, start,
end) in INTERVALS_DB (real time). With ``SLOT_HANG=LABEL`` the action of that label writes
``SLOT_MARKER`` and sleeps, for the test to SIGKILL this process while it holds the slot.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

from interp_helpers import S, make_plan, serve_until

from sealflow.execution.actions import Registry, action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

SCHEMA = "CREATE TABLE IF NOT EXISTS intervals (label TEXT, pid INTEGER, fence INTEGER, start REAL, end REAL)"


def record(db: str, label: str, fence, start: float, end: float) -> None:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        conn.execute(SCHEMA)
        conn.execute("INSERT INTO intervals VALUES (?,?,?,?,?)", (label, os.getpid(), fence, start, end))
    finally:
        conn.close()


def plan_for(kind: str):
    slot = {"lock": "resource-1"} if kind == "lock" else {"concurrency": "email"}
    # no retry class: the holder SIGKILLed mid-action loses its lease, and its attempt runs again (a loss, not a
    # failed try): that rerun is the takeover the test waits for
    return make_plan(S("work", "action", action="t.record", args={"label": "${{ input.label }}"},
                       timeout_ms=20_000, **slot), name=f"slots-{kind}")


def main(url: str, db: str, kind: str, count: int, prefix: str, total: int) -> None:
    registry = Registry()

    @action("t.record", registry=registry)
    def work(ctx, label: str):
        start = time.time()
        if os.environ.get("SLOT_HANG") == label:
            record(db, label, ctx.fencing_token, start, float("inf"))
            with open(os.environ["SLOT_MARKER"], "w") as fh:
                fh.write(str(os.getpid()))
            time.sleep(120)  # the test SIGKILLs this process here
        time.sleep(0.08)
        record(db, label, ctx.fencing_token, start, time.time())
        return label

    rt = Runtime(open_store(url), registry, {}, worker_threads=3, worker_timeout_ms=20,
                 config=RuntimeConfig(pools={"email": 2}))
    plan = plan_for(kind)
    for i in range(count):
        rt.submit(plan, {"label": f"{prefix}{i}"}, initiator="user:ana")
    serve_until(rt, lambda: len(rt.store.list_runs(states=("completed", "failed"), limit=1000)) >= total,
                dead_owner_check=0.2)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
