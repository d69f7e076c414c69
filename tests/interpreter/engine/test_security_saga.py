"""Compensation (saga): a run that fails for good undoes its completed steps, newest first, idempotently;
a compensation that fails for good quarantines the run for an operator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.clock import FakeClock
from sealflow.dsl.plan import CompensationPlan, ErrorRoutePlan, RetryPolicy
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[3]


def undo(step_id: str, action_name: str = "t.undo", policy: RetryPolicy | None = None) -> CompensationPlan:
    return CompensationPlan(action=action_name, args={"what": "${{ steps." + step_id + ".output.made }}"},
                            timeout_ms=5_000, retry=policy or RetryPolicy())


@pytest.fixture
def world(registry):
    w = {"done": [], "undone": [], "keys": [], "undo_failures": 0}

    @action("t.make", registry=registry)
    def make(ctx, name):
        w["done"].append(name)
        return {"made": name}

    @action("t.fail", registry=registry)
    def fail(ctx):
        raise ConnectionError("payment gateway unreachable")

    @action("t.undo", registry=registry)
    def undo_(ctx, what):
        w["undone"].append(what)
        w["keys"].append(ctx.idempotency_key)
        return {"undone": what}

    @action("t.undo_flaky", registry=registry)
    def undo_flaky(ctx, what):
        if w["undo_failures"] < 2:
            w["undo_failures"] += 1
            raise ConnectionError("warehouse API down")
        w["undone"].append(what)
        return {"undone": what}

    @action("t.undo_broken", registry=registry)
    def undo_broken(ctx, what):
        w["undo_failures"] += 1
        raise ConnectionError(f"cannot release {what}")

    return w


def test_a_run_that_fails_for_good_undoes_its_completed_steps_newest_first(runtime, world):
    # Given three steps, two with a compensation, then a step that fails after its retries
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("log", "action", action="t.make", args={"name": "log"}),
                     S("charge", "action", action="t.make", args={"name": "charge"}, compensate=undo("charge")),
                     S("pay", "action", action="t.fail", retry=retry("network", max_attempts=2, initial_ms=10)))
    # When it runs
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the compensations ran newest first, with the step's own output and a key per step
    assert world["undone"] == ["charge", "reserve"]
    assert world["keys"] == [f"{status.run.id}:charge:compensate", f"{status.run.id}:reserve:compensate"]
    # and the run ends failed with its original reason, in the dead-letter list
    assert status.state == "failed" and status.error[0] == "network"
    letter = runtime.dlq_list()[0]
    assert letter.step_id == "pay" and letter.status == "dead" and "payment gateway" in letter.reason
    # each compensation is an attempt in status, and audited
    assert status.step_states()["charge@compensate"] == "succeeded"
    assert [e.tool for e in runtime.audit(status.run.id) if e.event == "compensation.succeeded"] == ["t.undo"] * 2
    # its result is in the idempotency ledger
    assert runtime.store.ledger_get("default", f"{status.run.id}:charge:compensate").result == {"undone": "charge"}
    # and it cannot be redriven: its failed step would build on effects that were undone
    from sealflow.store import InvalidOperation

    with pytest.raises(InvalidOperation, match="compensated"):
        runtime.dlq_redrive(status.run.id)


def test_a_step_visited_twice_is_compensated_once(runtime, world):
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("count", "set", assign={"n": "default(steps['count'], {'output': {'n': 0}}).output.n + 1"}),
                     S("again", "switch", switch=({"when": "steps.count.output.n < 2", "next": "reserve"},)),
                     S("boom", "fail", fail={"error": "policy_denied", "message": "stop"}), budget={"max_steps": 20})
    status = runtime.run(plan, {}, initiator="user:ana")
    assert world["done"] == ["reserve", "reserve"] and world["undone"] == ["reserve"]
    assert status.state == "failed" and status.error == ("policy_denied", "stop")


def test_a_failure_routed_by_on_error_is_not_compensated(runtime, world):
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("pay", "action", action="t.fail", on_error=(ErrorRoutePlan(errors=("network",), next="ok"),)),
                     S("ok", "succeed"))
    assert runtime.run(plan, {}, initiator="user:ana").state == "completed" and world["undone"] == []


def test_a_compensation_is_retried_by_its_class(runtime, world):
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"},
                       compensate=undo("reserve", "t.undo_flaky", retry("network", max_attempts=3, initial_ms=10))),
                     S("pay", "action", action="t.fail"))
    status = runtime.run(plan, {}, initiator="user:ana")
    assert status.state == "failed" and world["undone"] == ["reserve"]
    assert [a.state for a in status.attempts if a.step_id == "reserve@compensate"] == ["failed", "failed",
                                                                                          "succeeded"]


def test_a_compensation_that_fails_for_good_quarantines_the_run_with_the_reason(runtime, world):
    # Given a compensation that keeps failing after its retries
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("charge", "action", action="t.make", args={"name": "charge"},
                       compensate=undo("charge", "t.undo_broken", retry("network", max_attempts=2, initial_ms=10))),
                     S("pay", "action", action="t.fail"))
    # When the run fails
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the run is quarantined, the reason names the compensation, its error and what is left undone
    assert status.state == "quarantined" and world["undo_failures"] == 2 and world["undone"] == []
    assert "compensation of step 'charge'" in status.error[1] and "cannot release charge" in status.error[1]
    assert "payment gateway unreachable" in status.error[1]
    letter = runtime.store.dead_letter(status.run.id)
    assert letter.quarantined and letter.status == "quarantined" and letter.step_id == "charge@compensate"
    failed = next(e for e in runtime.audit(status.run.id) if e.event == "compensation.failed")
    assert failed.detail["left"] == ["reserve"]
    # and it cannot be redriven blindly
    from sealflow.store import InvalidOperation

    with pytest.raises(InvalidOperation, match="quarantined"):
        runtime.dlq_redrive(status.run.id)


def test_a_compensate_action_this_process_lacks_is_left_for_one_that_has_it(runtime, world, registry):
    # Given a step to undo whose compensate action this process has not loaded, and a later step that fails
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"},
                       compensate=undo("reserve", "t.nowhere")), S("pay", "action", action="t.fail"))
    # When the run fails and compensates here
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the undo step is left as it was (engine/capability.py), naming the action, not quarantined
    assert status.state == "compensating" and status.waiting["lacks"] == [["action", "t.nowhere"]]
    assert status.waiting["step"] == "reserve@compensate" and runtime.store.dead_letters() == []
    # And once the action is there, the compensation runs and the run ends
    undone = []
    action("t.nowhere", registry=registry)(lambda ctx, **kw: undone.append(kw) or {"undone": True})
    runtime.clock.advance(runtime.redeliver_after + 1)
    assert runtime.drive(status.run.id).state not in ("compensating", "quarantined") and len(undone) == 1


# -- durable across a crash -------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from sealflow.dsl.plan import Plan
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store

    reg = Registry()

    @action("t.make", registry=reg)
    def make(ctx, name):
        return {{"made": name}}

    @action("t.fail", registry=reg)
    def fail(ctx):
        raise ConnectionError("down")

    @action("t.undo", registry=reg)
    def undo(ctx, what):
        with open({effects!r}, "a") as f:
            f.write(what + " " + ctx.idempotency_key + "\\n")
        if what == "charge":
            open({mark!r}, "w").close()
            time.sleep(120)  # SIGKILLed here, mid-compensation
        return {{"undone": what}}

    rt = Runtime(open_store({url!r}), reg, {{}})
    run_id = rt.submit(Plan.from_json(open({plan!r}).read()), {{}}, initiator="user:child")
    print(run_id, flush=True)
    rt.drive(run_id)
""")


def test_sigkill_mid_compensation_resumes_it_on_recovery(tmp_path):
    # Given a process compensating a failed run, killed with SIGKILL inside the first compensation
    url = f"sqlite:///{tmp_path}/state.db"
    effects, mark, plan_file = tmp_path / "effects.txt", tmp_path / "mark", tmp_path / "plan.json"
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("charge", "action", action="t.make", args={"name": "charge"},
                       compensate=undo("charge", policy=RetryPolicy(max_attempts=2, initial_ms=0))),
                     S("pay", "action", action="t.fail"))
    plan_file.write_text(plan.to_json())
    script = CHILD.format(root=str(ROOT), effects=str(effects), mark=str(mark), url=url, plan=str(plan_file))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        deadline = time.monotonic() + 30
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mark.exists()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
    # When a new runtime recovers the store
    reg = Registry()

    @action("t.undo", registry=reg)
    def undo_again(ctx, what):
        with open(effects, "a") as f:
            f.write(f"{what} {ctx.idempotency_key}\n")
        return {"undone": what}

    rt = Runtime(open_store(url, clock=FakeClock(time.time() + 3600)), reg, {})
    try:
        status = rt.drive(run_id)
        # Then the interrupted compensation ran again (a loss, not a failed try) under the same idempotency
        # key, then the next one, and the run ended failed
        lines = effects.read_text().splitlines()
        assert lines == [f"charge {run_id}:charge:compensate", f"charge {run_id}:charge:compensate",
                         f"reserve {run_id}:reserve:compensate"]
        assert status.state == "failed"
        comps = [(a.step_id, a.state, a.leases_lost) for a in status.attempts if a.step_id.endswith("@compensate")]
        assert sorted(comps, key=str) == sorted([("charge@compensate", "succeeded", 1),
                                                 ("reserve@compensate", "succeeded", 0)], key=str)
        assert "lease_expired" in [e.event for e in rt.audit(run_id)]
    finally:
        rt.close()


def test_a_run_found_past_its_deadline_by_a_worker_is_compensated_and_ends_timed_out(runtime, world, registry,
                                                                                     clock):
    # Given a completed step with a compensation, and a step during which the run's deadline passes
    @action("t.long", registry=registry)
    def long_(ctx):
        clock.advance(120)  # two minutes pass on the run's clock
        return {}

    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("long", "action", action="t.long"),
                     S("after", "action", action="t.make", args={"name": "after"}),
                     budget={"max_runtime_ms": 60_000})
    # When a worker claims the next step after the deadline
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then that step does not start, the completed step is undone, and the run ends timed_out
    assert "after" not in world["done"] and world["undone"] == ["reserve"]
    assert status.state == "timed_out" and status.error[0] == "timeout", status.error
    assert status.step_states()["reserve@compensate"] == "succeeded"
    assert runtime.store.dead_letter(status.run.id) is not None


def test_a_run_past_its_deadline_while_it_waits_is_compensated_and_ends_timed_out(runtime, world, clock):
    from interp_helpers import approval

    # Given a completed step with a compensation, then an approval nobody answers, and a one-minute deadline
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("gate", "approval", approval=approval(timeout_ms=3_600_000)),
                     S("after", "action", action="t.make", args={"name": "after"}),
                     budget={"max_runtime_ms": 60_000})
    run_id = runtime.submit(plan, {}, initiator="user:ana")
    assert runtime.drive(run_id).state == "waiting"
    # When the deadline passes while it waits, and the sweeper runs
    clock.advance(120)
    status = runtime.drive(run_id, until="final")
    # Then the gate ends, the completed step is undone, and the run ends timed_out in the dead-letter list
    assert world["undone"] == ["reserve"] and "after" not in world["done"]
    assert status.state == "timed_out" and status.error[0] == "timeout", status.error
    assert status.step_states()["gate"] == "timed_out"
    assert runtime.store.dead_letter(run_id).step_id == "gate"


def test_a_compensation_past_its_timeout_is_timed_out_and_quarantines(registry, tmp_path):
    # Given a compensation with a 100 ms timeout whose action blocks for a second (real clock: a real deadline)
    @action("t.step", registry=registry)
    def step(ctx):
        return {"made": "x"}

    @action("t.boom", registry=registry)
    def boom(ctx):
        raise ConnectionError("down")

    @action("t.undo_slow", registry=registry)
    def undo_slow(ctx, what):
        time.sleep(1.0)
        return {"undone": what}

    slow = CompensationPlan(action="t.undo_slow", args={"what": "x"}, timeout_ms=100, retry=RetryPolicy())
    plan = make_plan(S("made", "action", action="t.step", compensate=slow), S("pay", "action", action="t.boom"))
    with Runtime(open_store(f"sqlite:///{tmp_path}/c.db"), registry, {}, worker_timeout_ms=20) as rt:
        started = time.monotonic()
        status = rt.drive(rt.submit(plan, {}, initiator="user:ana"), until="final", timeout=20)
        # Then the compensation was cut off at its own timeout, not the step's, and the run is quarantined
        comp = [a for a in status.attempts if a.step_id == "made@compensate"]
        assert comp and comp[-1].error_class == "timeout"
        assert status.state == "quarantined"
        assert time.monotonic() - started < 1.0 + 5
        rt.store.close()
