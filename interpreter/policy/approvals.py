"""Approval decisions: who may approve, what an approval binds to, and when it is void.

When a gate opens (an ``approval`` step, or ``requires_approval_if``) it
records what is approved: the rendered ``show`` payload, its sha256 over
canonical JSON (RFC 8785), and the run's plan digest. A decision is then:

* **scoped**: the caller's tenant must own the run (else: unknown run, audited);
* **eligible**: approvers are principals (``user:x``, ``service:x``, matched
  exactly) or roles (``role:x``, resolved through the access provider for the
  run's tenant; in open development mode everyone holds every role). Callers
  may narrow the roles they act under (``roles=``);
* **separated**: with separation of duties (the default) the run's initiator,
  and the identity it acts as, may neither approve nor reject; one principal
  counts once towards the quorum;
* **bound**: at decision time the payload is rendered again and hashed, and
  the plan digest compared; if either differs from what the gate recorded
  (or from what an earlier approval bound to), every approval so far is
  **void**: the gate is re-opened on the new payload (same deadline), and the
  caller gets :class:`ApprovalVoid` -- review the new payload, approve again;
* **in time**: a decision after the gate's deadline is refused (the timeout
  rejects, failing closed; nothing ever auto-approves).

Every decision is audited with who, when, the hash, the plan digest and why
(``approval_granted``, ``approval_rejected``, ``approval_void``); a refused
one as ``approval_refused`` with its reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.dsl.errors import DslError
from sealflow.dsl.plan import ApprovalPlan
from sealflow.execution import schemacheck
from sealflow.policy import access as acc
from sealflow.policy.authz import Unauthorized
from sealflow.store.base import AttemptRecord, AuditEvent, RunRecord
from sealflow.store.errors import InvalidOperation

if TYPE_CHECKING:
    from sealflow.execution.context import Execution


class ApprovalVoid(InvalidOperation):
    """The payload or the plan changed since the gate opened: earlier approvals are void, the gate re-opened."""


class Refusal(Exception):
    """A refused decision: audited as ``approval_refused``, then ``error`` is raised to the caller."""

    def __init__(self, reason: str, error: Exception, step_id: str | None = None):
        super().__init__(str(error))
        self.reason, self.error, self.step_id = reason, error, step_id


# ---------------------------------------------------------------- binding

def canonical(value: Any) -> bytes:
    """Canonical JSON (RFC 8785) of ``value``; sorted compact JSON for what JCS cannot hold (huge ints)."""
    from sealflow.dsl.plan import canonical_bytes

    try:
        return canonical_bytes(value)
    except Exception:  # noqa: BLE001 - rfc8785 refuses integers beyond 2**53 and non-JSON values
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def show_hash(shown: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(shown)).hexdigest()


#: attempt data of an edited gate: ``{"value", "hash", "by", "at", "before_hash"}``
EDIT = "edit"


def shown(data: dict[str, Any]) -> tuple[Any, Any]:
    """What a gate shows now and its hash: an approver's edit of the show value, else the value it opened on."""
    edited = data.get(EDIT)
    if isinstance(edited, dict):
        return edited.get("value"), edited.get("hash")
    return data.get("show"), data.get("show_hash")


def plan_of(x: Execution) -> ApprovalPlan:
    if x.gate:
        found = x.step.gate
    elif x.step.agent is not None:  # a tool call an agent step waits on (steps/agent/approval)
        found = x.step.agent.approval
    else:
        found = x.step.approval
    if found is None:  # the engine decides only gates and approvals a step declares
        raise InvalidOperation(f"step {x.step_id!r} of run {x.run.id} has no approval to decide")
    return found


def render_show(x: Execution, ap: ApprovalPlan) -> Any:
    """What the approver is shown (and approves, bound by hash): the gate's ``show``, or for a gate
    ``requires_approval_if`` opened without one, the step's arguments. Not redacted here: the hash binds
    what any process renders (the command line has no secrets in memory); every display redacts."""
    if x.step.agent is not None and not x.gate:  # an agent's tool call: the exact call, fixed when proposed
        return x.attempt.data.get("show")
    if ap.show:
        return x.evaluate(ap.show)
    if x.gate:
        return {"step": x.step.id, "args": x.render(dict(x.step.args))}
    return None


def opening(x: Execution, ap: ApprovalPlan, now: float) -> dict[str, Any]:
    """The attempt data of a freshly opened gate: what is approved, bound by hash and plan digest."""
    shown = render_show(x, ap)
    return {"opened_at": now, "approvers": list(ap.approvers), "quorum": ap.quorum, "show": shown,
            "show_hash": show_hash(shown), "plan_digest": x.run.plan_digest,
            "separation_of_duties": ap.separation_of_duties, "approvals": [],
            "gate_for": x.step.id if x.gate else None, "editable": ap.editable_schema is not None}


def _binding_changed(x: Execution, ap: ApprovalPlan) -> dict[str, Any] | None:
    """What changed since the gate opened (None: the binding holds)."""
    data = x.attempt.data
    now_hash: str | None
    try:
        now_hash = show_hash(render_show(x, ap))
    except DslError as exc:
        raise Refusal("show_unrenderable", InvalidOperation(
            f"the approval of run {x.run.id} cannot be checked: its show payload no longer renders ({exc}); it "
            "cannot be approved and will be rejected at its timeout"), x.step_id) from None
    recorded_hash, recorded_plan = data.get("show_hash"), data.get("plan_digest")
    if x.gate and not ap.show and data.get("show") is None:
        now_hash = recorded_hash  # a gate opened before gates showed the step's arguments: bound to nothing
    changes: dict[str, Any] = {}
    if now_hash != recorded_hash:
        changes["show_hash"] = {"recorded": recorded_hash, "now": now_hash}
    if x.run.plan_digest != recorded_plan or x.plan.digest != x.run.plan_digest:
        changes["plan_digest"] = {"recorded": recorded_plan, "now": x.run.plan_digest}
    edit_hash = (data.get(EDIT) or {}).get("hash")  # approvals given before an edit approved another payload
    stale = [a.get("actor") for a in data.get("approvals", ())
             if a.get("show_hash") != recorded_hash or a.get("plan_digest", recorded_plan) != recorded_plan
             or a.get("edit_hash") != edit_hash]
    if stale:
        changes["approvals_bound_elsewhere"] = stale
    return changes or None


# ---------------------------------------------------------------- eligibility

def eligible_as(actor: str, approvers: Iterable[str], roles: Iterable[str]) -> str | None:
    """The approver entry that lets ``actor`` decide: itself, or a role it holds; None if none does."""
    approvers = list(approvers)
    if actor in approvers:
        return actor
    roles = frozenset(roles)
    for entry in approvers:
        if entry.startswith("role:") and acc.has_role(roles, entry):
            return entry
    return None


def acting_roles(access: acc.AccessProvider, tenant: str, actor: str,
                 claimed: tuple[str, ...] | None) -> frozenset[str]:
    """The roles ``actor`` decides under in ``tenant``: those it holds, narrowed to ``claimed`` if given."""
    try:
        held = access.roles(tenant, actor)
    except acc.AccessPolicyError as exc:
        raise Refusal("policy_unusable", Unauthorized(f"the access policy cannot be used, so no approval is "
                                                        f"accepted: {exc.message}")) from None
    if claimed is None:
        return held
    # the caller acts under the roles it names, and only those it holds
    return frozenset(r for r in claimed if acc.has_role(held, r))


def _check_decider(x: Execution, ap: ApprovalPlan, actor: str, roles: frozenset[str], verb: str) -> str:
    run = x.run
    if x.attempt.due_at is not None and x.now >= x.attempt.due_at:
        raise Refusal("expired", InvalidOperation(
            f"the approval of step {x.step_id!r} of run {run.id} expired; it fails closed (the run is rejected "
            "when its timeout is processed) and can no longer be decided"), x.step_id)
    acting = run.acting
    if ap.separation_of_duties and actor in (run.initiator, acting):
        if verb == "approve":
            message = (f"{actor} started run {run.id} and cannot also approve it (separation of duties); ask one "
                       f"of: {', '.join(ap.approvers)}")
        else:
            message = f"{actor} started run {run.id} and cannot decide its approval; use cancel to stop your own run"
        raise Refusal("separation_of_duties", Unauthorized(message), x.step_id)
    via = eligible_as(actor, ap.approvers, roles)
    if via is None:
        shown = ", ".join(sorted(r for r in roles if r != acc.ALL)) or "none"
        raise Refusal("not_an_approver", Unauthorized(
            f"{actor} (roles in tenant {run.tenant!r}: {shown}) is not an approver of step {x.step_id!r} of run "
            f"{run.id}; approvers: {', '.join(ap.approvers)}"), x.step_id)
    return via


# ---------------------------------------------------------------- decisions

#: no edit given with an approval
NO_EDIT: Any = object()


def grant(x: Execution, actor: str, roles: frozenset[str], comment: str | None,
          void: list[Any], edit: Any = NO_EDIT) -> tuple[Outcome, tuple[AuditEvent, ...]]:
    """Record ``actor``'s approval (succeed at quorum), or re-open the gate if its binding changed.
    ``roles``: what ``actor`` acts under in the run's tenant (:func:`acting_roles`). ``edit``: the show value as
    the approver changed it (an ``editable`` gate): checked against the gate's schema, it replaces what the gate
    shows, earlier approvals (of the value before) no longer count, and this approval binds to its hash."""
    ap = plan_of(x)
    via = _check_decider(x, ap, actor, roles, "approve")
    data = x.attempt.data
    events: list[AuditEvent] = []
    if edit is not NO_EDIT:
        data, edited = _edited(x, ap, actor, data, edit)
        events.append(edited)
    changed = _binding_changed(x, ap)
    if changed is not None:
        fresh = opening(x, ap, x.now)
        fresh["then"] = data.get("then")
        for kept in ("agent_resume", "tool_call"):  # an agent's waiting conversation stays with its gate
            if kept in data:
                fresh[kept] = data[kept]
        fresh["reopened"] = int(data.get("reopened", 0)) + 1
        void.append(changed)
        event = AuditEvent("approval_void", x.step_id, actor, detail={
            "changed": changed, "voided": [a.get("actor") for a in data.get("approvals", ())],
            "show_hash": fresh["show_hash"], "plan_digest": fresh["plan_digest"],
            "why": "the approved payload or plan changed; the gate was re-opened"})
        return Waiting(x.attempt.due_at, None, fresh), (event,)
    approvals = list(data.get("approvals", ()))
    if edit is NO_EDIT and any(a.get("actor") == actor for a in approvals):
        raise Refusal("already_approved", InvalidOperation(
            f"{actor} already approved step {x.step_id!r} of run {x.run.id}; the quorum of {ap.quorum} needs "
            "distinct approvers"), x.step_id)
    value, value_hash = shown(data)
    record = {"actor": actor, "as": via, "at": x.now, "comment": comment, "show_hash": data.get("show_hash"),
              "plan_digest": data.get("plan_digest")}
    if EDIT in data:
        record["edit_hash"] = value_hash
    approvals.append(record)
    new = dict(data)
    new["approvals"] = approvals
    events.append(AuditEvent("approval_granted", x.step_id, actor, detail={
        "as": via, "show_hash": value_hash, "plan_digest": record["plan_digest"], "comment": comment,
        "count": len(approvals), "quorum": ap.quorum}))
    if len(approvals) < ap.quorum:
        return Waiting(x.attempt.due_at, None, new), tuple(events)
    output = {"approved": True, "approvals": approvals, "show": value, "show_hash": value_hash,
              "plan_digest": data.get("plan_digest")}
    if EDIT in data:
        output["edited"] = {"by": data[EDIT]["by"], "before_hash": data[EDIT]["before_hash"]}
    return Succeeded(output, data=new, detail={"approved_by": [a["actor"] for a in approvals]}), tuple(events)


def _edited(x: Execution, ap: ApprovalPlan, actor: str, data: dict[str, Any],
            value: Any) -> tuple[dict[str, Any], AuditEvent]:
    """The gate's data with ``actor``'s edit of its show value (checked), and its audit event (before and after);
    a :class:`Refusal` when the gate is not editable or the value fails its schema."""
    if ap.editable_schema is None:
        raise Refusal("not_editable", InvalidOperation(
            f"the approval of step {x.step_id!r} of run {x.run.id} is not editable (its definition declares no "
            "editable: {schema}); approve it as it is, or reject it with a reason"), x.step_id)
    broken = schemacheck.problem(x, ap.editable_schema, value, "editable")
    if broken is not None:
        raise Refusal("invalid_edit", InvalidOperation(
            f"the edit of step {x.step_id!r} does not pass its editable schema {broken}"), x.step_id)
    before, before_hash = shown(data)
    after_hash = show_hash(value)
    new = dict(data)
    new[EDIT] = {"value": value, "hash": after_hash, "by": actor, "at": x.now, "before_hash": before_hash}
    new["approvals"] = []  # the approvals of the value before were of another payload
    return new, AuditEvent("approval_edited", x.step_id, actor, detail={
        "before_hash": before_hash, "after_hash": after_hash, "before": before, "after": value})


def deny(x: Execution, actor: str, roles: frozenset[str],
         reason: str) -> tuple[Outcome, tuple[AuditEvent, ...]]:
    """A rejection by an approver: the step fails with ``policy_denied``."""
    ap = plan_of(x)
    via = _check_decider(x, ap, actor, roles, "reject")
    data = x.attempt.data
    event = AuditEvent("approval_rejected", x.step_id, actor, detail={
        "as": via, "reason": reason, "show_hash": data.get("show_hash"), "plan_digest": data.get("plan_digest")})
    return Failed("policy_denied", f"rejected by {actor}: {reason}"), (event,)


def may_decide(run: RunRecord, att: AttemptRecord | None, principal: str, roles: frozenset[str],
               now: float) -> str | None:
    """The approver entry through which ``principal`` may decide the open gate ``att`` of ``run`` now
    (None: it may not: no open gate, expired, separation of duties, already approved, not an approver)."""
    if att is None or att.state != "waiting" or "opened_at" not in att.data:
        return None
    data = att.data
    if att.due_at is not None and att.due_at <= now:
        return None
    if data.get("separation_of_duties", True) and principal in (run.initiator, run.acting):
        return None
    if any(a.get("actor") == principal for a in data.get("approvals", ())):
        return None
    return eligible_as(principal, data.get("approvers", ()), roles)


__all__ = ["ApprovalVoid", "Refusal", "acting_roles", "grant", "deny", "opening", "show_hash", "canonical",
           "eligible_as", "may_decide", "plan_of"]
