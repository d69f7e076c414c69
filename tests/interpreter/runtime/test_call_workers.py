"""definitions/ops-report end to end on PostgreSQL with worker processes (Redis broker): the report is archived,
then team-notification runs as its child run in a worker and notifies once (cancelling, failures, budgets and
trust of a call on both stores: tests/interpreter/engine/test_call_runs.py). Needs PostgreSQL and Redis at
127.0.0.1 (CI turns skips into failures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_liveness_requeue import ROOT, Workers, wait_until
from worker_helpers import redis_or_skip

from sealflow.store import open_store

DEFINITIONS = ROOT / "definitions"


class DemoWorkers(Workers):
    """Workers with the demo world's actions (the definitions' own)."""

    actions = "sealflow.demo"


@pytest.fixture
def workers(tmp_path, pg_schema):
    w = DemoWorkers(tmp_path, pg_schema.url(migrate="1"), redis_or_skip())
    w.env["SEALFLOW_DEMO_DB"] = str(tmp_path / "demo.db")
    w.policy.write_text('{"tenants": {"default": {"roles": {"ops": ["metrics:read", "incidents:read", '
                        '"reports:write", "notify:send"]}, "members": {"user:ops": ["ops"]}}}}')
    yield w
    w.close()


def submit(workers, name: str, value: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "sealflow", "submit", str(DEFINITIONS / name), "--input",
                           json.dumps(value), "--store", workers.store_url, "--access", str(workers.policy), "--as",
                           "user:ops", "--json"], cwd=ROOT, env=workers.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["run_id"]


def test_ops_report_calls_team_notification_in_a_worker_and_notifies_once(workers):
    # Given two workers on PostgreSQL + Redis with the demo actions
    workers.start("w1")
    workers.start("w2")
    # When ops-report is submitted for its owner
    run_id = submit(workers, "ops-report.v1.yaml", {"owner": "usr_alice"})
    store = open_store(workers.store_url)
    try:
        wait_until(lambda: store.get_run(run_id).state in ("completed", "failed"), 60, "the report's end")
        run = store.get_run(run_id)
        # Then it completed with the archive and the notification the child sent
        assert run.state == "completed", run.error_message
        [kid] = store.children(run_id)
        child = store.get_run(kid.id)
        assert (child.workflow, child.state, child.called) == ("team-notification", "completed", True)
        assert run.output == {"archive_id": "rep_000001", "notified": kid.output["notification_id"]}
        # and every step of both ran in the workers
        ran = {e.actor for r in (run_id, kid.id) for e in store.audit(r) if e.event == "step.running"}
        pids = {str(p.pid) for p in workers.procs.values()}
        assert ran and all(actor.split(":")[1] in pids for actor in ran), (ran, pids)
    finally:
        store.close()
    # and the one notification went out once
    from sealflow.demo import notifications

    assert [(n["user_id"], n["template"]) for n in notifications(workers.env["SEALFLOW_DEMO_DB"])] == \
        [("usr_alice", "report_ready")]
