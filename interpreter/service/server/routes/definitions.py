"""``/v1/definitions``: the store's registry of loaded, signed definitions (and, in development mode with no
trust policy, the plans submitted to it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from sealflow.interpreter.service.server.deps import Caller, Runtime

router = APIRouter(prefix="/v1/definitions", tags=["definitions"])


@router.get("", response_model=list[dict[str, Any]], summary="Registered definitions")
def definitions(caller: Caller, rt: Runtime) -> list[dict[str, Any]]:
    return [dataclasses.asdict(d) for d in rt.store.definitions()]
