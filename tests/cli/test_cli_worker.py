"""`sealflow worker` registers the actions it is given and no others: the demo world only when asked.

The probe gives the worker a broker URL that is not Redis, so it stops (exit 2) right after loading its
actions and before serving; what it registered by then is what it would have served. (A Redis broker
that is not there is waited for: tests/cli/test_cli_worker_broker.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NO_BROKER = "http://127.0.0.1:1/0"

PROBE = """\
import json, sys
from sealflow.cli import main
code = main(json.loads(sys.argv[1]))
from sealflow.interpreter.execution.actions import REGISTRY
print(json.dumps({"code": code, "demo_imported": "sealflow.demo" in sys.modules,
                  "demo_actions": sorted(n for n in REGISTRY if n.startswith(("crm.", "email.")))}))
"""


def _worker(tmp_path: Path, *extra: str) -> dict:
    argv = ["worker", "--broker", NO_BROKER, "--allow-open", "--store", f"sqlite:///{tmp_path / 'w.db'}", *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER")}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 2 and "is not a Redis URL" in proc.stderr, proc.stderr
    return result


def test_given_a_worker_without_the_demo_actions_when_it_starts_then_it_registers_no_demo_action(tmp_path):
    # Given a worker started with its own --actions only, when it has loaded them
    own = tmp_path / "own_actions.py"
    own.write_text("from sealflow import action\n\n@action('own.ping', permissions=[], effect='read')\n"
                   "def ping(ctx):\n    return {}\n")
    result = _worker(tmp_path, "--actions", str(own))
    # Then the demo world was neither imported nor registered
    assert result == {"code": 2, "demo_imported": False, "demo_actions": []}


@pytest.mark.parametrize("extra", [(), ("--actions", "sealflow.demo")])
def test_given_a_worker_when_it_starts_then_demo_actions_are_there_only_if_asked_for(tmp_path, extra):
    # Given a worker with no --actions, or with --actions sealflow.demo
    result = _worker(tmp_path, *extra)
    # Then the demo actions are registered exactly when they were asked for
    assert result["demo_imported"] is bool(extra)
    assert ("crm.get_lead" in result["demo_actions"]) is bool(extra)
