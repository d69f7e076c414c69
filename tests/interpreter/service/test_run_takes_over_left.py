"""`sealflow run` on a shared store takes over the step a worker took and left (the worker lacks its action
module): it used to wait for the message's redelivery, a minute, while every redelivery went to the same
worker (on PostgreSQL, LISTEN/NOTIFY wakes the worker's dispatcher first), until the run's deadline passed.
Needs PostgreSQL and Redis at 127.0.0.1 (CI turns skips into failures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_liveness_requeue import E2E, ROOT, Workers
from worker_helpers import redis_or_skip

from sealflow.interpreter.store import open_store


class BareWorkers(Workers):
    """Workers with the demo world's actions only: they lack ``crash.effect``."""

    actions = "sealflow.demo"


@pytest.fixture
def bare(tmp_path, pg_schema):
    w = BareWorkers(tmp_path, pg_schema.url(migrate="1"), redis_or_skip())
    yield w
    w.close()


def test_run_takes_over_the_step_a_worker_left_and_the_trail_says_who_left_it(bare):
    # Given a worker on PostgreSQL + Redis without the workflow's action module
    bare.start("bare")
    # When `sealflow run` (which has the module, and no broker: it executes steps itself) runs the workflow
    done = subprocess.run([sys.executable, "-m", "sealflow", "run", str(E2E / "crash.v1.yaml"), "--store",
                           bare.store_url, "--actions", str(E2E / "crash_actions.py"), "--access", str(bare.policy),
                           "--as", "user:crash", "--json"], cwd=ROOT, env=bare.env, capture_output=True, text=True,
                          timeout=45)  # a hang guard: without the take-over it waited a minute or more
    # Then the run completes, each effect once
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "completed"
    # And the audit trail says the worker took the first step and left it, lacking the action; `run` ran it
    store = open_store(bare.store_url)
    try:
        trail = store.audit(result["run_id"])
    finally:
        store.close()
    left = [e for e in trail if e.event == "step.left"]
    assert left and all(e.detail["lacks"] == [["action", "crash.effect"]] for e in left)
    assert left[0].actor.startswith("worker:") and "missing action 'crash.effect'" in bare.log("bare")
    ran = [e for e in trail if e.event == "step.running" and e.step_id == left[0].step_id]
    assert ran and ran[0].actor != left[0].detail["owner"]
