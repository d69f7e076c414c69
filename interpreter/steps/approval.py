"""``approval`` steps and the gates opened by ``requires_approval_if``: a durable human decision.

Opening the gate renders what is approved (``show``, bound by its sha256), and
the attempt goes ``waiting`` with an ``approval_timeout`` timer. Approvals
arrive through :meth:`interpreter.runtime.Runtime.approve` and count towards
``quorum`` (one per actor); the run's initiator may not approve when
separation of duties is on (the default). A rejection fails the step with
``policy_denied`` (``on_error`` may route it). The timeout fails closed: with
``on_timeout: reject`` it is a rejection; with ``on_timeout: {next: id}`` the
step times out and control goes to that step. There is no auto-approve.
"""

from __future__ import annotations

import hashlib
import json

from dsl.durations import format_ms
from dsl.plan import ApprovalPlan

from ..context import Execution
from ..errors import StepError
from ..outcomes import Failed, Outcome, Succeeded, Waiting
from ..store.errors import InvalidOperation


def plan_of(x: Execution) -> ApprovalPlan:
    return x.step.gate if x.gate else x.step.approval


def opening(x: Execution, ap: ApprovalPlan, now: float) -> dict:
    """The attempt data of a freshly opened gate."""
    shown = x.evaluate(ap.show) if ap.show else None
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()
    return {"opened_at": now, "approvers": list(ap.approvers), "quorum": ap.quorum, "show": shown,
            "show_hash": "sha256:" + digest, "approvals": [], "gate_for": x.step.id if x.gate else None}


def execute(x: Execution) -> Outcome:
    ap = plan_of(x)
    if x.resumed:
        return timed_out(x, ap)
    return Waiting(x.now + ap.timeout_ms / 1000.0, "approval_timeout", opening(x, ap, x.now))


def timed_out(x: Execution, ap: ApprovalPlan) -> Failed:
    got = len(x.attempt.data.get("approvals", ()))
    after = format_ms(ap.timeout_ms)
    if ap.on_timeout == "reject":
        return Failed("policy_denied", f"approval timed out after {after} with {got} of {ap.quorum} approvals; "
                                       "the gate fails closed")
    return Failed("timeout", f"approval timed out after {after}; going to {ap.on_timeout!r}", timed_out=True,
                  route=ap.on_timeout)


def grant(x: Execution, actor: str, roles: tuple[str, ...] | None, comment: str | None) -> Outcome:
    """Record ``actor``'s approval; succeed once the quorum is reached."""
    ap = plan_of(x)
    if ap.separation_of_duties and actor == x.run.initiator:
        raise StepError("unauthorized", f"{actor} started run {x.run.id} and cannot also approve it (separation of "
                                        "duties); ask one of: " + ", ".join(ap.approvers))
    if roles is not None and actor not in ap.approvers and not set(roles) & set(ap.approvers):
        raise StepError("unauthorized", f"{actor} (roles: {', '.join(roles) or 'none'}) is not an approver of "
                                        f"step {x.step_id!r}; approvers: {', '.join(ap.approvers)}")
    data = dict(x.attempt.data)
    approvals = list(data.get("approvals", ()))
    if any(a["actor"] == actor for a in approvals):
        raise InvalidOperation(f"{actor} already approved step {x.step_id!r} of run {x.run.id}; the quorum of "
                               f"{ap.quorum} needs distinct approvers")
    approvals.append({"actor": actor, "at": x.now, "comment": comment, "show_hash": data.get("show_hash")})
    data["approvals"] = approvals
    if len(approvals) < ap.quorum:
        return Waiting(x.attempt.due_at, None, data)
    return Succeeded({"approved": True, "approvals": approvals, "show": data.get("show")}, data=data,
                     detail={"approved_by": [a["actor"] for a in approvals]})


def deny(x: Execution, actor: str, reason: str) -> Failed:
    """A rejection: the step fails with ``policy_denied``."""
    ap = plan_of(x)
    if ap.separation_of_duties and actor == x.run.initiator:
        raise StepError("unauthorized", f"{actor} started run {x.run.id} and cannot decide its approval; use "
                                        "cancel to stop your own run")
    return Failed("policy_denied", f"rejected by {actor}: {reason or 'no reason given'}")
