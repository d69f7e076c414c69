"""Poison steps are bounded: a step whose action kills its process runs at most ``lost_attempts`` times.

A crash pill (it SIGKILLs its own process) is run by a real ``sealflow run``, with no retry class. In a
thread (the default) each execution kills the command, and every ``sealflow recover`` counts the lost
attempt (not a failure: it runs again) and runs it again; under process isolation only the attempt's
child dies and the one ``run`` command sees it through. Either way the run is quarantined as poison after
exactly ``lost_attempts`` (3 by default, or the runtime configuration's) executions, and a redrive is refused.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from cli_process import sealflow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKFLOW = HERE / "poison.v1.yaml"
ACTIONS = HERE / "poison_actions.py"



@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("POISON_", "SEALFLOW_"))}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "POISON_CALLS_DB": str(tmp_path / "calls.db"), "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
    return e


def executions(env) -> int:
    if not Path(env["POISON_CALLS_DB"]).exists():
        return 0
    conn = sqlite3.connect(env["POISON_CALLS_DB"])
    try:
        return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    finally:
        conn.close()


def the_run(env) -> dict:
    runs = sealflow(["dlq", "list", "--json"], env)
    assert runs.returncode == 0, runs.stdout + runs.stderr
    return json.loads(runs.stdout)


def status(env, run_id: str) -> dict:
    got = sealflow(["status", run_id, "--json"], env)
    assert got.returncode in (0, 1), got.stdout + got.stderr  # 1: the run failed
    return json.loads(got.stdout)


def pill(detail: dict) -> dict:
    (step,) = [s for s in detail["steps"] if s["id"] == "pill"]
    return step


def only_run_id(env) -> str:
    conn = sqlite3.connect(env["SEALFLOW_STORE"].removeprefix("sqlite:///"))
    try:
        (run_id,) = [r[0] for r in conn.execute("SELECT id FROM runs")]
    finally:
        conn.close()
    return run_id


def test_given_a_crash_pill_in_a_thread_when_recovered_again_and_again_then_quarantined_after_lost_attempts(env):
    # Given a run whose action kills the `run` command itself
    run = sealflow(["run", str(WORKFLOW), "--actions", str(ACTIONS), "--json"], env)
    assert run.returncode == -9 and executions(env) == 1
    run_id = only_run_id(env)
    # When `sealflow recover` is run until it survives (each one dies running the lost attempt again)
    for _ in range(6):
        rec = sealflow(["recover", "--actions", str(ACTIONS), "--json"], env)
        if rec.returncode == 0:
            break
        assert rec.returncode == -9, rec.stdout + rec.stderr
    # Then the pill ran exactly lost_attempts times, and the run is quarantined as poison, saying what was seen
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert executions(env) == 3
    detail = status(env, run_id)
    assert detail["state"] == "quarantined"
    assert pill(detail)["attempts"] == 1 and pill(detail)["error"]["class"] == "worker_lost"
    assert pill(detail)["error"]["message"].startswith("poison: step 'pill' was lost 3 times in a row")
    assert "its process no longer exists" in pill(detail)["error"]["message"]
    (letter,) = the_run(env)
    assert letter["run_id"] == run_id and letter["status"] == "quarantined"


def test_given_a_crash_pill_under_process_isolation_then_one_run_command_quarantines_it_and_a_redrive_is_refused(env):
    # Given process isolation as the worker-wide default
    env = {**env, "SEALFLOW_ISOLATION": "process"}
    # When the crash pill runs: only the attempt's child dies, the `run` command goes on
    run = sealflow(["run", str(WORKFLOW), "--actions", str(ACTIONS), "--json"], env)
    # Then it was run again after each death, and quarantined after exactly lost_attempts executions
    assert run.returncode == 1, run.stdout + run.stderr
    assert executions(env) == 3
    run_id = only_run_id(env)
    detail = status(env, run_id)
    assert detail["state"] == "quarantined"
    assert pill(detail)["attempts"] == 3 and pill(detail)["error"]["class"] == "worker_lost"
    assert "killed by signal SIGKILL" in pill(detail)["error"]["message"]
    # When it is redriven, Then it is refused: a poison step is an operator's, never a loop
    redrive = sealflow(["dlq", "redrive", run_id, "--actions", str(ACTIONS), "--json"], env)
    assert redrive.returncode == 1 and "quarantined" in redrive.stderr, redrive.stdout + redrive.stderr
    assert executions(env) == 3


def test_given_lost_attempts_in_the_runtime_configuration_then_the_pill_runs_that_many_times(env, tmp_path):
    # Given a runtime configuration allowing two losses in a row, and process isolation
    config = tmp_path / "runtime.yaml"
    config.write_text("lost_attempts: 2\n")
    env = {**env, "SEALFLOW_ISOLATION": "process", "SEALFLOW_CONFIG": str(config)}
    # When the crash pill runs
    run = sealflow(["run", str(WORKFLOW), "--actions", str(ACTIONS), "--json"], env)
    # Then it ran twice and is quarantined
    assert run.returncode == 1, run.stdout + run.stderr
    assert executions(env) == 2 and status(env, only_run_id(env))["state"] == "quarantined"
