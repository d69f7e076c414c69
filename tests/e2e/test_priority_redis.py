"""Priority on a real Redis broker: a `sealflow worker` busy with a low run takes a critical run submitted
after four low ones first. Needs Redis at 127.0.0.1:6379 (skipped without it). The same check on RabbitMQ
(:func:`critical_runs_first`) is in test_worker_rabbitmq.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from worker_helpers import REDIS, redis_or_skip

ROOT = Path(__file__).resolve().parents[2]

ACTIONS = '''
import os, time
from pathlib import Path
from sealflow import action

@action("prio.mark", permissions=[], effect="read")
def mark(ctx, label: str) -> dict:
    with open(os.environ["PRIO_LOG"], "a") as fh:
        fh.write(label + "\\n")
    if label == "block":
        release = Path(os.environ["PRIO_RELEASE"])
        for _ in range(600):
            if release.exists():
                break
            time.sleep(0.05)
    return {"label": label}
'''

FLOW = """\
sealflow: 1
name: prio-{priority}
version: 1
owner: team:test
priority: {priority}
steps:
  - id: mark
    action: prio.mark
    with: {{label: "${{{{ input.label }}}}"}}
"""


def test_given_a_busy_redis_worker_when_a_critical_run_follows_low_ones_then_it_runs_first(tmp_path):
    client = redis_or_skip()
    queue = "q_" + uuid.uuid4().hex
    try:
        critical_runs_first(tmp_path, REDIS, queue, lambda name: client.llen(f"dramatiq:{name}"))
    finally:
        keys = list(client.scan_iter(match=f"*{queue}*", count=1000))
        if keys:
            client.delete(*keys)


def critical_runs_first(tmp_path, broker: str, queue: str, depth) -> None:
    """Given one single-threaded worker on ``broker`` busy with a low run, when four low runs and then a
    critical one are submitted from other processes, then the critical run runs next (``depth(queue)``: the
    messages waiting on a broker queue).

    The worker is held in the low run's step (the action waits for a file the test writes) until its own log
    says that its buffer holds the critical run's message and a low run's (its work queue's DEBUG line
    ``run R: step S attempt N: fetched``, written before a thread can take the message): only then is it
    released, so the order its one thread takes them in is the priority order, whatever the machine's load
    (no sleep decides it)."""
    (tmp_path / "prio_actions.py").write_text(ACTIONS)
    for p in ("low", "critical"):
        (tmp_path / f"{p}.yaml").write_text(FLOW.format(priority=p))
    (tmp_path / "config.yaml").write_text("priority: {starvation_after: 300s}\n")
    log, release, worker_log = tmp_path / "order.log", tmp_path / "release", tmp_path / "worker.err"
    store = f"sqlite:///{tmp_path / 'state.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER", "SEALFLOW_STORE")}
    env.update({"PYTHONPATH": str(ROOT), "PRIO_LOG": str(log), "PRIO_RELEASE": str(release)})
    actions = str(tmp_path / "prio_actions.py")

    def submit(priority: str, label: str) -> str:
        done = subprocess.run([sys.executable, "-m", "sealflow", "submit", str(tmp_path / f"{priority}.yaml"),
                               "--store", store, "--actions", actions, "--input", f'{{"label": "{label}"}}'],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def order() -> list[str]:
        return log.read_text().split() if log.exists() else []

    def fetched(run_id: str) -> bool:
        return f"run {run_id}: step mark attempt 1: fetched from " in worker_log.read_text()

    def wait_until(what: str, ready) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert worker.poll() is None, f"the worker exited: {worker_log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{what} after 60 s: {order()}, {worker_log.read_text()[-3000:]}"
            time.sleep(0.05)

    # Given one single-threaded worker on the broker, busy with a low run that waits to be released
    worker_env = {**env, "SEALFLOW_CONFIG": str(tmp_path / "config.yaml")}
    with open(worker_log, "w") as err:
        worker = subprocess.Popen([sys.executable, "-m", "sealflow", "worker", "--broker", broker, "--store", store,
                                   "--actions", actions, "--queue", queue, "--threads", "1", "--allow-open",
                                   "--allow-unsigned", "--log-level", "debug"], cwd=ROOT, env=worker_env,
                                  stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        submit("low", "block")
        wait_until("the low run's step has not started", lambda: order() == ["block"])
        # When four low runs and then a critical one are submitted from other processes, and the worker's buffer
        # holds the critical run's message and the first low run's (its thread still in the blocked step)
        lows = [submit("low", f"low{i}") for i in range(4)]
        critical = submit("critical", "critical")
        wait_until("the worker has not fetched the critical run and the first low run",
                   lambda: fetched(critical) and fetched(lows[0]))
        assert order() == ["block"]
        release.write_text("go")
        wait_until("the runs have not all run", lambda: len(order()) >= 6)
        # Then the critical run ran next, before every low run queued before it (which the worker held too)
        assert order() == ["block", "critical", "low0", "low1", "low2", "low3"]
        assert depth(f"{queue}.critical") == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
