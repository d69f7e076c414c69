"""`sealflow run` on PostgreSQL rides out the server going away mid-run: it waits for the store to answer again
and for its run to end, instead of exiting 1 with the run half-way (found by using it: a 4 s restart of the
server during a step ended `run` with "get_run failed ... terminating connection"), and when the store came
back only after the step's commit had failed, it returned with the run still `running` (exit 3).

Uses a private PostgreSQL cluster (tests/private_services.py) and a slow action module of the test's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from private_services import PrivatePostgres

ROOT = Path(__file__).resolve().parents[2]

ACTIONS = '''
import os, time, uuid
from sealflow.execution.actions import action

@action("slow.sleep")
def sleep(ctx, s: float = 1.5):
    open(os.path.join(os.environ["SLOW_MARKS"], uuid.uuid4().hex), "w").close()  # one file per attempt started
    time.sleep(s)
    return {"slept": s}
'''

FLOW = """\
sealflow: 1
name: slow
version: 1
owner: team:test
permissions: []
defaults: {timeout: 12s, retry: lost}  # a lease of 17 s: it outlasts the 12 s outage, so `run` waits for it
retry:
  lost: {on: [unavailable], max_attempts: 3, backoff: {initial: 100ms, factor: 2, max: 1s}}
steps:
  - {id: a, action: slow.sleep}
  - {id: b, action: slow.sleep}
  - {id: c, action: slow.sleep}
  - {id: d, action: slow.sleep}
"""


@pytest.mark.parametrize("down_s, says", [
    (3.0, None),  # shorter than the pool's wait for a connection: nothing is lost
    (12.0, "could not take its commit"),  # the running step's commit fails: tried again while its lease lasts
])
def test_given_postgres_restarts_mid_run_when_run_waits_then_the_run_completes_and_run_says_so(tmp_path, down_s,
                                                                                               says):
    (tmp_path / "slowacts.py").write_text(ACTIONS)
    (tmp_path / "flow.yaml").write_text(FLOW)
    pg = PrivatePostgres()
    try:
        # Given `sealflow run` driving a 4-step run of slow steps on PostgreSQL
        marks = tmp_path / "marks"
        marks.mkdir()
        env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "SLOW_MARKS": str(marks)}
        env.pop("SEALFLOW_ACCESS", None)
        proc = subprocess.Popen([sys.executable, "-m", "sealflow", "run", "flow.yaml", "--store", pg.url + "?migrate=1",
                                 "--actions", "slowacts"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            while len(list(marks.iterdir())) < 2:  # the second step has started
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
                time.sleep(0.05)
            # When the server stops in the middle of that step and comes back later
            pg.stop("fast")
            time.sleep(down_s)
            pg.start()
            out, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        # Then `run` waited for its run to end, and it completed
        assert proc.returncode == 0, out
        assert "state: completed" in out and "internal error" not in out and "Traceback" not in out, out
        if says:  # (a step whose commit failed is committed again once the store is back, within its lease)
            assert says in out, out
    finally:
        pg.close()

