"""No dead end for other runs (issue 14): a process that picks up a step it lacks the action module for leaves it.

`sealflow run` of workflow A recovers and sweeps the whole store, and a `sealflow worker` takes whatever the
broker holds: both used to claim a step of another workflow B whose action module they never loaded, fail it
with `configuration: unknown action` and dead-letter B. Now they leave the step as it was (no attempt used, no
dead letter) and a process that has the module runs it (interpreter/engine/capability.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from test_crash_recovery import ACTIONS, ROOT, WORKFLOW, sealflow, wait_for
from test_worker_redis import Deployment, redis_or_skip

OTHER = """\
sealflow: 1
name: other
version: 1
owner: team:test
steps:
  - id: done
    succeed: {output: "other"}
"""


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_") and k != "SEALFLOW_ACCESS"}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "CRASH_EFFECTS_DB": str(tmp_path / "effects.db"), "CRASH_MARKER": str(tmp_path / "marker"),
              "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
    return e


def attempts(tmp_path, run_id: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{tmp_path / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT step_id, attempt, state, error_class FROM attempts WHERE run_id = ? "
                            "ORDER BY step_id, attempt", (run_id,)).fetchall()
    finally:
        conn.close()


def effects(tmp_path) -> list[tuple]:
    if not (tmp_path / "effects.db").exists():
        return []
    conn = sqlite3.connect(tmp_path / "effects.db", timeout=10)
    try:
        return conn.execute("SELECT step FROM effects ORDER BY step").fetchall()
    finally:
        conn.close()


def run_other(tmp_path, env) -> subprocess.CompletedProcess:
    """Process two: `sealflow run` of workflow A, without B's action module."""
    (tmp_path / "other.v1.yaml").write_text(OTHER)
    return sealflow(["run", str(tmp_path / "other.v1.yaml"), "--json"], env)


def test_run_of_another_workflow_leaves_a_queued_step_it_lacks_the_module_for(tmp_path, env):
    # Given run B of a workflow with a custom action, queued by `submit` (nobody has driven it yet)
    done = sealflow(["submit", str(WORKFLOW), "--actions", str(ACTIONS)], env)
    assert done.returncode == 0, done.stderr
    run_b = done.stdout.strip()
    # When another process, without B's action module, runs workflow A on the same store
    other = run_other(tmp_path, env)
    # Then A completes, and B is as it was: its first step scheduled, no attempt used, not dead-lettered
    assert other.returncode == 0 and json.loads(other.stdout)["state"] == "completed", other.stderr
    assert attempts(tmp_path, run_b) == [("one", 1, "scheduled", None)]
    assert sealflow(["dlq", "list", "--json"], env).stdout.strip() in ("[]", "")
    assert "left step 'one'" in other.stderr and "missing action 'crash.effect'" in other.stderr
    # And a process with the module (`sealflow recover --actions`) completes B, each effect once
    done = sealflow(["recover", "--actions", str(ACTIONS), "--json"], env)
    assert done.returncode == 0 and json.loads(done.stdout)["runs"][run_b] == "completed", done.stdout + done.stderr
    assert effects(tmp_path) == [("one",), ("three",), ("two",)]


def test_the_sweep_of_another_workflow_leaves_an_expired_lease_it_lacks_the_module_for(tmp_path, env):
    # Given run B killed in the middle of its first step: its lease belongs to a dead process
    proc = subprocess.Popen([sys.executable, "-m", "sealflow", "run", str(WORKFLOW), "--actions", str(ACTIONS),
                             "--json"], cwd=ROOT, env={**env, "CRASH_AT": "one:before"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "marker", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()
    (tmp_path / "marker").unlink()
    conn = sqlite3.connect(tmp_path / "state.db", timeout=10)
    run_b = conn.execute("SELECT id FROM runs WHERE workflow = 'crash'").fetchone()[0]
    conn.close()
    assert attempts(tmp_path, run_b) == [("one", 1, "running", None)]
    # When another process, without B's action module, runs workflow A: it ends the dead process's lease
    other = run_other(tmp_path, env)
    # Then it does not take B's step: no worker_lost recorded, no retry used, no dead letter
    assert other.returncode == 0, other.stderr
    assert attempts(tmp_path, run_b) == [("one", 1, "scheduled", None)]
    assert "missing action 'crash.effect'" in other.stderr
    # And the process with the module finishes B (the lost attempt counts as one try), each effect once
    done = sealflow(["recover", "--actions", str(ACTIONS), "--json"], env)
    assert done.returncode == 0 and json.loads(done.stdout)["runs"][run_b] == "completed", done.stdout + done.stderr
    assert effects(tmp_path) == [("one",), ("three",), ("two",)]


class Bare(Deployment):
    """Workers whose action modules the test chooses."""

    def worker_args(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "sealflow", "worker", "--broker", "redis://127.0.0.1:6379/0", "--store",
                self.store, "--queue", self.queue, "--redeliver-after", "1", *extra]


@pytest.fixture
def deployment(tmp_path):
    d = Bare(tmp_path, redis_or_skip())
    yield d
    d.close()


def test_a_worker_without_the_module_leaves_the_message_to_a_worker_with_it(deployment):
    # Given a worker that has only the demo world's actions, and run B of a workflow with a custom action
    deployment.start_worker("bare", "--actions", "sealflow.demo", "--allow-open")
    deployment.wait_ready("bare")
    run_b = deployment.submit()
    deadline = time.monotonic() + 30
    while "left step 'one'" not in deployment.log("bare") and time.monotonic() < deadline:
        time.sleep(0.1)
    # When that worker takes B's message, Then it leaves the step as it was
    assert "missing action 'crash.effect'" in deployment.log("bare"), deployment.log("bare")
    assert attempts(deployment.tmp, run_b) == [("one", 1, "scheduled", None)]
    assert deployment.run_states([run_b]) == {run_b: "queued"}
    # And once a worker with the module joins, B completes with each effect once
    deployment.start_worker("capable", "--actions", str(ACTIONS), "--allow-open")
    deployment.wait_completed([run_b], timeout=60)
    assert effects(deployment.tmp) == [("one",), ("three",), ("two",)]


class Patient(Bare):
    """Workers that send a message again only after Sealflow's default minute."""

    def worker_args(self, *extra: str) -> list[str]:
        return [a for a in super().worker_args(*extra) if a not in ("--redeliver-after", "1")]

    def left_by_bare(self) -> str:
        """A worker without the custom module ("bare") takes run B's first message and leaves it; B's id."""
        self.start_worker("bare", "--actions", "sealflow.demo", "--allow-open")
        self.wait_ready("bare")
        run_b = self.submit()
        deadline = time.monotonic() + 30
        while "left step 'one'" not in self.log("bare") and time.monotonic() < deadline:
            time.sleep(0.1)
        return run_b


def test_a_worker_with_the_module_takes_over_a_step_another_worker_left_without_waiting_for_its_redelivery(
        tmp_path):
    d = Patient(tmp_path, redis_or_skip())
    try:
        # Given a worker without the custom module that has taken run B's message and left the step
        run_b = d.left_by_bare()
        assert attempts(d.tmp, run_b) == [("one", 1, "scheduled", None)], d.log("bare")
        # When a worker with the module joins (each sends an unclaimed message again only after 60 s)
        joined = time.monotonic()
        d.start_worker("capable", "--actions", str(ACTIONS), "--allow-open")
        d.wait_completed([run_b], timeout=25)
        # Then it took the step over from the store's record of who left it, well before any redelivery,
        # and B completed with each effect once
        assert time.monotonic() - joined < 25 and "taking over step 'one' (attempt 1)" in d.log("capable")
        assert effects(d.tmp) == [("one",), ("three",), ("two",)]
    finally:
        d.close()


def test_a_worker_killed_in_the_step_it_took_over_is_replaced_and_the_effect_applies_once(tmp_path):
    d = Patient(tmp_path, redis_or_skip())
    try:
        # Given a worker without the module that left run B's first step, and a worker with it that takes the
        # step over and hangs in it after its effect
        run_b = d.left_by_bare()
        d.start_worker("capable", "--actions", str(ACTIONS), "--allow-open", env={"CRASH_AT": "one:after"})
        marker = d.wait_marker("capable")
        assert "taking over step 'one' (attempt 1)" in d.log("capable")
        assert int(marker.read_text()) == d.workers["capable"].pid
        # When that worker is SIGKILLed in the step, and another worker with the module starts
        assert d.stop("capable", signal.SIGKILL) == -signal.SIGKILL
        d.start_worker("again", "--actions", str(ACTIONS), "--allow-open")
        # Then the dead worker's lease ends, the same attempt runs again (a loss, not a retry) wherever it lands,
        # and B completes with each effect once (the killed attempt's effect is the one the rerun finds done)
        d.wait_completed([run_b], timeout=60)
        assert effects(d.tmp) == [("one",), ("three",), ("two",)]
        assert [a[:3] for a in attempts(d.tmp, run_b) if a[0] == "one"] == [("one", 1, "succeeded")]
    finally:
        d.close()


SECRET_ACTIONS = '''
from sealflow import action


@action("vault.read", effect="read", secrets=["vault_token"])
def read(ctx) -> dict:
    return {"ok": len(ctx.secrets["vault_token"]) > 0}
'''

SECRET_FLOW = """\
sealflow: 1
name: vaulted
version: 1
owner: team:test
steps:
  - id: read
    action: vault.read
  - id: done
    succeed: {}
"""


def test_run_refuses_before_creating_a_run_whose_secret_this_process_lacks(tmp_path, env):
    # Given a definition whose action declares a secret, and no value for it in this process
    (tmp_path / "vault_actions.py").write_text(SECRET_ACTIONS)
    (tmp_path / "vaulted.v1.yaml").write_text(SECRET_FLOW)
    env = {k: v for k, v in env.items() if k != "SEALFLOW_SECRET_VAULT_TOKEN"}
    argv = ["run", str(tmp_path / "vaulted.v1.yaml"), "--actions", str(tmp_path / "vault_actions.py")]
    # When it is run
    done = sealflow(argv, env)
    # Then it is refused (exit 1) naming the secret and the variable to set, and no run was created
    assert done.returncode == 1 and "no run was created" in done.stderr, done.stdout + done.stderr
    assert "missing secret 'vault_token'" in done.stderr and "SEALFLOW_SECRET_VAULT_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr and sealflow(["runs", "list", "--json"], env).stdout.strip() == "[]"
    # And with the secret set, the same command runs it to the end
    done = sealflow([*argv, "--json"], {**env, "SEALFLOW_SECRET_VAULT_TOKEN": "tok-0123456789abcdef"})
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "completed", done.stderr
