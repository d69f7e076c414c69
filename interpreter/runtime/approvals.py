"""Approving and rejecting a waiting run: the runtime's side of :mod:`sealflow.policy.approvals`.

The policy module decides (who may, what binds, when it is void); this one admits only
members of the run's tenant (:mod:`sealflow.policy.operations`; others are told there is no such
run), applies the decision through the engine (fenced, re-read on conflict), sends the messages the
commit made due, and audits a refused decision as ``approval_refused``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sealflow.core.clock import Clock
from sealflow.core.ids import split_step_id
from sealflow.core.outcomes import Outcome
from sealflow.core.redaction import REDACTOR
from sealflow.policy import access as acc
from sealflow.policy.approvals import (
    NO_EDIT,
    ApprovalVoid,
    Refusal,
    acting_roles,
    deny,
    eligible_as,
    grant,
    may_decide,
    shown,
)
from sealflow.policy.authz import scoped_run
from sealflow.policy.operations import Operation
from sealflow.store.base import AuditEvent, Message, Store
from sealflow.store.errors import InvalidOperation

if TYPE_CHECKING:
    from sealflow.execution.context import Execution


@dataclasses.dataclass(frozen=True)
class Desk:
    """What deciding an approval needs from the runtime: the store, the clock, who holds which roles, the
    engine's fenced ``resolve`` and a way to send the messages a decision made due."""

    store: Store
    clock: Clock
    access: acc.AccessProvider
    resolve: Callable[..., tuple[Message, ...]]
    send: Callable[[Message], None]


def _decide(desk: Desk, run_id: str, step_id: str | None, *, actor: str, tenant: str | None, verb: str,
            decide: Callable[[Execution], tuple[Outcome, tuple[AuditEvent, ...]]]) -> None:
    now = desk.clock.now()
    # a non-member is told there is no such run (audited); a member is refused by the gate if not an approver
    scoped_run(desk.store, desk.access, now, run_id, tenant=tenant, actor=actor, operation=Operation.DECIDE)
    try:
        for message in desk.resolve(run_id, step_id, decide, actor=actor):
            desk.send(message)
    except Refusal as refusal:
        desk.store.append_audit(AuditEvent("approval_refused", refusal.step_id, actor, run_id=run_id, detail={
            "decision": verb, "reason": refusal.reason, "message": str(refusal.error)}), desk.clock.now())
        raise refusal.error from None


def approve(desk: Desk, run_id: str, step_id: str | None = None, *, actor: str, tenant: str | None = None,
            roles: Iterable[str] | None = None, comment: str | None = None, edit: Any = NO_EDIT) -> None:
    claimed = None if roles is None else tuple(roles)
    void: list[Any] = []
    _decide(desk, run_id, step_id, actor=actor, tenant=tenant, verb="approve",
            decide=lambda x: grant(x, actor, acting_roles(desk.access, x.run.tenant, actor, claimed), comment, void,
                                   edit))
    if void:
        what = " and ".join({"show_hash": "the approved payload", "plan_digest": "the plan"}.get(k, k)
                            for k in void[-1] if k != "approvals_bound_elsewhere") or "an earlier approval's binding"
        raise ApprovalVoid(f"approval void: {what} changed since the gate of run {run_id} opened; earlier approvals "
                           f"no longer count and the gate was re-opened on the new payload: review it with "
                           f"`sealflow status {run_id}` and approve again")


def reject(desk: Desk, run_id: str, step_id: str | None = None, *, actor: str, tenant: str | None = None,
           roles: Iterable[str] | None = None, reason: str = "") -> None:
    if not (reason or "").strip():
        raise InvalidOperation("a rejection needs a reason (--reason TEXT): it is recorded in the audit trail")
    claimed = None if roles is None else tuple(roles)
    _decide(desk, run_id, step_id, actor=actor, tenant=tenant, verb="reject",
            decide=lambda x: deny(x, actor, acting_roles(desk.access, x.run.tenant, actor, claimed), reason))


# ---------------------------------------------------------------- what waits for whom

def waiting_for(desk: Desk, principal: str, tenant: str, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The gates of ``tenant`` that ``principal`` may decide now, oldest run first: none unless it is a
    member of ``tenant`` (an approver named by principal but no member sees nothing, as it could decide
    nothing). Each carries what the approver needs: the run's input and the gate's ``show``, redacted."""
    try:
        roles = desk.access.roles(tenant, principal)
        member = acc.is_open(desk.access) or bool(roles) or bool(desk.access.permissions(tenant, principal))
    except acc.AccessPolicyError:
        return []
    if not member:
        return []
    now = desk.clock.now()
    out = []
    for run in desk.store.list_runs(states=("waiting",), tenant=tenant, limit=limit):
        att = desk.store.active_attempt(run.id)
        via = may_decide(run, att, principal, roles, now)
        if via is None or att is None:  # (no attempt: no gate to decide, via is None)
            continue
        data = att.data
        out.append({"run_id": run.id, "workflow": run.workflow, "version": run.workflow_version,
                    "tenant": run.tenant, "initiator": run.initiator, "step": att.step_id,
                    "for_step": split_step_id(att.step_id)[0], "as": via, "approvers": data.get("approvers"),
                    "quorum": data.get("quorum"), "approvals": len(data.get("approvals", ())),
                    "input": REDACTOR.value(run.input), "show": REDACTOR.value(shown(data)[0]),
                    "show_hash": shown(data)[1],
                    "plan_digest": data.get("plan_digest"), "opened_at": data.get("opened_at"),
                    "editable": bool(data.get("editable")), "edited_by": (data.get("edit") or {}).get("by"),
                    "due_at": att.due_at})
        if run.parent_run_id is not None and not run.called:  # an item of a fan-out: the approver decides on it
            out[-1].update(input=REDACTOR.value(desk.store.get_run(run.parent_run_id).input),
                           item={"parent": run.parent_run_id, "step": run.parent_step_id, "index": run.item_index,
                                 "value": REDACTOR.value(run.item)})
        elif run.called:  # a called workflow's run: which run called it, at which step
            out[-1]["called_by"] = {"run_id": run.parent_run_id, "step": run.parent_step_id}
    return out


def withheld_from(desk: Desk, principal: str, tenant: str, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The open gates of ``tenant`` that ``principal`` is an approver of but may not decide, because it
    started the run (or the run acts as it): separation of duties. ``approvals list`` explains them, so an
    initiator who sees nothing knows why and whom to ask."""
    try:
        roles = desk.access.roles(tenant, principal)
    except acc.AccessPolicyError:
        return []
    now = desk.clock.now()
    out = []
    for run in desk.store.list_runs(states=("waiting",), tenant=tenant, limit=limit):
        if principal not in (run.initiator, run.acting):
            continue
        att = desk.store.active_attempt(run.id)
        if att is None or att.state != "waiting" or "opened_at" not in att.data \
                or not att.data.get("separation_of_duties", True) or (att.due_at is not None and att.due_at <= now):
            continue
        approvers = att.data.get("approvers") or ()
        if eligible_as(principal, approvers, roles) is None:
            continue
        out.append({"run_id": run.id, "workflow": run.workflow, "version": run.workflow_version,
                    "step": att.step_id, "others": [a for a in approvers if a != principal]})
    return out
