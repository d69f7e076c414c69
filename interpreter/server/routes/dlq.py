"""``/v1/dlq``: the tenant's dead letters, and redriving one."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Path

from sealflow.runtime.status import status_json
from sealflow.server.deps import Caller, Runtime
from sealflow.server.schemas import RUN_ID

router = APIRouter(prefix="/v1/dlq", tags=["dead letters"])


@router.get("", response_model=list[dict[str, Any]], summary="The tenant's dead-lettered runs")
def dead_letters(caller: Caller, rt: Runtime) -> list[dict[str, Any]]:
    return [dataclasses.asdict(d) for d in rt.dlq_list(tenant=caller.tenant)]


@router.post("/{run_id}/redrive", response_model=dict[str, Any], summary="Rerun a dead letter's failed step")
def redrive(run_id: Annotated[str, Path(pattern=RUN_ID)], caller: Caller, rt: Runtime) -> dict[str, Any]:
    return status_json(rt.dlq_redrive(run_id, actor=caller.principal, tenant=caller.tenant))
