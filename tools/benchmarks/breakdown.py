"""Benchmark: where a step's time goes on the embedded default, next to a bare Dramatiq chain.

    python -m tools.benchmarks.breakdown [--runs 300] [--rounds 3]

Each round measures, in this process and in turn, per step of ``--runs`` runs of a 10-step workflow of
no-op actions:

* **peer**: the bare Dramatiq chain on a ``StubBroker`` (``tools.benchmarks.runtime``), no durability;
* **sealflow**: ``Runtime.run`` on the embedded default, every step durable (as ``tools.benchmarks.runtime``);
* **its SQL alone**: every statement the store ran for those runs (recorded from the store's connection, with
  its parameters, on a second pass of the same runs), replayed in the same order on a copy of the store taken
  just before them, through the same ``sqlite3`` module, pragmas and background checkpoints, with no engine
  around it: what SQLite and the driver cost, and nothing else;
* **the hand-off**: an action handed to a pooled timeout thread and waited for (``AttemptRunner.run`` of a
  no-op), the price of a timeout that holds while an action blocks in C code (``execution/timeouts.py``).

It prints the four per step, the ratio sealflow / peer, the best ratio the SQL and the hand-off alone would
allow (as if the engine's Python cost nothing), and the time per step the engine's Python would have for the
0.5x aim of issue 11 (the rest of a step is that Python: deciding, fencing, the audit chain's hashing,
telemetry). The medians of the rounds close it. Figures and their reading are in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

STEPS = 10


class Recorder:
    """A stand-in for the store's ``sqlite3.Connection`` that records each ``execute`` and ``executemany``
    (with its parameters, materialised) before passing it on."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.calls: list[tuple[str, str, Any]] = []

    def execute(self, sql: str, params: Any = ()):
        self.calls.append(("execute", sql, params))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any):
        rows = list(rows)
        self.calls.append(("executemany", sql, rows))
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def sealflow_pass(runs: int) -> tuple[float, list[tuple[str, str, Any]], str]:
    """(seconds per step of ``runs`` runs; the statements of a second, recorded pass of ``runs`` runs; the
    path of a copy of the store as it was just before that pass, in a temporary folder of its own that
    the caller removes)."""
    from tools.benchmarks.runtime import noop_plan, noop_runtime

    plan = noop_plan(STEPS)
    tmp, copy_dir = tempfile.mkdtemp(), tempfile.mkdtemp()
    rt = noop_runtime(tmp)
    try:
        rt.run(plan, {}, initiator="user:bench")  # warm up: actor, plan cache, statements
        gc.collect()
        started = time.perf_counter()
        for _ in range(runs):
            assert rt.run(plan, {}, initiator="user:bench").state == "completed"
        per_step = (time.perf_counter() - started) / (runs * STEPS)
        store = rt.store
        copy = os.path.join(copy_dir, "state.db")
        with store._lock:  # a consistent copy, with nothing of this process writing meanwhile
            target = sqlite3.connect(copy)
            store._conn.backup(target)
            target.close()
            recorder = Recorder(store._conn)
            store._conn = recorder  # type: ignore[assignment]
        try:
            for _ in range(runs):
                assert rt.run(plan, {}, initiator="user:bench").state == "completed"
        finally:
            with store._lock:
                store._conn = recorder._conn
    finally:
        rt.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return per_step, recorder.calls, copy


def replay(calls: list[tuple[str, str, Any]], path: str) -> float:
    """Seconds to run ``calls`` in order on the store at ``path``, opened as the store opens it (WAL,
    ``synchronous = NORMAL``, cached statements, background passive checkpoints), reading every row."""
    import sealflow.store.sqlite.store  # noqa: F401 - its parameter adapters, as in the store
    from sealflow.store.sqlite.disk import WAL_LIMIT, Checkpointer

    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=512)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "temp_store = MEMORY",
                   f"journal_size_limit = {WAL_LIMIT}", "wal_autocheckpoint = 0"):
        conn.execute(f"PRAGMA {pragma}")
    checkpointer = Checkpointer(path, 0.25, 10_000, threading.Lock())
    try:
        gc.collect()
        started = time.perf_counter()
        for method, sql, params in calls:
            getattr(conn, method)(sql, params).fetchall()
        return time.perf_counter() - started
    finally:
        checkpointer.stop()
        conn.close()


def hand_off(count: int) -> float:
    """Seconds per no-op handed to a pooled timeout thread and waited for."""
    from sealflow.execution.timeouts import AttemptRunner

    runner = AttemptRunner()
    try:
        for _ in range(200):
            runner.run(lambda: None, 10.0)
        started = time.perf_counter()
        for _ in range(count):
            runner.run(lambda: None, 10.0)
        return (time.perf_counter() - started) / count
    finally:
        runner.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for name in ("runs", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1 (got {getattr(args, name)})")
    import logging

    from tools.benchmarks.runtime import bench_dramatiq

    logging.disable(logging.WARNING)
    us = 1e6
    rows: list[tuple[float, float, float, float]] = []
    for n in range(1, args.rounds + 1):
        peer = 1 / bench_dramatiq(args.runs, STEPS)
        ours, calls, copy = sealflow_pass(args.runs)
        sql = replay(calls, copy) / (args.runs * STEPS)
        shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
        handed = hand_off(args.runs * STEPS)
        rows.append((peer, ours, sql, handed))
        print(f"round {n}: per step: bare chain {peer * us:4.0f} us; sealflow {ours * us:4.0f} us "
              f"({peer / ours:.2f}x); its SQL alone {sql * us:4.0f} us ({len(calls) / (args.runs * STEPS):.1f} "
              f"statements); the timeout thread's hand-off {handed * us:3.0f} us; the rest (engine Python) "
              f"{(ours - sql - handed) * us:4.0f} us")
    peer, ours, sql, handed = (statistics.median(r[i] for r in rows) for i in range(4))
    print(f"median: bare chain {peer * us:.0f} us, sealflow {ours * us:.0f} us per step: {peer / ours:.2f}x")
    print(f"  SQL {sql * us:.0f} us + hand-off {handed * us:.0f} us = {(sql + handed) * us:.0f} us: with no engine "
          f"Python at all the ratio would be {peer / (sql + handed):.2f}x")
    budget = 2 * peer - sql - handed
    print(f"  for 0.5x a step may take {2 * peer * us:.0f} us: the engine's Python would have {budget * us:.0f} us "
          f"(it takes {(ours - sql - handed) * us:.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
