"""``/v1/definitions``: the definitions runs may name. With a trust policy, the store's registry of loaded,
signed definitions; in development mode (no trust policy), every plan submitted to the store (``unsigned``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from sealflow.policy.operations import OperatorOnly, require_operator
from sealflow.server.deps import Caller, Runtime, Trust
from sealflow.server.problems import Problem

router = APIRouter(prefix="/v1/definitions", tags=["definitions"])


@router.get("", response_model=list[dict[str, Any]], summary="The definitions runs may name")
def definitions(caller: Caller, rt: Runtime, trust: Trust) -> list[dict[str, Any]]:
    """The registry is shared by every tenant (it names their workflows, signers and pins), so under an access
    policy only its operators read it, as with `sealflow definitions list`."""
    try:
        require_operator(rt.access, caller.principal, "read the definition registry")
    except OperatorOnly as exc:
        raise Problem("forbidden", str(exc)) from None
    if trust is not None:
        return [dataclasses.asdict(d) for d in rt.definitions()]
    return [{"name": name, "version": version, "digest": digest, "signer": "unsigned", "stored_at": at}
            for name, version, digest, at in rt.stored_plans()]
