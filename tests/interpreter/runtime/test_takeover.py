"""A long-lived worker takes over a step another process left for want of what it needs
(:mod:`sealflow.runtime.takeover`), on every store: without it, the step waited for its message's
redelivery (a minute by default), which might bring it to the same incapable process again."""

from __future__ import annotations

import time

import pytest
from interp_helpers import S, make_plan

from sealflow.core.clock import SYSTEM
from sealflow.engine.capability import LEFT_EVENT
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.runtime.takeover import LeftSteps


@pytest.fixture
def clock():
    """These tests wait on real time: the store fixture is opened on the system's clock."""
    return SYSTEM


def _left_by_other(store, registry):
    """A run whose first step another process (without its action) took and left, and this process's runtime."""
    @action("t.only_here", registry=registry)
    def only_here(ctx):
        return {"ran": True}

    plan = make_plan(S("first", "action", action="t.only_here", args={}), S("second", "action",
                                                                                action="t.only_here", args={}))
    mine = Runtime(store, registry, {}, clock=SYSTEM, worker_timeout_ms=20)
    # (lacks t.only_here)
    other = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20, owner="otherhost:4242:1")
    run_id = mine.submit(plan, {}, initiator="user:ana")
    other.drive(run_id)  # it dispatches the message to itself, takes it and leaves the step
    return mine, other, run_id


def _wait_state(rt, run_id, state, timeout=15.0):
    deadline = time.monotonic() + timeout
    while rt.store.get_run(run_id).state != state and time.monotonic() < deadline:
        rt.start()  # (the in-process worker runs what the takeover sent on)
        time.sleep(0.05)
    return rt.store.get_run(run_id).state


def test_given_a_step_another_process_left_when_a_capable_worker_looks_then_it_runs_it_once(store, registry):
    mine, other, run_id = _left_by_other(store, registry)
    left = LeftSteps(mine)
    try:
        assert [e.actor for e in store.audit(run_id) if e.event == LEFT_EVENT] == ["worker:otherhost:4242:1"]
        assert [(a.step_id, a.state) for a in store.attempts(run_id)] == [("first", "scheduled")]
        # When this process, which has the action, looks for left steps
        assert left.check() == 1
        # Then it runs the step and the run goes on to completion, each step once
        assert _wait_state(mine, run_id, "completed") == "completed"
        assert [(a.step_id, a.state) for a in store.attempts(run_id)] == [("first", "succeeded"),
                                                                          ("second", "succeeded")]
        # And a second look takes nothing (the attempt is claimed: its outbox row is gone)
        assert left.check() == 0
    finally:
        left.close()
        for rt in (mine, other):
            rt.close()


def test_given_a_step_this_process_left_itself_or_lacks_too_when_it_looks_then_it_takes_nothing(store, registry):
    mine, other, run_id = _left_by_other(store, registry)
    # Given the process that left it looks (it lacks the action), and another that lacks it too
    theirs, third = LeftSteps(other), Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20)
    thirds = LeftSteps(third)
    try:
        # When they look for left steps / Then neither takes it, and the step still waits, unclaimed
        assert theirs.check() == 0 and thirds.check() == 0
        assert [(a.step_id, a.state) for a in store.attempts(run_id)] == [("first", "scheduled")]
        assert store.get_run(run_id).state == "queued"
    finally:
        for x in (theirs, thirds):
            x.close()
        for rt in (mine, other, third):
            rt.close()


def test_given_a_takeover_still_running_when_the_worker_closes_then_it_waits_only_the_grace(store, registry):
    import threading

    release = threading.Event()

    @action("t.slow_here", registry=registry)
    def slow_here(ctx):
        release.wait(30)
        return {"ran": True}

    plan = make_plan(S("first", "action", action="t.slow_here", args={}))
    mine = Runtime(store, registry, {}, clock=SYSTEM, worker_timeout_ms=20)
    other = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20, owner="otherhost:4242:1")
    run_id = mine.submit(plan, {}, initiator="user:ana")
    other.drive(run_id)  # left there
    left = LeftSteps(mine)
    try:
        # Given a step taken over and still running
        assert left.check() == 1
        deadline = time.monotonic() + 10
        while [a.state for a in store.attempts(run_id)] != ["running"] and time.monotonic() < deadline:
            time.sleep(0.02)
        # When the worker closes with a grace of 0.3 s
        started = time.monotonic()
        abandoned = left.close(timeout=0.3)
        # Then it waits about the grace, not the step, and names the step it abandons
        assert time.monotonic() - started < 5 and abandoned == [(run_id, "first", 1)]
    finally:
        release.set()
        for rt in (mine, other):
            rt.close()
