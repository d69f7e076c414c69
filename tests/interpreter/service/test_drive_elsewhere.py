"""`run` waits for its own run: driving a run whose step another process executes returns only when the
run settles, not with the run still `running` mid-way."""

from __future__ import annotations

import threading

from interp_helpers import S, make_plan

from sealflow.interpreter.core.clock import SYSTEM
from sealflow.interpreter.execution.actions import action
from sealflow.interpreter.service.runtime import Runtime
from sealflow.interpreter.store import open_store


def test_given_another_process_runs_the_step_when_driving_then_drive_returns_once_the_run_ends(
        tmp_path, registry, providers):
    started, release = threading.Event(), threading.Event()

    @action("t.slow", registry=registry)
    def slow(ctx):
        started.set()
        release.wait(10)
        return {"slow": True}

    @action("t.quick", registry=registry)
    def quick(ctx):
        return {"quick": True}

    plan = make_plan(S("slow", "action", action="t.slow", args={}, timeout_ms=30_000),
                     S("quick", "action", action="t.quick", args={}))
    url = f"sqlite:///{tmp_path}/shared.db"
    mine = Runtime(open_store(url), registry, providers, clock=SYSTEM, worker_timeout_ms=20)
    other = Runtime(open_store(url), registry, providers, clock=SYSTEM, worker_timeout_ms=20)
    other.owner = other.engine.owner = "otherhost:4242:1"  # another process (its own lease owner)
    try:
        # Given a run whose first step another process has taken and is executing
        run_id = mine.submit(plan, {}, initiator="user:ana")
        theirs = threading.Thread(target=other.drive, args=(run_id,))
        theirs.start()
        assert started.wait(10)
        # When this process drives it too
        result = {}
        driver = threading.Thread(target=lambda: result.update(status=mine.drive(run_id)))
        driver.start()
        driver.join(1.0)
        # Then it keeps waiting while the step runs elsewhere...
        assert driver.is_alive(), f"drive returned with the run {result['status'].state}"
        release.set()
        driver.join(20)
        theirs.join(20)
        # ...and returns with the run completed, whichever process ran the steps
        assert not driver.is_alive() and result["status"].state == "completed"
    finally:
        release.set()
        for rt in (mine, other):
            rt.close()
            rt.store.close()
