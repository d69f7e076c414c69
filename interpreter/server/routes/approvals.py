"""``/v1/approvals``: what waits for the caller, and deciding it (bound to the payload the caller saw)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from sealflow.policy.approvals import NO_EDIT
from sealflow.policy.operations import Operation
from sealflow.runtime.status import status_json
from sealflow.server.deps import Caller, Runtime
from sealflow.server.problems import Problem
from sealflow.server.schemas import RUN_ID, STEP_ID, Decision

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


@router.get("", response_model=list[dict[str, Any]], summary="The approval gates waiting for me")
def waiting(caller: Caller, rt: Runtime) -> list[dict[str, Any]]:
    """The gates of the caller's tenant the caller may decide now (with each ``show_hash``)."""
    gates: list[dict[str, Any]] = rt.approvals_waiting(caller.principal, caller.tenant)
    return gates


@router.post("/{run_id}/{step_id}", response_model=dict[str, Any], summary="Approve or reject a waiting gate")
def decide(run_id: Annotated[str, Path(pattern=RUN_ID)], step_id: Annotated[str, Path(pattern=STEP_ID)],
           body: Decision, caller: Caller, rt: Runtime) -> dict[str, Any]:
    """The decision counts only if the gate still shows the payload whose hash the caller sends; a gate that
    changed since is a 409 ``payload-changed`` (review it again)."""
    # deciding needs membership of the run's tenant (runs:decide), not runs:read: an outsider gets the unknown-run
    # answer (audited); the gate itself then decides who may approve, and says why it refuses (e.g. separation
    # of duties)
    rt.authorize(run_id, actor=caller.principal, tenant=caller.tenant, operation=Operation.DECIDE)
    status = rt.status(run_id)
    gate = status.waiting if status.waiting and status.waiting.get("kind") == "approval" else None
    if gate is None or gate.get("step") != step_id:
        raise Problem("invalid-operation", f"run {run_id} is not waiting for an approval at {step_id}")
    if gate.get("show_hash") != body.payload_hash:
        raise Problem("payload-changed", f"the payload of {step_id} is not the one you reviewed (its hash is now "
                                         f"{gate.get('show_hash')}); review it again", show_hash=gate.get("show_hash"))
    if body.decision == "approve":
        edit = body.edit if "edit" in body.model_fields_set else NO_EDIT
        after = rt.approve(run_id, step_id, actor=caller.principal, tenant=caller.tenant, comment=body.reason or None,
                           edit=edit)
    else:
        after = rt.reject(run_id, step_id, actor=caller.principal, tenant=caller.tenant, reason=body.reason)
    return status_json(after)
