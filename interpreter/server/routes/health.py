"""``/healthz`` (the process answers) and ``/readyz`` (its store answers, and every secret it needs resolves);
served without a credential: they tell nothing about runs, and name a missing secret, never a value."""

from __future__ import annotations

from fastapi import APIRouter, Request

from sealflow.runtime.readiness import describe_missing_secrets, missing_secrets
from sealflow.server.problems import Problem
from sealflow.server.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness")
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, summary="Readiness: the store answers and every secret resolves")
def readyz(request: Request) -> Health:
    rt = request.app.state.runtime
    try:
        rt.check_store()
    except Exception:  # noqa: BLE001 - any failure means not ready
        raise Problem("not-ready", "the state store does not answer", headers={"Retry-After": "1"}) from None
    # a model's api_key, an action's declared secret: their steps would wait for another process; named (no
    # value, no file path: the caller is anonymous), `sealflow doctor` on the host says where each is declared
    missing = missing_secrets(rt, files=False)
    if missing:
        raise Problem("not-ready", describe_missing_secrets(missing), headers={"Retry-After": "10"})
    return Health(status="ready")
