"""A model's rate limit is shared by worker processes: two processes on one store (SQLite file, PostgreSQL
schema), calling one fake OpenAI-compatible server over real HTTP, never send it more than the limit per
minute. Both processes read one clock from a file the test moves, a minute at a time: every call made
while the clock stands still falls in one minute window, counted at the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_model_servers import FakeModelServer
from interp_helpers import BACKENDS

from sealflow.store import open_store

HERE = Path(__file__).resolve().parent
WORKER = HERE / "ratelimit_worker.py"
LIMIT = 3


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        got = f"sqlite:///{tmp_path}/shared.db"
    else:
        got = request.getfixturevalue("pg_schema").url(clock="caller", migrate="1", pool_max="4")
    open_store(got).close()  # created and migrated before two processes open it
    return got


def settle(url: str, total: int, now: float, bound: float = 90.0) -> dict[str, int]:
    """Wait until all ``total`` runs are completed or waiting for a timer due after ``now`` (nothing left to
    do until the clock moves); return the count of runs per state."""
    store = open_store(url)
    try:
        end = time.monotonic() + bound
        while True:
            runs = store.list_runs(limit=1000)
            states: dict[str, int] = {}
            for run in runs:
                states[run.state] = states.get(run.state, 0) + 1
            active = [store.active_attempt(r.id) for r in runs if r.state == "waiting"]
            idle = len(runs) == total and set(states) <= {"completed", "waiting"} and all(
                a is not None and a.state == "waiting" and a.due_at > now for a in active)
            if idle or time.monotonic() > end:
                return states
            time.sleep(0.1)
    finally:
        store.close()


def test_two_worker_processes_never_pass_the_limit_per_minute(url, tmp_path):
    # Given a fake model server, one clock file, and two worker processes each submitting 4 runs of an ai step
    # calling model `shared`, limited to 3 requests per minute
    clock, stop = tmp_path / "clock", tmp_path / "stop"
    now = time.time()
    clock.write_text(repr(now))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE.parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    with FakeModelServer(usage_in=30, usage_out=5) as server:
        procs = [subprocess.Popen([sys.executable, str(WORKER), url, server.base_url, str(clock), "4", prefix,
                                   str(stop)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for prefix in ("a", "b")]
        try:
            seen = []
            for _ in range(4):
                # When both have done all they can within this minute
                states = settle(url, 8, now)
                seen.append((len(server.requests), states.get("completed", 0), states.get("waiting", 0)))
                # ... then the clock moves one minute on
                now += 61
                clock.write_text(repr(now))
        finally:
            stop.write_text("stop")
            outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    # Then each minute the server got at most 3 requests, every run completed in the end, none failed
    assert seen == [(3, 3, 5), (6, 6, 2), (8, 8, 0), (8, 8, 0)]
    assert all(body["model"] == "shared" for _, _, body in server.requests)
