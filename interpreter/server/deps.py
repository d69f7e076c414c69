"""What a route depends on: the process's runtime and trust policy, and the request's credential."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from sealflow.server.auth import Credential


def runtime(request: Request) -> Any:
    return request.app.state.runtime


def trust(request: Request) -> Any:
    return request.app.state.trust


def credential(request: Request) -> Credential:
    found: Credential = request.app.state.authenticator(request)
    return found


Caller = Annotated[Credential, Depends(credential)]
Runtime = Annotated[Any, Depends(runtime)]
Trust = Annotated[Any, Depends(trust)]
