"""Locks and pools across OS processes, on every store: two worker processes never overlap on a lock or
exceed a pool, and a holder SIGKILLed mid-action gives its slot back (when its lease ends, or at once when
a worker on its host sees it dead), to a holder with a larger fencing token.

The actions (tests/interpreter/engine/slot_worker.py) record their intervals, in real time, in a SQLite file.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest
from fanout_helpers import finish, most_at_once, start_process, store_url
from interp_helpers import BACKENDS

HERE = Path(__file__).resolve().parent
WORKER = HERE / "slot_worker.py"
LIMITS = {"lock": 1, "pool": 2}


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    return store_url(request, tmp_path, "shared.db", migrated=True)  # before two processes open it


def start(url, db, kind, count, prefix, total, **env):
    return start_process(WORKER, [url, db, kind, count, prefix, total], [HERE.parent], **env)


def intervals(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT label, pid, fence, start, end FROM intervals ORDER BY start").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["lock", "pool"])
def test_two_processes_never_overlap_beyond_the_limit(url, tmp_path, kind):
    # Given two worker processes on one store, each submitting 4 runs of a step with the lock (or pool of 2)
    db = tmp_path / "intervals.db"
    a = start(url, db, kind, 4, "a", 8)
    b = start(url, db, kind, 4, "b", 8)
    # When both have finished
    finish(a)
    finish(b)
    got = intervals(db)
    # Then all 8 actions ran, and never more at once than the limit
    assert sorted(r[0] for r in got) == [f"{p}{i}" for p in "ab" for i in range(4)]
    assert most_at_once([(r[3], r[4]) for r in got]) <= LIMITS[kind]
    if kind == "lock":  # each later holder of the lock had a larger fencing token
        fences = [r[2] for r in got]
        assert fences == sorted(fences) and len(set(fences)) == len(fences)


@pytest.mark.parametrize("kind", ["lock", "pool"])
def test_a_holder_killed_mid_action_gives_its_slot_back_and_nothing_overlaps_it(url, tmp_path, kind):
    # Given a process holding the slot, hanging in its action
    db, marker = tmp_path / "intervals.db", tmp_path / "marker"
    holder = start(url, db, kind, 1, "a", 1, SLOT_HANG="a0", SLOT_MARKER=str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert holder.poll() is None, holder.communicate()
        assert time.monotonic() < deadline, "the holder never reached its action"
        time.sleep(0.02)
    # When another process submits 4 runs needing the slot, and a second later the holder is SIGKILLed
    other = start(url, db, kind, 4, "b", 5)
    time.sleep(1.5)
    if kind == "lock":  # (meanwhile the other process's runs wait: none started)
        assert intervals(db)[0][0] == "a0" and len(intervals(db)) == 1
    killed_at = time.time()
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    finish(other)  # it finishes its 4 runs and takes over the orphan
    got = intervals(db)
    hung = [r for r in got if r[4] == float("inf")]  # (the killed holder may also have run others' steps)
    rest = [r for r in got if r[4] != float("inf")]
    # Then the killed holder's interval ends at its death; counting it, never more than the limit at once
    assert [(r[0], r[1]) for r in hung] == [("a0", holder.pid)]
    spans = [(hung[0][3], killed_at)] + [(r[3], r[4]) for r in rest]
    assert most_at_once(spans) <= LIMITS[kind]
    assert {r[0] for r in rest} >= {"b0", "b1", "b2", "b3", "a0"}  # the orphan was taken over and finished
    if kind == "lock":  # nobody took the lock before the holder died, and every later token is larger
        assert all(r[3] >= killed_at for r in rest)
        assert all(r[2] > hung[0][2] for r in rest)
