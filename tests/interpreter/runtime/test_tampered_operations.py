"""An operator's acts on a run whose stored plan is not what its digest says (issue 31), on every store backend.

Reading it shows the run and why it will not go on (``waiting.kind == "plan_tampered"``); approving,
rejecting, cancelling or redriving it is refused with :class:`PlanTampered` naming the act and the run, before
anything changes (each would take steps, gates or compensations from that plan). The run ends as the engine
ends it: refused into the dead-letter list when its next step is due (here: its gate times out)."""

from __future__ import annotations

import random

import pytest
from interp_helpers import S, approval, make_plan
from plan_rows import forget_plans, tamper

from sealflow.runtime import readiness
from sealflow.runtime.facade import Runtime
from sealflow.store.errors import PlanTampered

GATED = make_plan(S("ask", "approval", approval=approval(timeout_ms=3_600_000, approvers=("user:bob",))),
                  S("a", "set", assign={"x": "1"}), name="gated")


@pytest.fixture
def waiting(store, registry, clock):
    """``(runtime, run id)``: a run waiting at its approval gate, whose plans row was then rewritten."""
    rt = Runtime(store, registry, {}, clock=clock, rng=random.Random(7), worker_timeout_ms=20)
    run_id = rt.submit(GATED, {}, initiator="user:ana")
    assert rt.drive(run_id, timeout=20).state == "waiting"
    tamper(store, GATED.digest)
    forget_plans(rt)
    yield rt, run_id
    rt.close()


def test_given_a_waiting_run_whose_plan_was_tampered_when_its_status_is_read_then_it_says_why_it_will_not_go_on(
        waiting):
    rt, run_id = waiting
    # When its status is read (as `sealflow status` and GET /v1/runs/{id} read it)
    here = readiness.note_left(rt, rt.status(run_id))
    there = readiness.note_left(rt, rt.status(run_id), here=False)
    # Then the run is as stored, and what holds it is its plan, with the reason and what to do
    for status in (here, there):
        assert status.state == "waiting"
        assert status.waiting["kind"] == "plan_tampered" and status.waiting["step"] == "ask"
        assert status.waiting["plan"] == GATED.digest and "does not match its digest" in status.waiting["reason"]
        assert f"sealflow dlq redrive {run_id}" in status.waiting["how"]


@pytest.mark.parametrize("verb", ["approve", "reject", "cancel", "redrive"])
def test_given_a_waiting_run_whose_plan_was_tampered_when_an_operator_acts_then_refused_and_nothing_changes(
        waiting, verb):
    rt, run_id = waiting
    before = rt.store.get_run(run_id)
    acts = {"approve": lambda: rt.approve(run_id, actor="user:bob"),
            "reject": lambda: rt.reject(run_id, actor="user:bob", reason="no"),
            "cancel": lambda: rt.cancel(run_id, actor="user:ops", reason="stop"),
            "redrive": lambda: rt.dlq_redrive(run_id, actor="user:ops")}
    # When an operator does it
    with pytest.raises(PlanTampered) as refused:
        acts[verb]()
    # Then it is refused naming the act, the run and the plan, and the run is as it was
    assert str(refused.value).startswith(f"cannot {verb} run {run_id} (gated v1): the stored plan {GATED.digest}")
    assert str(refused.value).endswith("nothing was changed") and refused.value.digest == GATED.digest
    after = rt.store.get_run(run_id)
    assert (after.state, after.rev) == (before.state, before.rev)
    assert [a.state for a in rt.store.attempts(run_id)] == ["waiting"]


def test_given_a_waiting_run_whose_plan_was_tampered_when_its_gate_times_out_then_it_is_refused_into_the_dead_letters(
        waiting, clock):
    rt, run_id = waiting
    # When its gate's timeout passes and the run is driven
    clock.advance(3_601)
    status = rt.drive(run_id, timeout=20)
    # Then the engine refused it once: failed, dead-lettered with the reason, nothing of its plan run
    assert status.state == "failed" and status.error[0] == "unauthorized" and "[tampered]" in status.error[1]
    assert rt.store.dead_letter(run_id) is not None
    assert readiness.note_left(rt, rt.status(run_id)).waiting is None
