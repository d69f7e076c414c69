"""Recovery: the store is the truth; a crash at any instant loses nothing and repeats nothing done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from interp_helpers import S, make_plan

from sealflow.core.clock import FakeClock
from sealflow.core.outcomes import Succeeded
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[3]


def effect_registry(effects: Path, mark: Path | None = None) -> Registry:
    reg = Registry()

    @action("t.effect", registry=reg)
    def effect(ctx, name):
        with open(effects, "a") as f:
            f.write(f"{name}\n")
        return name

    return reg


def three_steps():
    return make_plan(S("one", "action", action="t.effect", args={"name": "one"}, idempotency_key="${{ run.id }}:one"),
                     S("two", "action", action="t.effect", args={"name": "two"}, timeout_ms=60_000),
                     S("three", "action", action="t.effect", args={"name": "three"}),
                     output="${{ [steps.one.output, steps.two.output, steps.three.output] }}")


CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from sealflow.dsl.plan import Plan
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store

    reg = Registry()

    @action("t.effect", registry=reg)
    def effect(ctx, name):
        with open({effects!r}, "a") as f:
            f.write(name + "\\n")
        if name == "two":
            open({mark!r}, "w").close()
            time.sleep(120)  # SIGKILLed here: after the effect, before the commit
        return name

    rt = Runtime(open_store({url!r}), reg, {{}})
    run_id = rt.submit(Plan.from_json(open({plan!r}).read()), {{}}, initiator="user:child")
    print(run_id, flush=True)
    rt.drive(run_id)
""")


def test_sigkill_mid_step_loses_nothing_and_repeats_no_completed_step(tmp_path):
    # Given a process running a three-step workflow, killed with SIGKILL inside step two
    url = f"sqlite:///{tmp_path}/state.db"
    effects, mark, plan_file = tmp_path / "effects.txt", tmp_path / "mark", tmp_path / "plan.json"
    plan = three_steps()
    plan_file.write_text(plan.to_json())
    script = CHILD.format(root=str(ROOT), effects=str(effects), mark=str(mark), url=url, plan=str(plan_file))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        deadline = time.monotonic() + 30
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mark.exists(), "the child never reached step two"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert effects.read_text().split() == ["one", "two"]
    # When a new process opens the same store and recovers
    with Runtime(open_store(url), effect_registry(effects), {}) as rt:
        report = rt.recover()
        status = rt.drive(run_id)
        # Then the dead worker's lease was ended at once (no retry class: a loss is not a failed try), step two
        # ran again and completed the run, step one never ran again
        assert report["leases_of_dead_workers"] == 1
        assert status.state == "completed" and status.output == ["one", "two", "three"]
        assert effects.read_text().split() == ["one", "two", "two", "three"]
        events = [e.event for e in rt.audit(run_id)]
        assert "lease_expired" in events
        rt.store.close()


def test_messages_lost_with_the_broker_are_sent_again_by_a_fresh_runtime(tmp_path):
    # Given a runtime that dispatched a run's first message, then died with its in-memory broker
    url = f"sqlite:///{tmp_path}/state.db"
    effects = tmp_path / "effects.txt"
    first = Runtime(open_store(url), effect_registry(effects), {})
    run_id = first.submit(three_steps(), {}, initiator="u")
    assert first.dispatcher.flush() == 1
    first.close()
    first.store.close()
    # When a fresh runtime starts on the same store
    with Runtime(open_store(url), effect_registry(effects), {}) as second:
        status = second.drive(run_id)
        # Then the lost message was sent again and the run completed
        assert status.state == "completed" and effects.read_text().split() == ["one", "two", "three"]
        second.store.close()


def test_a_zombies_late_commit_is_fenced_off(runtime, registry, clock):
    # Given a worker that claimed step one and then stalled past its lease
    calls = []

    @action("t.work", registry=registry)
    def work(ctx):
        calls.append(ctx.step_id)
        return "fresh"

    plan = make_plan(S("one", "action", action="t.work", timeout_ms=1000), output="${{ steps.one.output }}")
    run_id = runtime.submit(plan, {}, initiator="u")
    (msg,) = runtime.store.take_outbox(clock.now())
    zombie = runtime.store.claim(*msg, owner="zombie", now=clock.now())
    x = runtime.engine.execution(zombie.run, zombie.attempt, zombie.results, resumed=False)
    clock.advance(10)
    # When the sweeper hands the step to a live worker, which completes the run
    status = runtime.drive(run_id)
    assert status.state == "completed" and calls == ["one"]
    before = (runtime.store.get_run(run_id), runtime.store.attempts(run_id))
    # Then the zombie's late commit changes nothing, and is audited
    assert runtime.engine.commit(x, Succeeded("stale"), actor="zombie", counts_step=True) == ()
    assert (runtime.store.get_run(run_id), runtime.store.attempts(run_id)) == before
    assert runtime.store.get_run(run_id).output == "fresh"
    assert runtime.audit(run_id)[-1].event == "commit_fenced"


def test_a_run_left_without_an_active_attempt_is_repaired(tmp_path):
    # Given a run whose first step finished but whose next step was never scheduled (forced by hand)
    import sqlite3

    url = f"sqlite:///{tmp_path}/state.db"
    effects = tmp_path / "effects.txt"
    first = Runtime(open_store(url, clock=FakeClock()), effect_registry(effects), {})
    run_id = first.submit(three_steps(), {}, initiator="u")
    first.close()
    first.store.close()
    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    conn.execute("UPDATE attempts SET state = 'succeeded', output = '\"one\"'")
    conn.execute("INSERT INTO results VALUES (?, 'one', 'succeeded', '\"one\"')", (run_id,))
    conn.execute("DELETE FROM outbox")
    conn.close()
    with Runtime(open_store(url, clock=FakeClock()), effect_registry(effects), {}) as rt:
        assert rt.store.stalled_runs() == [run_id]
        # When the runtime recovers
        report = rt.recover()
        status = rt.drive(run_id)
        # Then the run goes on from where the store says it was
        assert report["runs_repaired"] == [run_id]
        assert status.state == "completed" and effects.read_text().split() == ["two", "three"]
        rt.store.close()
