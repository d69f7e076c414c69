"""Unknown outcome is a person's call: a real ``sealflow run`` whose SMS action (its gateway cannot deduplicate)
dies after sending and before its result is committed. Recovery does not send it again; the run waits; a person
who checked the gateway says it succeeded, and the run completes with one message sent."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from cli_process import sealflow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKFLOW = HERE / "outcome.v1.yaml"
ACTIONS = HERE / "outcome_actions.py"



@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SMS_", "SEALFLOW_"))}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "SMS_DB": str(tmp_path / "sms.db"), "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
    return e


def sent(env) -> list[tuple]:
    conn = sqlite3.connect(env["SMS_DB"])
    try:
        return conn.execute("SELECT recipient, fence FROM sent").fetchall()
    finally:
        conn.close()


def only_run_id(env) -> str:
    conn = sqlite3.connect(env["SEALFLOW_STORE"].removeprefix("sqlite:///"))
    try:
        (run_id,) = [r[0] for r in conn.execute("SELECT id FROM runs")]
    finally:
        conn.close()
    return run_id


def test_given_a_lost_sms_when_recovered_then_a_person_decides_and_it_is_sent_once(env):
    # Given a run whose SMS was sent by a process that died before committing it
    run = sealflow(["run", str(WORKFLOW), "--actions", str(ACTIONS), "--input", '{"to": "+15550100"}'], env)
    assert run.returncode == -9 and len(sent(env)) == 1
    run_id = only_run_id(env)
    # When the store is recovered
    rec = sealflow(["recover", "--actions", str(ACTIONS)], env)
    # Then it was not sent again: the run waits for a person, and says how to decide
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert len(sent(env)) == 1
    shown = sealflow(["status", run_id, "--actions", str(ACTIONS)], env)
    assert shown.returncode == 3, shown.stdout + shown.stderr
    assert "waiting for a person at text" in shown.stdout and f"sealflow resolve {run_id}" in shown.stdout
    # When a decision lacks a reason, or gives --output without --succeeded, it is a usage error
    assert sealflow(["resolve", run_id, "--succeeded"], env).returncode == 2
    assert sealflow(["resolve", run_id, "--failed", "--output", "{}", "--reason", "x"], env).returncode == 2
    # When a person who checked the gateway says it was sent
    done = sealflow(["resolve", run_id, "--succeeded", "--output", '{"sent": true, "to": "+15550100"}',
                     "--reason", "the gateway's log shows it delivered", "--actions", str(ACTIONS), "--json"], env)
    # Then the run completed with that output, and the message was sent once
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["output"] == {"sent": True, "to": "+15550100"}
    assert len(sent(env)) == 1
    trail = sealflow(["audit", run_id, "--json"], env)
    decided = [e for e in json.loads(trail.stdout) if e["event"] == "outcome_decided"]
    assert decided and decided[0]["detail"]["decision"] == "succeeded"


def test_given_a_lost_sms_when_a_person_chooses_retry_then_it_runs_again_with_a_larger_fence(env):
    # Given the same lost SMS, recovered
    sealflow(["run", str(WORKFLOW), "--actions", str(ACTIONS), "--input", '{"to": "+15550100"}'], env)
    run_id = only_run_id(env)
    assert sealflow(["recover", "--actions", str(ACTIONS)], env).returncode == 0
    # When a person decides to send it again
    done = sealflow(["resolve", run_id, "--retry", "--reason", "the gateway shows nothing sent",
                     "--actions", str(ACTIONS)], env)
    # Then it ran again under a larger fence (a receiver that can fence would refuse the first execution's
    # late write), and the run completed
    assert done.returncode == 0, done.stdout + done.stderr
    (first, second) = sent(env)
    assert second[1] > first[1]
