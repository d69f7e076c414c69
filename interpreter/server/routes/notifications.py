"""``/v1/notifications``: approval notification deliveries (of runs the caller may read), and retrying one that
failed for good (operators only under an access policy: its channel and receiver serve every tenant)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from sealflow.operations.notifications import admin
from sealflow.policy.operations import OperatorOnly
from sealflow.server.deps import Caller, Runtime
from sealflow.server.problems import Problem
from sealflow.server.schemas import RUN_ID

router = APIRouter(prefix="/v1/notifications", tags=["notifications"])

DELIVERY_ID = r"^ntf_[0-9a-f]{1,64}$"


@router.get("", response_model=list[dict[str, Any]], summary="Approval notification deliveries, newest first")
def deliveries(caller: Caller, rt: Runtime,
               failed: Annotated[bool, Query(description="Only those given up after their attempts")] = False,
               run: Annotated[str | None, Query(pattern=RUN_ID, description="Only this run's")] = None,
               limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    """The caller's tenant's deliveries of runs it may read (``runs:read``, or its own runs), as
    `sealflow notifications list --json`: no URL, secret or response body, only a status code or an error
    class as the last error."""
    records = rt.notifications(caller.principal, tenant=caller.tenant, failed=failed, run_id=run, limit=limit)
    return [admin.as_dict(r) for r in records]


@router.post("/{delivery_id}/retry", response_model=dict[str, Any], summary="Re-queue a failed delivery")
def retry(delivery_id: Annotated[str, Path(pattern=DELIVERY_ID)], caller: Caller, rt: Runtime) -> dict[str, Any]:
    """Pending again, due at once, its attempts counted afresh (audited ``notification_retried``); a delivery
    that is not ``failed`` is a 409 ``invalid-operation``, left as it is."""
    try:
        before = rt.retry_notification(caller.principal, delivery_id)
    except OperatorOnly as exc:
        raise Problem("forbidden", str(exc)) from None
    return admin.retried(before)
