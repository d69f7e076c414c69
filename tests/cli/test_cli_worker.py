"""`sealflow worker` registers the actions it is given and no others: the demo world only when asked.

The probe gives the worker a broker URL that is no broker's (neither Redis nor RabbitMQ), so it stops
(exit 2) right after loading its actions and before serving; what it registered by then is what it would
have served. (A broker that is not there is waited for: tests/e2e/test_worker_broker_outage.py and
test_worker_rabbitmq.py.)
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
from sealflow.execution.actions import REGISTRY
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
    assert result["code"] == 2 and "is not a broker's" in proc.stderr, proc.stderr
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


@pytest.mark.parametrize("url, says", [
    ("kafka://app:s3cret@broker:9092", "--broker kafka://app:***@broker:9092: the scheme 'kafka://' is not a broker's"),
    ("garbage", "--broker garbage: a URL without a scheme is not a broker's"),
    ("amqp://guest:s3cret@127.0.0.1:notaport/%2F", "--broker amqp://guest:***@127.0.0.1:notaport/%2F: Port could not"),
])
def test_given_a_broker_url_of_no_broker_or_unreadable_when_a_worker_starts_then_it_is_a_one_line_usage_error(
        tmp_path, url, says):
    # Given a --broker URL of an unknown scheme, no scheme, or an amqp:// URL pika cannot read
    env = {k: v for k, v in os.environ.items() if k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER")}
    done = subprocess.run([sys.executable, "-m", "sealflow", "worker", "--broker", url, "--allow-open", "--store",
                           f"sqlite:///{tmp_path / 'w.db'}"], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    # Then the worker exits 2 at once with one error line naming the URL (password hidden) and the fix
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("sealflow: error:")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert "amqp://" in errors[0] and "s3cret" not in done.stderr and "Traceback" not in done.stderr
    assert "worker ready" not in done.stdout


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_given_a_log_level_when_the_worker_sets_up_logging_then_the_root_logger_logs_from_that_level(level):
    # Given the worker's logging set up at --log-level LEVEL
    import logging

    from sealflow.cli.commands.worker import _setup_logging

    root = logging.getLogger()
    before_level, before_handlers = root.level, list(root.handlers)
    try:
        _setup_logging("text", level)
        # Then the root logger takes lines from that level on (a carried-on step is logged at debug only)
        assert root.level == getattr(logging, level.upper())
    finally:
        for handler in root.handlers[len(before_handlers):]:
            root.removeHandler(handler)
        root.setLevel(before_level)


def test_given_a_step_message_handled_when_it_is_logged_then_its_run_state_is_the_one_its_commit_left(caplog):
    # Given the worker's step log, and a store that would say otherwise than the step actor (it is not read)
    from types import SimpleNamespace

    from sealflow.cli.commands.worker import step_log

    steps = step_log()
    reads = []
    steps.store = SimpleNamespace(get_run=lambda run_id: reads.append(run_id) or SimpleNamespace(state="running"))
    message = SimpleNamespace(message_id="m1", args=("r1", "a", 1, 5, "default"), kwargs={})
    other = SimpleNamespace(message_id="m2", args=("r2", "a", 1, 5, "default"), kwargs={})
    caplog.set_level("INFO", logger="sealflow.worker")
    # When its message is handled (the step actor tells it the state its last commit left run r1 in: completed),
    # and one whose run it committed nothing of (it tells it None)
    for msg, state in ((message, "completed"), (other, None)):
        steps.before_process_message(None, msg)
        steps.ended(tuple(msg.args[:3]), state)
        steps.after_process_message(None, msg)
    # Then the first line says the state its commit left, with no read; the other reads the store
    lines = [r.getMessage() for r in caplog.records if "handled in" in r.getMessage()]
    assert lines[0].endswith("the run is completed") and lines[1].endswith("the run is running")
    assert reads == ["r2"] and steps.states == {}
