"""`sealflow status RUN --follow`: a process that runs nothing follows a run the workers run, by its live feed
(the items `GET /v1/runs/{id}/events` streams), until it ends or waits for a person. Needs PostgreSQL and Redis
at 127.0.0.1 (CI turns skips into failures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_liveness_requeue import ROOT, Workers
from worker_helpers import redis_or_skip

from sealflow.store import open_store


@pytest.fixture
def workers(tmp_path, pg_schema):
    w = Workers(tmp_path, pg_schema.url(migrate="1"), redis_or_skip())
    yield w
    w.close()


def command(workers, run_id: str, *extra: str) -> tuple[list[str], dict]:
    env = workers.env
    return [sys.executable, "-m", "sealflow", "status", run_id, "--follow", *extra, "--store", workers.store_url,
            "--access", str(workers.policy), "--as", "user:crash"], env


def status(workers, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    args, env = command(workers, run_id, *extra)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_follow_prints_the_feed_as_the_workers_run_the_run_and_runs_nothing_itself(workers):
    # Given a run submitted while no worker runs, and a process following it from then on
    run_id = workers.submit()
    args, env = command(workers, run_id)
    follower = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # When a worker on PostgreSQL + Redis starts and runs it
    workers.start("w1")
    out, err = follower.communicate(timeout=60)
    # Then the follower ends with the run's end (completed: exit 0), having printed the feed's items as they came
    assert follower.returncode == 0, out + err
    assert "step.succeeded" in out and "run.completed" in out
    # and every step ran in the worker, none in the following process
    store = open_store(workers.store_url)
    try:
        ran = {e.actor for e in store.audit(run_id) if e.event == "step.running"}
    finally:
        store.close()
    worker = workers.procs["w1"].pid
    assert ran and all(f":{worker}:" in actor and f":{follower.pid}:" not in actor for actor in ran), ran


def test_follow_with_json_answers_the_final_status(workers):
    # Given a worker and a run submitted to it, When followed with --json
    workers.start("w1")
    run_id = workers.submit()
    done = status(workers, run_id, "--json")
    # Then the one JSON document is the run's final status
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "completed"


def test_watch_and_follow_together_are_refused(workers):
    run_id = workers.submit()
    done = status(workers, run_id, "--watch")
    assert done.returncode == 2 and "choose one" in done.stderr
