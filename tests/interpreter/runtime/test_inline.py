"""``Runtime.run`` on the embedded default: the caller's thread runs its own run (service/inline.py)."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.execution.actions import action
from sealflow.runtime.config import RuntimeConfig, TenantLimits
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


@pytest.fixture
def sent(runtime):
    """Every message this runtime hands to its broker (through the dispatcher or a carrying commit)."""
    seen: list = []
    real = runtime.send

    def send(message, priority=None):
        seen.append(message)
        return real(message, priority)

    runtime.send = send
    runtime.dispatcher.send = send
    return seen


@pytest.fixture
def claimed_in_submit(runtime, monkeypatch):
    """The runs whose first attempt the submit's own transaction claimed."""
    runs: list = []
    real = runtime.store.submit_claimed

    def submit_claimed(*a, **kw):
        run, created, claimed = real(*a, **kw)
        if claimed is not None:
            runs.append(run.id)
        return run, created, claimed

    monkeypatch.setattr(runtime.store, "submit_claimed", submit_claimed)
    return runs


def test_a_run_goes_through_in_the_callers_thread_with_no_message(runtime, registry, sent, claimed_in_submit,
                                                                  monkeypatch):
    # Given three actions on the embedded default
    handled_by: list = []
    handle = runtime.engine.handle

    def spy(*a, **kw):
        handled_by.append(threading.get_ident())
        return handle(*a, **kw)

    monkeypatch.setattr(runtime.engine, "handle", spy)

    @action("t.ok", registry=registry)
    def ok(ctx):
        return ctx.step_id

    plan = make_plan(*[S(f"s{i}", "action", action="t.ok") for i in range(3)])
    # When the caller runs a run
    status = runtime.run(plan, {}, initiator="u")
    # Then it completed, its first attempt claimed by its submit, every step handled in the caller's thread,
    # and no message went through the broker
    assert status.state == "completed"
    assert claimed_in_submit == [status.run.id]
    assert handled_by == [threading.get_ident()] * 3
    assert sent == []
    first = runtime.store.attempts(status.run.id)[0]
    assert first.step_id == "s0" and first.state == "succeeded"


def test_the_first_step_is_audited_as_a_worker_would_audit_it(runtime, registry):
    # Given a one-step run on the embedded default
    @action("t.ok", registry=registry)
    def ok(ctx):
        return 1

    status = runtime.run(make_plan(S("one", "action", action="t.ok")), {}, initiator="u")
    # When its audit trail is read
    trail = [(e.event, e.actor, e.detail) for e in runtime.audit(status.run.id)]
    # Then it is the trail a dispatched run leaves: created and queued by its initiator, the step running
    # (scheduled by the system) then succeeded in this process, the run completed
    owner = runtime.owner
    assert [t[:2] for t in trail] == [("run.created", "u"), ("run.queued", "u"), ("step.running", owner),
                                      ("run.running", owner), ("step.succeeded", f"worker:{owner}"),
                                      ("run.completed", f"worker:{owner}")]
    assert trail[2][2] == {"scheduled_by": "system"}


def test_a_step_this_process_cannot_run_is_dispatched_as_before(runtime, registry, sent, claimed_in_submit):
    # Given a plan whose first action no registry here serves
    plan = make_plan(S("one", "action", action="t.nowhere"))
    # When the caller runs it
    status = runtime.run(plan, {}, initiator="u")
    # Then its first attempt was not claimed in the submit: it was scheduled and sent as usual
    assert claimed_in_submit == []
    assert [m.step_id for m in sent][:1] == ["one"]
    assert status.state not in ("completed",)


def test_a_tenant_bulkhead_means_no_inline_claim(tmp_path, registry):
    # Given a runtime whose tenants have a bulkhead (a claim may have to wait in line for it)
    @action("t.ok", registry=registry)
    def ok(ctx):
        return 1

    config = RuntimeConfig(tenant_limits={"*": TenantLimits(max_running_steps=2)})
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/b.db"), registry, {}, rng=random.Random(7),
                 worker_timeout_ms=20, config=config)
    try:
        calls: list = []
        real = rt.store.submit_claimed
        rt.store.submit_claimed = lambda *a, **kw: calls.append(1) or real(*a, **kw)
        # When a run is run
        status = rt.run(make_plan(S("one", "action", action="t.ok")), {}, initiator="u")
        # Then it completed through the bulkhead's claims, none made in its submit
        assert status.state == "completed" and calls == []
    finally:
        rt.close()
        rt.store.close()


def test_ctrl_c_while_the_caller_waits_is_not_the_steps_failure(runtime, registry, clock):
    # Given an action during whose first attempt the caller's thread is interrupted (Ctrl-C), retried when
    # its worker is lost
    main = threading.get_ident()
    tries: list = []

    @action("t.slow", registry=registry)
    def slow(ctx):
        tries.append(ctx.attempt)
        if len(tries) == 1:
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.2)
        return "done"

    plan = make_plan(S("one", "action", action="t.slow", timeout_ms=5_000,
                             retry=retry("worker_lost", initial_ms=10)))
    # When the caller runs it
    with pytest.raises(KeyboardInterrupt):
        runtime.run(plan, {}, initiator="u")
    # Then the interrupt went up, and the attempt was not recorded as failed: it is still claimed
    (run,) = runtime.store.list_runs()
    (attempt,) = runtime.store.attempts(run.id)
    assert attempt.state == "running"
    assert not [e for e in runtime.audit(run.id) if e.event == "step_failed"]
    # And when its lease ends, the step is retried (as after a crash) and the run completes
    clock.advance(60)
    status = runtime.drive(run.id)
    if status.state == "running":  # the retry's backoff
        clock.advance(1)
        status = runtime.drive(run.id)
    assert status.state == "completed" and len(tries) == 2
