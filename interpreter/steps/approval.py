"""``approval`` steps and the gates opened by ``requires_approval_if``: a durable human decision.

Opening the gate renders what is approved (``show``) and binds it by its
sha256 and the plan digest (:func:`sealflow.policy.approvals.opening`); the
attempt goes ``waiting`` with an ``approval_timeout`` timer. Decisions arrive
through :meth:`sealflow.runtime.facade.Runtime.approve` / ``reject`` and are
checked by :mod:`sealflow.policy.approvals` (approvers by principal or role,
quorum of distinct principals, separation of duties, binding). A rejection
fails the step with ``policy_denied`` (``on_error`` may route it). The timeout
fails closed: with ``on_timeout: reject`` it is a rejection; with
``on_timeout: {next: id}`` the step times out and control goes to that step.
There is no auto-approve.
"""

from __future__ import annotations

from typing import Any

from sealflow.core.outcomes import Failed, Outcome, Waiting
from sealflow.dsl.durations import format_ms
from sealflow.dsl.plan import ApprovalPlan
from sealflow.execution.context import Execution
from sealflow.policy import approvals

plan_of = approvals.plan_of


def opening(x: Execution, ap: ApprovalPlan, now: float) -> dict[str, Any]:
    """The attempt data of a freshly opened gate (see :func:`sealflow.policy.approvals.opening`)."""
    return approvals.opening(x, ap, now)


def execute(x: Execution) -> Outcome:
    ap = plan_of(x)
    if x.resumed:
        return timed_out(x, ap)
    return Waiting(x.now + ap.timeout_ms / 1000.0, "approval_timeout", opening(x, ap, x.now))


def timed_out(x: Execution, ap: ApprovalPlan) -> Failed:
    data = x.attempt.data
    got = len(data.get("approvals", ()))
    after = format_ms(ap.timeout_ms)
    # the timeout is a decision too: audited (step.detail) with what was waiting and why it was refused
    detail = {"decision": "approval_expired", "show_hash": data.get("show_hash"),
              "plan_digest": data.get("plan_digest"), "approvals": [a.get("actor") for a in data.get("approvals", ())],
              "quorum": ap.quorum, "why": f"no quorum within {after}; "
              + ("the gate fails closed" if ap.on_timeout == "reject" else f"routed to {ap.on_timeout!r}")}
    if ap.on_timeout == "reject":
        return Failed("policy_denied", f"approval timed out after {after} with {got} of {ap.quorum} approvals; "
                                       "the gate fails closed", detail=detail)
    return Failed("timeout", f"approval timed out after {after}; going to {ap.on_timeout!r}", timed_out=True,
                  route=ap.on_timeout, detail=detail)
