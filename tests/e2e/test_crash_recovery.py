"""SIGKILL a real `sealflow run` process at several points, then `sealflow recover`.

Given a run of three irreversible effects, when the process running it is killed
(before an effect, after an effect but before its commit, or at a random
instant), then `sealflow recover` completes the run, no completed step runs
again, and every effect exists exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import sealflow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKFLOW = HERE / "crash.v1.yaml"
ACTIONS = HERE / "crash_actions.py"



@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_")}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "CRASH_EFFECTS_DB": str(tmp_path / "effects.db"), "CRASH_MARKER": str(tmp_path / "marker"),
              "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
    return e


def start_run(env, crash_at: str | None):
    e = dict(env)
    if crash_at:
        e["CRASH_AT"] = crash_at
    return subprocess.Popen([sys.executable, "-m", "sealflow", "run", str(WORKFLOW), "--actions", str(ACTIONS),
                             "--json"],
                            cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before the crash point: {proc.stdout.read()} {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("the crash point was never reached")
        time.sleep(0.02)


def effects(env) -> dict[str, int]:
    conn = sqlite3.connect(env["CRASH_EFFECTS_DB"])
    try:
        return dict(conn.execute("SELECT step, COUNT(*) FROM effects GROUP BY step").fetchall())
    finally:
        conn.close()


def calls(env) -> dict[str, int]:
    conn = sqlite3.connect(env["CRASH_EFFECTS_DB"])
    try:
        return dict(conn.execute("SELECT step, COUNT(*) FROM calls GROUP BY step").fetchall())
    finally:
        conn.close()


def recover_and_check(env) -> dict:
    rec = sealflow(["recover", "--actions", str(ACTIONS), "--json"], env)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    report = json.loads(rec.stdout)
    assert len(report["runs"]) == 1, report
    run_id, state = next(iter(report["runs"].items()))
    assert state == "completed", report
    status = sealflow(["status", run_id, "--json"], env)
    assert status.returncode == 0, status.stdout + status.stderr
    detail = json.loads(status.stdout)
    assert detail["state"] == "completed"
    assert effects(env) == {"one": 1, "two": 1, "three": 1}
    return detail


@pytest.mark.parametrize("crash_at", ["one:before", "two:after", "three:before", "three:after"])
def test_given_a_run_killed_at_a_crash_point_when_recovered_then_completed_with_effects_once(env, crash_at):
    proc = start_run(env, crash_at)
    wait_for(Path(env["CRASH_MARKER"]), proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    recover_and_check(env)
    step, _ = crash_at.split(":")
    done_before = {"one": [], "two": ["one"], "three": ["one", "two"]}[step]
    counts = calls(env)
    for earlier in done_before:
        assert counts[earlier] == 1, f"completed step {earlier} ran again: {counts}"
    assert counts[step] == 2  # the interrupted attempt, and the one that finished it


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.2])
def test_given_a_run_killed_at_a_random_instant_when_recovered_then_completed_with_effects_once(env, delay):
    proc = start_run(env, None)
    # the instant is counted from the first effect call, so it lands inside the run whatever the start-up time
    deadline = time.monotonic() + 60
    while not Path(env["CRASH_EFFECTS_DB"]).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    rec = sealflow(["recover", "--actions", str(ACTIONS), "--json"], env)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    runs = json.loads(rec.stdout)["runs"]
    assert set(runs.values()) <= {"completed"}
    if runs or effects(env):
        assert effects(env) == {"one": 1, "two": 1, "three": 1}
