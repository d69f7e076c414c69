"""A replaced attempt knows it: a worker paused past its lease sees ``ctx.cancelled()`` when it wakes.

A real process runs a cooperative action (it polls ``ctx.cancelled()`` before its effect) and is
SIGSTOPped; another runtime on the same store (its clock an hour ahead, so the lease has expired)
takes the attempt over and completes the run; then the paused process is SIGCONTinued.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from interp_helpers import S, make_plan, retry

from sealflow.core.clock import FakeClock
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from sealflow.dsl.plan import Plan
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store

    reg = Registry()

    @action("t.apply", registry=reg)
    def apply(ctx):
        open({started!r}, "w").close()
        begun = time.time()
        while not ctx.cancelled() and time.time() - begun < 30:
            time.sleep(0.05)
        if ctx.cancelled():
            open({seen!r}, "w").write("cancelled")
            return "stopped"
        with open({effects!r}, "a") as f:
            f.write("old\\n")
        return "old"

    rt = Runtime(open_store({url!r}), reg, {{}})
    run_id = rt.submit(Plan.from_json(open({plan!r}).read()), {{}}, initiator="user:child")
    print(run_id, flush=True)
    rt.drive(run_id, timeout=60)
""")


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), f"{path.name} never appeared"


def test_a_worker_paused_past_its_lease_sees_cancelled_and_skips_its_effect(tmp_path):
    # Given a process running a cooperative action, paused (SIGSTOP) in the middle of it
    url = f"sqlite:///{tmp_path}/state.db"
    started, seen, effects, plan_file = (tmp_path / n for n in ("started", "seen", "effects", "plan.json"))
    plan = make_plan(S("one", "action", action="t.apply", timeout_ms=60_000, retry=retry(max_attempts=2, initial_ms=0)),
                     output="${{ steps.one.output }}")
    plan_file.write_text(plan.to_json())
    script = CHILD.format(root=str(ROOT), started=str(started), seen=str(seen), effects=str(effects), url=url,
                          plan=str(plan_file))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        wait_for(started)
        os.kill(child.pid, signal.SIGSTOP)
        # When another worker, past the lease, takes the attempt over and completes the run
        reg = Registry()

        @action("t.apply", registry=reg)
        def apply(ctx):
            with open(effects, "a") as f:
                f.write("new\n")
            return "new"

        rt = Runtime(open_store(url, clock=FakeClock(time.time() + 3600)), reg, {}, worker_timeout_ms=20)
        try:
            status = rt.drive(run_id, timeout=30)
            assert status.state == "completed" and status.output == "new"
            # And the paused worker resumes
            os.kill(child.pid, signal.SIGCONT)
            wait_for(seen)
            # Then its ctx.cancelled() was true, it skipped its effect, and the run kept the new result
            assert seen.read_text() == "cancelled"
            assert effects.read_text().split() == ["new"]
            child.wait(30)
            assert rt.store.get_run(run_id).output == "new"
            assert "commit_fenced" in [e.event for e in rt.audit(run_id)]
        finally:
            rt.close()
            rt.store.close()
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
