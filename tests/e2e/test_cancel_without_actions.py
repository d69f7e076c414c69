"""`sealflow cancel RUN` works from a process that lacks the run's action modules (issue 31).

Cancelling needs no action, so a process without the run's modules used to refuse for nothing ("this process
could not continue it"). Compensation does need its actions: the cancel records the run `compensating`, the
lacking process leaves each compensation for a process that has the module (as it leaves any step it lacks:
interpreter/engine/capability.py), and that process runs it, once. Each command is its own process here, so
"lacks the module" is what a real second shell would lack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ACTIONS = '''
import os

from sealflow import action


@action("cx.reserve", effect="write")
def reserve(ctx) -> dict:
    return {"reserved": True}


@action("cx.release", effect="write")
def release(ctx) -> dict:
    with open(os.environ["CX_UNDONE"], "a") as f:
        f.write(ctx.run_id + "\\n")
    return {"released": True}
'''

STEPS_WAIT = """\
sealflow: 1
name: cx-{name}
version: 1
owner: team:test
steps:
  - id: first
    action: cx.reserve
{compensate}  - id: ask
    approval: {{approvers: [user:ben], timeout: 1h}}
  - id: after
    action: cx.reserve
"""


def definition(tmp_path: Path, *, compensated: bool) -> Path:
    name = "undo" if compensated else "plain"
    text = STEPS_WAIT.format(name=name, compensate="    compensate: {action: cx.release}\n" if compensated else "")
    path = tmp_path / f"cx-{name}.v1.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path):
    (tmp_path / "cx_actions.py").write_text(ACTIONS)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SEALFLOW_", "CX_"))}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db"), "CX_UNDONE": str(tmp_path / "undone.txt")})
    return e


def sealflow(tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sealflow", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def waiting_run(tmp_path: Path, env: dict, *, compensated: bool) -> str:
    """A run submitted and driven with --actions of the test module, waiting at its approval gate."""
    done = sealflow(tmp_path, env, "run", str(definition(tmp_path, compensated=compensated)), "--actions",
                    str(tmp_path / "cx_actions.py"), "--as", "user:ann", "--json")
    assert done.returncode == 3, done.stderr
    shown = json.loads(done.stdout)
    assert shown["state"] == "waiting" and shown["waiting"]["step"] == "ask"
    return shown["run_id"]


def undone(tmp_path: Path) -> list[str]:
    path = tmp_path / "undone.txt"
    return path.read_text().split() if path.exists() else []


def test_given_a_waiting_run_when_a_process_without_its_actions_cancels_it_then_it_is_cancelled(tmp_path, env):
    # Given a run waiting at an approval, submitted with --actions of a test module
    run_id = waiting_run(tmp_path, env, compensated=False)
    # When a process without that module cancels it
    done = sealflow(tmp_path, env, "cancel", run_id, "--as", "user:ann", "--json")
    # Then the cancel is accepted and the run is cancelled, its gate with it
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["state"] == "cancelled"
    assert {s["id"]: s["state"] for s in shown["steps"]}["ask"] == "cancelled"
    assert "refused" not in done.stderr and "Traceback" not in done.stderr


def test_given_a_completed_step_with_a_compensation_when_a_lacking_process_cancels_then_a_capable_one_undoes_it_once(
        tmp_path, env):
    # Given a run whose completed step has a compensation, waiting at an approval
    run_id = waiting_run(tmp_path, env, compensated=True)
    # When a process without the module cancels it
    done = sealflow(tmp_path, env, "cancel", run_id, "--as", "user:ann", "--json")
    # Then the cancel is accepted: the run is compensating, its compensation left for a process that has the
    # action, and not run here
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["state"] == "compensating", shown
    assert shown["waiting"]["kind"] == "process" and shown["waiting"]["step"] == "first@compensate"
    assert ["action", "cx.release"] in shown["waiting"]["lacks"]
    assert undone(tmp_path) == []
    # When a process with the module recovers what is in flight
    done = sealflow(tmp_path, env, "recover", "--actions", str(tmp_path / "cx_actions.py"), "--as", "user:ann",
                    "--json")
    assert done.returncode == 0, done.stderr
    # Then it ran the compensation, exactly once, and the run is cancelled
    assert undone(tmp_path) == [run_id]
    status = sealflow(tmp_path, env, "status", run_id, "--json")
    shown = json.loads(status.stdout)
    assert shown["state"] == "cancelled", (shown, status.stderr)
    assert {s["id"]: s["state"] for s in shown["steps"]}["first@compensate"] == "succeeded"
    # and another process (with or without the module) finds nothing left to do
    again = sealflow(tmp_path, env, "recover", "--actions", str(tmp_path / "cx_actions.py"), "--json")
    assert again.returncode == 0 and undone(tmp_path) == [run_id]
