"""Benchmark: disk and memory over many runs on the SQLite store, next to a bare SQLite insert loop.

    python -m tools.benchmarks.disk [--runs 5000] [--steps 10] [--wal-limit-mib 16] [--reader]

Each run goes through the store's own operations, as a worker does: submit, then per step claim and
commit (the next step scheduled in the same commit), the last one completing the run. Every 10% it
prints the WAL size (now and the largest seen), the database size, the process RSS, and the store's
bytes per run; ``--reader`` adds another connection reading all the time (what other workers do), the
condition under which the WAL used to grow without bound. Then the same number of transactions as a
bare ``INSERT`` loop on a plain WAL file, for scale. ``--wal-limit-mib 0`` turns the bound off
(``journal_size_limit`` 0 and no truncating checkpoint) to show what it prevents.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import tempfile
import threading
import time

from sealflow.store import Commit, NewRun, NextAttempt, RunChange, StepChange
from sealflow.store.sqlite.store import SqliteStore, wal_size


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _new_run(i: int) -> NewRun:
    value = {"lead": i, "text": "x" * 200}
    return NewRun(id=f"run{i:07d}", tenant="default", workflow="bench", workflow_version=1,
                  plan_digest="sha256:bench", plan_json='{"plan": "bench"}', input_json=json.dumps(value),
                  input_hash=json.dumps(value, sort_keys=True), initiator="user:bench", idempotency_key=None,
                  deadline=None, first_step="s0", first_lease_ms=30_000)


def _one_run(store: SqliteStore, i: int, steps: int, now: float) -> None:
    store.submit(_new_run(i), now)
    for n in range(steps):
        (msg,) = store.take_outbox(now)
        claimed = store.claim(*msg, owner="bench", now=now)
        last = n == steps - 1
        att = claimed.attempt
        store.commit(Commit(run_id=att.run_id, expected_rev=claimed.run.rev,
                            step=StepChange(att.step_id, att.attempt, att.token, "succeeded",
                                            output_json=json.dumps({"step": n, "out": "y" * 300})),
                            run=RunChange(state="completed" if last else None, add_steps=1),
                            next=None if last else NextAttempt(f"s{n + 1}", 1, "scheduled", now, 30_000),
                            dispatch_inline=False), now)


def _reader(path: str, stop: threading.Event) -> None:
    conn = sqlite3.connect(path, check_same_thread=False)
    while not stop.is_set():
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM runs").fetchone()
        stop.wait(0.001)
        conn.execute("COMMIT")
        stop.wait(0.001)
    conn.close()


def bench_store(runs: int, steps: int, wal_limit: int, reader: bool) -> None:
    folder = tempfile.mkdtemp(prefix="sealflow-disk-")
    path = os.path.join(folder, "state.db")
    store = SqliteStore(path, wal_limit=wal_limit)
    stop = threading.Event()
    thread = threading.Thread(target=_reader, args=(path, stop), daemon=True)
    if reader:
        thread.start()
    largest, started, now = 0, time.perf_counter(), 1_700_000_000.0
    print(f"store: {runs} runs x {steps} steps, WAL limit {wal_limit / 2**20:.0f} MiB"
          f"{' (off)' if not wal_limit else ''}, reader {'on' if reader else 'off'}")
    print(f"{'runs':>7} {'WAL MiB':>8} {'max WAL':>8} {'DB MiB':>8} {'KiB/run':>8} {'RSS MiB':>8} {'s':>6}")
    for i in range(runs):
        _one_run(store, i, steps, now + i)
        largest = max(largest, wal_size(path))
        if (i + 1) % max(1, runs // 10) == 0:
            db = os.path.getsize(path)
            print(f"{i + 1:>7} {wal_size(path) / 2**20:>8.2f} {largest / 2**20:>8.2f} {db / 2**20:>8.2f} "
                  f"{db / 1024 / (i + 1):>8.1f} {_rss_mib():>8.1f} {time.perf_counter() - started:>6.1f}")
    stop.set()
    store.close()


def bench_bare(transactions: int) -> None:
    folder = tempfile.mkdtemp(prefix="sealflow-bare-")
    path = os.path.join(folder, "bare.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    started, largest = time.perf_counter(), 0
    for _i in range(transactions):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (body) VALUES (?)", ("y" * 300,))
        conn.execute("COMMIT")
        largest = max(largest, wal_size(path))
    print(f"bare SQLite: {transactions} one-row transactions in {time.perf_counter() - started:.1f} s, "
          f"max WAL {largest / 2**20:.2f} MiB (autocheckpoint 1000 pages), DB {os.path.getsize(path) / 2**20:.2f} MiB, "
          f"RSS {_rss_mib():.1f} MiB")
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--wal-limit-mib", type=float, default=16)
    ap.add_argument("--reader", action="store_true")
    args = ap.parse_args()
    bench_store(args.runs, args.steps, int(args.wal_limit_mib * 2**20), args.reader)
    bench_bare(args.runs * (2 * args.steps + 1))


if __name__ == "__main__":
    main()
