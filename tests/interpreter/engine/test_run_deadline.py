"""``budget.max_runtime`` passing while an action runs ends the run ``timed_out``: whichever of the worker (its
attempt is cut at the run's deadline) and the sweeper (its ``run_deadline`` timer) sees it first, with or without
a retry class, and a retry class never retries past it. On SQLite and PostgreSQL (the same code: the worker's
path is the engine's, the sweeper's the store's shared sweep).
"""

from __future__ import annotations

import random
import threading

import pytest
from interp_helpers import BACKENDS, S, make_plan, retry

from sealflow.core.clock import FakeClock
from sealflow.dsl.plan import CompensationPlan, RetryPolicy
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

RETRY_CLASSES = {"no retry class": RetryPolicy(),
                 "a retry class listing timeout and network": retry("timeout", "network", max_attempts=5, initial_ms=0)}


@pytest.fixture(params=BACKENDS)
def make_runtime(request, tmp_path, registry):
    made: list[Runtime] = []

    def make(clock) -> Runtime:
        if request.param == "postgres":
            url = request.getfixturevalue("pg_schema").url(clock="caller", migrate="1", pool_max="4")
        else:
            url = f"sqlite:///{tmp_path}/deadline.db"
        rt = Runtime(open_store(url, clock=clock), registry, {}, rng=random.Random(7), worker_timeout_ms=20)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close(grace=0.5)
        rt.store.close()


@pytest.fixture
def blocking(registry):
    """Action ``t.block``: counts its calls, says it started, and blocks until released (at most 10 s)."""
    state = {"calls": 0, "started": threading.Event(), "release": threading.Event()}

    @action("t.block", registry=registry)
    def block(ctx):
        state["calls"] += 1
        state["started"].set()
        state["release"].wait(10)
        return {"late": True}

    yield state
    state["release"].set()


def _events(rt: Runtime, run_id: str) -> list[str]:
    return [e.event for e in rt.store.audit(run_id)]


@pytest.mark.parametrize("policy", list(RETRY_CLASSES))
def test_given_an_action_running_when_the_worker_cuts_it_at_the_run_deadline_then_the_run_is_timed_out(
        make_runtime, blocking, policy):
    # Given a run whose max_runtime (0.4 s) ends long before its step's own timeout (60 s), and an action that
    # blocks past it (a fake clock that stands still: the worker's wait is real, so the attempt surely starts
    # before the deadline and is cut there, however slow the machine)
    rt = make_runtime(FakeClock())
    plan = make_plan(S("work", "action", action="t.block", timeout_ms=60_000, retry=RETRY_CLASSES[policy]),
                     budget={"max_runtime_ms": 400})
    # When the worker's wait for the attempt ends at the run's deadline
    status = rt.run(plan, {}, initiator="user:ana", until="final")
    # Then the run is timed_out, in the dead-letter list, and the action was never started again
    assert (status.state, status.error[0]) == ("timed_out", "timeout"), status.error
    assert "budget.max_runtime" in status.error[1]
    assert blocking["calls"] == 1 and [a.state for a in status.attempts] == ["timed_out"]
    assert "retry_scheduled" not in _events(rt, status.run.id)
    dead = rt.store.dead_letter(status.run.id)
    assert dead is not None and dead.error_class == "timeout"


@pytest.mark.parametrize("policy", list(RETRY_CLASSES))
def test_given_an_action_running_when_the_sweeper_sees_the_run_deadline_first_then_the_run_is_timed_out(
        make_runtime, blocking, policy):
    # Given a run with a one-minute max_runtime (a fake clock) whose action a worker thread is running
    clock = FakeClock()
    rt = make_runtime(clock)
    plan = make_plan(S("work", "action", action="t.block", timeout_ms=120_000, retry=RETRY_CLASSES[policy]),
                     budget={"max_runtime_ms": 60_000})
    rt.start()
    run_id = rt.submit(plan, {}, initiator="user:ana")
    rt.dispatcher.flush()
    assert blocking["started"].wait(10)
    # When the deadline passes and the sweeper runs before the worker's wait ends
    clock.advance(61)
    rt.sweeper.sweep()
    assert rt.store.get_run(run_id).state == "timed_out"
    # and then the action returns (its commit is fenced off)
    blocking["release"].set()
    status = rt.drive(run_id, until="final")
    # Then the run stays timed_out, dead-lettered, and no retry was scheduled or run
    assert (status.state, status.error[0]) == ("timed_out", "timeout")
    assert blocking["calls"] == 1 and [a.state for a in status.attempts] == ["timed_out"]
    assert "retry_scheduled" not in _events(rt, run_id)
    assert rt.store.dead_letter(run_id) is not None


def test_given_an_action_failing_after_the_run_deadline_then_the_run_is_timed_out_not_retried(make_runtime, registry):
    # Given an action that fails by itself (network, which the retry class lists) once the run's deadline has
    # passed, before the worker's wait for it ends (a fake clock: two minutes pass on the run's clock)
    clock = FakeClock()
    calls = []

    @action("t.late_failure", registry=registry)
    def late_failure(ctx):
        calls.append(1)
        clock.advance(120)
        raise ConnectionError("too late anyway")

    rt = make_runtime(clock)
    plan = make_plan(S("work", "action", action="t.late_failure", timeout_ms=300_000,
                       retry=RETRY_CLASSES["a retry class listing timeout and network"]),
                     budget={"max_runtime_ms": 60_000})
    # When it runs
    status = rt.run(plan, {}, initiator="user:ana", until="final")
    # Then the run is timed_out (dead-lettered) with the step's own error named, and it was not retried
    assert (status.state, status.error[0]) == ("timed_out", "timeout"), status.error
    assert "too late anyway" in status.error[1] and len(calls) == 1
    assert "retry_scheduled" not in _events(rt, status.run.id)
    assert rt.store.dead_letter(status.run.id) is not None


def test_given_a_completed_step_with_a_compensation_when_the_worker_cuts_the_next_at_the_deadline_then_it_is_not_compensated(  # noqa: E501
        make_runtime, blocking, registry):
    # Given a completed step with a compensation, then an action the run's deadline stops while it runs
    undone = []

    @action("t.make", registry=registry)
    def make(ctx):
        return {"made": True}

    @action("t.unmake", registry=registry)
    def unmake(ctx):
        undone.append(1)
        return {}

    rt = make_runtime(FakeClock())
    plan = make_plan(S("reserve", "action", action="t.make",
                       compensate=CompensationPlan(action="t.unmake", args={}, timeout_ms=5_000, retry=RetryPolicy())),
                     S("work", "action", action="t.block", timeout_ms=60_000), budget={"max_runtime_ms": 500})
    # When the worker cuts it at the deadline
    status = rt.run(plan, {}, initiator="user:ana", until="final")
    # Then the run is timed_out as when the sweeper finds it running: not compensated (the stopped attempt may
    # have half-happened, and in a thread it may still run), for an operator to look at in the dead-letter list
    assert status.state == "timed_out" and undone == []
    assert "reserve@compensate" not in status.step_states()
    assert rt.store.dead_letter(status.run.id) is not None
