"""Fan-out across OS processes, on every store: two workers never run more items of a map at once than its
``concurrency``, and a worker SIGKILLed mid-map leaves a run another worker finishes: completed items never run
again, and each item's effect happens once at an idempotent receiver.

The actions (fanout_helpers.World, in fanout_worker.py) record their intervals and effects in a SQLite file.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from fanout_helpers import World, finish, most_at_once, start_process, store_url
from interp_helpers import BACKENDS

from sealflow.store import open_store

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fanout_worker.py"


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    return store_url(request, tmp_path, "shared.db", migrated=True)  # before two processes open it


def start(url, db, mode, n, concurrency, **env):
    return start_process(WORKER, [url, db, mode, n, concurrency], [HERE, HERE.parent], **env)


def top_run(url):
    store = open_store(url)
    try:
        tops = [r for r in store.list_runs(limit=1000) if r.parent_run_id is None]
        return tops[0] if tops else None, store.children(tops[0].id) if tops else []
    finally:
        store.close()


def test_two_processes_never_run_more_items_at_once_than_the_concurrency(url, tmp_path):
    # Given two worker processes on one store, one of which submits a map of 8 items, 2 at a time
    world = World(str(tmp_path / "world.db"))
    a = start(url, world.db, "submit", 8, 2)
    b = start(url, world.db, "serve", 8, 2)
    # When both have finished
    finish(a)
    finish(b)
    # Then the run completed, every item ran once, and never more than 2 at once across both processes
    run, kids = top_run(url)
    assert run.state == "completed" and [k.state for k in kids] == ["completed"] * 8
    spans = world.rows("SELECT start, end FROM intervals")
    assert len(spans) == 8 and most_at_once(spans) <= 2
    assert sorted(r[0] for r in world.rows("SELECT label FROM effects")) == sorted(f"i{k}" for k in range(8))


def test_a_worker_killed_mid_map_leaves_a_run_another_finishes_with_each_effect_once(url, tmp_path):
    # Given a worker running a map of 6 items, 2 at a time, hanging in item i2's action
    world = World(str(tmp_path / "world.db"))
    marker = tmp_path / "marker"
    a = start(url, world.db, "submit", 6, 2, FAN_HANG="i2", FAN_MARKER=str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert a.poll() is None, a.communicate()
        assert time.monotonic() < deadline, "the worker never reached item i2"
        time.sleep(0.02)
    # When it is SIGKILLed there, and another worker starts on the same store
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    _, before = top_run(url)
    done_before = {k.index for k in before if k.state == "completed"}
    b = start(url, world.db, "serve", 6, 2)
    finish(b)
    # Then the run completed with every item's output in order
    run, kids = top_run(url)
    assert run.state == "completed" and [k.state for k in kids] == ["completed"] * 6
    assert run.output is None and [k.output for k in kids] == [f"done:i{k}" for k in range(6)]
    # and each item's effect happened once at the receiver, the items completed before the kill never ran again
    effects = world.rows("SELECT label, COUNT(*) FROM effects GROUP BY label")
    assert sorted(effects) == sorted((f"i{k}", 1) for k in range(6))
    calls = dict(world.rows("SELECT label, COUNT(*) FROM calls GROUP BY label"))
    assert all(calls[f"i{k}"] == 1 for k in done_before)
    # and the hung item was taken over by the second worker (its first attempt lost with the worker)
    assert [r[0] for r in world.rows("SELECT label FROM intervals WHERE end = 'Infinity' OR end > 1e300")] == ["i2"]
