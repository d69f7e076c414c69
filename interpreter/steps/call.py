"""``call``: another workflow runs as this step's child run; the step's output is the child's output.

First claim of the step's attempt (:func:`start`): the call's ``input`` is rendered over this run and checked
against the called workflow's input schema and the payload bound (``invalid_request`` otherwise, before anything
starts). Then the attempt goes ``waiting`` and its commit creates the child run (a
:class:`~sealflow.store.changes.Spawn` of one child, index :data:`~sealflow.store.records.CALL_INDEX`): the
called plan (carried by this plan, pinned by its digest) under its own name and version, with its own input, the
caller's tenant, initiator and acting identity, and a deadline from its own ``budget.max_runtime``. No worker is
held while it runs; the store wakes this attempt when the child ends (:mod:`sealflow.store.sql.children`).

When woken (:func:`collect`): a completed child's output is the step's; a child that failed, timed out, was
cancelled or quarantined fails the step with the child's error class (routable with ``on_error``; a call is
never retried whole: the child retried its own steps). The commit that ends the attempt cancels the child if it
is still in flight (the parent was cancelled, timed out, or failed elsewhere); a cancelled child undoes its
completed steps with their compensations, as any cancelled run does.

What the child may do is bounded by its caller: its permissions are a subset of the caller's (compile time,
C429), its steps, tokens and cost are added to the caller's counters and checked against the caller's budget
too (:func:`sealflow.policy.budgets.callers`), and a trust-gated worker trusts it only as the digest its
caller's verified plan pins (:func:`sealflow.engine.fanout.trusted`).
"""

from __future__ import annotations

from sealflow.core import leases
from sealflow.core.jsonc import dumps, input_hash, over_payload_limit
from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.core.states import RUN_FINAL
from sealflow.dsl.errors import DslError
from sealflow.execution import schemacheck
from sealflow.execution.context import Execution
from sealflow.store.records import CALL_INDEX, CalledRun, ChildSpec, Spawn

#: a woken attempt that still finds its child in flight looks again after this many seconds
_RECHECK_S = 5.0


def execute(x: Execution) -> Outcome:
    """Start the child, or (it exists: the attempt's data says so) take its end. Claimed again after its worker
    died, the attempt is decided by what the store holds, never started twice."""
    return collect(x) if "call" in x.attempt.data else start(x)


def _what(x: Execution) -> str:
    call = x.step.call
    assert call is not None
    return f"call step {x.step.id!r} ({call.workflow} v{call.version})"


def start(x: Execution) -> Outcome:
    call = x.step.call
    assert call is not None
    plan = call.plan
    try:
        value = x.render(call.input)
    except (DslError, TypeError, ValueError) as exc:
        return Failed("invalid_request", f"{_what(x)}: its input could not be rendered: {exc}")
    bad = schemacheck.problem(x, plan.input_schema, value, "call.input")
    if bad is not None:
        return Failed("invalid_request", f"{_what(x)}: its input does not fit {call.workflow}'s input schema {bad}")
    try:
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        return Failed("invalid_request", f"{_what(x)}: its input is not JSON ({exc})")
    config = x.services.config
    if config is not None:
        over = over_payload_limit(text, config.payload_max_bytes)
        if over is not None:
            return Failed("invalid_request", f"{_what(x)}: its input is {over}")
    runtime = plan.budget.max_runtime_ms
    deadline = None if runtime is None else x.now + runtime / 1000.0
    first = leases.lease_ms(plan.step(plan.start).timeout_ms)
    child = ChildSpec(CALL_INDEX, plan.digest, plan.start, first,
                      call=CalledRun(call.workflow, call.version, text, input_hash(value), deadline))
    data = {"call": {"workflow": call.workflow, "version": call.version, "digest": call.digest}}
    return Waiting(None, None, data, spawn=Spawn((child,), 1, 0,
                                                 ((plan.digest, plan.name, plan.version, plan.to_json(indent=None)),)))


def collect(x: Execution) -> Outcome:
    att = x.attempt
    kids = x.services.store.children(x.run.id, att.step_id, att.attempt)
    if not kids:
        return Failed("internal", f"{_what(x)}: its child run is missing from the store")
    kid = kids[0]
    data = {**att.data, "call": {**dict(att.data.get("call") or {}), "run": kid.id}}
    if kid.state not in RUN_FINAL:  # woken early: look again shortly
        return Waiting(x.now + _RECHECK_S, "wait", data)
    if kid.state == "completed":
        return Succeeded(kid.output, data=data)
    return Failed(kid.error_class or "internal", f"{_what(x)}: run {kid.id} ended {kid.state} "
                                                 f"({kid.error_class}: {kid.error_message})", data=data,
                  detail={"child": kid.id, "state": kid.state})
