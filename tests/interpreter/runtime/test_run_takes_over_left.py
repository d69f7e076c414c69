"""A process driving a run on a shared store (`sealflow run`, `status --watch`) takes over the step a worker
took and left (the worker lacks its action module): it used to wait for the message's redelivery, a minute,
while every redelivery went to the same worker (on PostgreSQL, LISTEN/NOTIFY wakes the worker's dispatcher
first), until the run's deadline passed. Needs PostgreSQL and Redis at 127.0.0.1 (CI turns skips into
failures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_liveness_requeue import E2E, ROOT, Workers, wait_until
from worker_helpers import redis_or_skip

from sealflow.store import open_store


class BareWorkers(Workers):
    """Workers with the demo world's actions only: they lack ``crash.effect``."""

    actions = "sealflow.demo"


@pytest.fixture
def bare(tmp_path, pg_schema):
    w = BareWorkers(tmp_path, pg_schema.url(migrate="1"), redis_or_skip())
    yield w
    w.close()


def sealflow(bare, *args: str) -> subprocess.CompletedProcess:
    """A `sealflow` command on the workers' store, with the action module (a hang guard: without the take-over
    a driving process waited a minute or more)."""
    return subprocess.run([sys.executable, "-m", "sealflow", *args, "--store", bare.store_url, "--actions",
                           str(E2E / "crash_actions.py"), "--access", str(bare.policy), "--as", "user:crash",
                           "--json"], cwd=ROOT, env=bare.env, capture_output=True, text=True, timeout=45)


def trail_of(bare, run_id: str) -> list:
    store = open_store(bare.store_url)
    try:
        return store.audit(run_id)
    finally:
        store.close()


def test_a_driving_process_takes_over_the_step_a_worker_left_and_the_trail_says_who_left_it(bare):
    # Given a worker on PostgreSQL + Redis without the workflow's action module, and a run it took the first
    # step of and left, lacking the action (submitted without a driver: only the worker dispatches it)
    bare.start("bare")
    submitted = sealflow(bare, "submit", str(E2E / "crash.v1.yaml"))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = json.loads(submitted.stdout)["run_id"]
    wait_until(lambda: any(e.event == "step.left" for e in trail_of(bare, run_id)), 30, "the worker left a step")
    # When a process that has the module drives the run (`status --watch`, as `sealflow run` does after its
    # submit)
    done = sealflow(bare, "status", run_id, "--watch")
    # Then the run completes
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["state"] == "completed"
    # And the audit trail says the worker took the first step and left it, lacking the action; the driving
    # process ran it
    trail = trail_of(bare, run_id)
    left = [e for e in trail if e.event == "step.left"]
    assert left and all(e.detail["lacks"] == [["action", "crash.effect"]] for e in left)
    assert left[0].actor.startswith("worker:") and "missing action 'crash.effect'" in bare.log("bare")
    ran = [e for e in trail if e.event == "step.running" and e.step_id == left[0].step_id]
    assert ran and ran[0].actor != left[0].detail["owner"]


def test_run_completes_whichever_process_takes_its_steps(bare):
    # Given a worker on PostgreSQL + Redis without the workflow's action module
    bare.start("bare")
    # When `sealflow run` runs the workflow (its dispatcher and the worker's race for each due step)
    done = sealflow(bare, "run", str(E2E / "crash.v1.yaml"))
    # Then the run completes, every step run by `run`'s process (any the worker took, it left)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "completed"
    trail = trail_of(bare, result["run_id"])
    ran = [e for e in trail if e.event == "step.running"]
    owners = {e.detail["owner"] for e in trail if e.event == "step.left"}
    assert {e.step_id for e in ran} == {"one", "two", "three", "done"} and not owners & {e.actor for e in ran}
