"""``POST /v1/callbacks/{token}``: the result of an action step's callback (:mod:`sealflow.execution.callbacks`).

Authenticated by the token itself (a single-use capability for one waiting attempt), not by an API token. The body
is ``{"data": RESULT}`` to complete the step, or ``{"error": CLASS, "message": TEXT}`` to fail it. Every refusal is
audited (``callback_refused``, the token named by a digest prefix only); a token that names nothing waiting (unknown,
forged, used, superseded, expired) is answered as one that does not exist (404), so a caller learns nothing about
runs; a result failing the step's schema is a 422 and the step keeps waiting.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from sealflow.execution.callbacks import MAX_TOKEN, CallbackRefused
from sealflow.server.deps import Runtime
from sealflow.server.problems import Problem

router = APIRouter(prefix="/v1/callbacks", tags=["callbacks"])
log = logging.getLogger("sealflow.callbacks")


class CallbackResult(BaseModel):
    """A callback's result: ``data`` completes the step; ``error`` (an error class) fails it."""

    model_config = ConfigDict(extra="forbid")
    data: Any = None
    error: str | None = Field(default=None, max_length=40)
    message: str = Field(default="", max_length=2000)


@router.post("/{token}", response_model=dict[str, Any], summary="Post the result of an action step's callback")
def complete(token: Annotated[str, Path(max_length=MAX_TOKEN)], body: CallbackResult, rt: Runtime) -> dict[str, Any]:
    """Complete (``data``) or fail (``error``) the step waiting for this callback; 404 when no step waits for it
    (unknown, used, superseded or expired: audited), 422 when ``data`` fails the step's callback schema."""
    try:
        done: dict[str, Any] = rt.complete_callback(token, data=body.data, failed=body.error, message=body.message,
                                                    actor="callback")
        return done
    except CallbackRefused as exc:
        log.info("a callback was refused: %s", exc.reason)  # (never the token)
        if exc.reason == "invalid":
            raise Problem("invalid-request", exc.message) from None
        if exc.reason == "malformed" and body.error is not None and "error class" in exc.message:
            raise Problem("invalid-request", exc.message) from None
        raise Problem("not-found", "no step waits for this callback") from None
