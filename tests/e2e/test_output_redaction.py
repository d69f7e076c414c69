"""A secret never reaches what a `sealflow run` process writes (issue 31): not through the action's own loggers,
not through its print() to stdout or stderr, in a thread or in an isolated child process.

Only the runtime's records and `ctx.log` used to be redacted. Now log records of any logger are redacted where
they are made, and the process's sys.stdout and sys.stderr go through a redacting wrapper once a secret is known
(interpreter/core/redacted_output.py). The run is a real subprocess; its whole stdout and stderr are searched.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from private_services import stop_process
from worker_helpers import REDIS, redis_or_skip

ROOT = Path(__file__).resolve().parents[2]
SECRET = "tok-3f9a1c77e2b84d05-LEAKME"

ACTIONS = '''
import base64
import logging
import sys
import traceback

from sealflow import action


@action("leaky.use", effect="read", secrets=["demo_token"])
def use(ctx) -> dict:
    token = ctx.secrets["demo_token"]
    mine = logging.getLogger("leaky.vendor")           # a logger of the action's own, not sealflow's
    mine.warning("calling the API with token %s", token)
    mine.error("as an f-string: %s", f"Bearer {token}")
    try:
        raise RuntimeError(f"the API refused {token}")
    except RuntimeError:
        mine.exception("and with a traceback")
        traceback.print_exc()                          # straight to sys.stderr
    print("printed:", token)
    print("to stderr:", token, file=sys.stderr)
    print("split: " + token[:7], end="", flush=True)   # a secret in two writes
    print(token[7:] + " end")
    print("base64:", base64.b64encode(token.encode()).decode())
    print("repr:", repr({"token": token}))
    sys.stdout.write("no newline at the end: " + token)
    return {"ok": True}
'''

DEFINITION = """\
sealflow: 1
name: leaky
version: 1
owner: team:test
steps:
  - id: use
    action: leaky.use
{isolation}"""


@pytest.fixture
def env(tmp_path):
    (tmp_path / "leaky_actions.py").write_text(ACTIONS)
    e = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_")}
    e.update({"PYTHONPATH": str(ROOT), "SEALFLOW_STORE": f"sqlite:///{tmp_path / 'state.db'}",
              "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db"), "SEALFLOW_SECRET_DEMO_TOKEN": SECRET,
              "PYTHONUNBUFFERED": "0"})
    return e


def forms_of(secret: str) -> list[str]:
    raw = secret.encode()
    return [secret, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("="),
            secret[:12], secret[-12:]]


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_given_an_action_that_logs_and_prints_its_secret_when_sealflow_run_runs_it_then_no_output_holds_it(
        tmp_path, env, isolation):
    # Given an action that writes its secret through its own logger, print() to stdout and stderr, a traceback,
    # a secret split over two writes, base64 and repr forms
    (tmp_path / "leaky.v1.yaml").write_text(DEFINITION.format(isolation=f"    isolation: {isolation}\n"))
    # When `sealflow run` runs it in a process of its own
    done = subprocess.run([sys.executable, "-m", "sealflow", "run", "leaky.v1.yaml", "--actions", "leaky_actions.py",
                           "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # Then the run completed, and neither stdout nor stderr holds the secret in any form, or a part of it
    assert done.returncode == 0, done.stderr
    both = done.stdout + done.stderr
    for form in forms_of(SECRET):
        assert form not in both, f"{form!r} leaked:\n{both}"
    # and each write is there, with the secret replaced by its name
    assert "calling the API with token [redacted:demo_token]" in done.stderr
    assert "as an f-string: Bearer [redacted:demo_token]" in done.stderr
    assert "RuntimeError: the API refused [redacted:demo_token]" in done.stderr
    assert "to stderr: [redacted:demo_token]" in done.stderr
    assert "printed: [redacted:demo_token]" in done.stdout
    assert "split: [redacted:demo_token] end" in done.stdout
    assert "base64: [redacted:demo_token]" in done.stdout and "repr: {'token': '[redacted:demo_token]'}" in done.stdout
    assert "no newline at the end: [redacted:demo_token]" in done.stdout
    assert json.loads(done.stdout[done.stdout.index('{\n  "run_id"'):])["state"] == "completed"


def test_given_a_worker_running_that_action_then_neither_its_stdout_nor_its_stderr_holds_the_secret(tmp_path, env):
    # Given a `sealflow worker` on Redis with the action's module and the secret, and a run of it submitted
    redis_or_skip()
    (tmp_path / "leaky.v1.yaml").write_text(DEFINITION.format(isolation=""))
    queue = "q_" + uuid.uuid4().hex
    with open(tmp_path / "worker.out", "w") as out, open(tmp_path / "worker.err", "w") as err:
        worker = subprocess.Popen([sys.executable, "-m", "sealflow", "worker", "--broker", REDIS, "--queue", queue,
                                   "--actions", "leaky_actions.py", "--allow-open", "--allow-unsigned"],
                                  cwd=tmp_path, env=env, stdout=out, stderr=err)
    try:
        done = subprocess.run([sys.executable, "-m", "sealflow", "submit", "leaky.v1.yaml", "--actions",
                               "leaky_actions.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip()
        # When the worker runs it
        state, deadline = None, time.monotonic() + 60
        while state != "completed" and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.2)
            shown = subprocess.run([sys.executable, "-m", "sealflow", "status", run_id, "--json"], cwd=tmp_path,
                                   env=env, capture_output=True, text=True, timeout=60)
            state = json.loads(shown.stdout)["state"] if shown.stdout.strip() else None
        assert state == "completed", (tmp_path / "worker.err").read_text()
    finally:
        stop_process(worker)
    # Then what the worker wrote holds the redacted lines and never the secret
    out, err = (tmp_path / "worker.out").read_text(), (tmp_path / "worker.err").read_text()
    for form in forms_of(SECRET):
        assert form not in out + err, f"{form!r} leaked:\n{out}\n{err}"
    assert "printed: [redacted:demo_token]" in out and "split: [redacted:demo_token] end" in out
    assert "calling the API with token [redacted:demo_token]" in err and "to stderr: [redacted:demo_token]" in err
