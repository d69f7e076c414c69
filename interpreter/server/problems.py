"""Errors as RFC 9457 problem details (``application/problem+json``), one stable ``type`` per error class.

Every refusal the API makes is a :class:`Problem`; the runtime's and the store's exceptions are mapped here
once (:data:`MAPPED`), request validation errors become ``invalid-request`` with the offending fields, and
anything unexpected is logged and answered as ``internal`` without its details (never a traceback).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Scope

MEDIA_TYPE = "application/problem+json"
#: the prefix of every problem type; docs/operations.md lists the types
TYPE_PREFIX = "urn:sealflow:problem:"

#: type slug -> (status, title): the stable problem types of the API
TYPES: dict[str, tuple[int, str]] = {
    "unauthenticated": (401, "No valid credential"),
    "forbidden": (403, "Not allowed"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "idempotency-conflict": (409, "Idempotency key reused with another request"),
    "invalid-operation": (409, "Not possible in the run's current state"),
    "payload-changed": (409, "The approval payload changed"),
    "definition-refused": (409, "Definition refused by the registry"),
    "plan-tampered": (409, "Stored plan does not match its digest"),
    "body-too-large": (413, "Request body too large"),
    "unsupported-media-type": (415, "Unsupported media type"),
    "invalid-request": (422, "Invalid request"),
    "invalid-input": (422, "Invalid run input"),
    "invalid-event": (422, "Event data refused by the runs waiting for it"),
    "signature-refused": (422, "Definition not verified"),
    "model-not-configured": (422, "Model not configured"),
    "rate-limited": (429, "Too many requests"),
    "admission-refused": (429, "Tenant limit reached"),
    "http-error": (400, "Bad request"),
    "internal": (500, "Internal error"),
    "not-ready": (503, "Not ready"),
    "store-unavailable": (503, "Store unavailable"),
}


class Problem(Exception):
    """An error answered as problem details: ``kind`` is a key of :data:`TYPES`."""

    def __init__(self, kind: str, detail: str, *, status: int | None = None, headers: dict[str, str] | None = None,
                 **extra: Any):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.status = status or TYPES[kind][0]
        self.headers = headers or {}
        self.extra = extra

    def body(self, instance: str | None = None) -> dict[str, Any]:
        out = {"type": TYPE_PREFIX + self.kind, "title": TYPES[self.kind][1], "status": self.status,
               "detail": self.detail}
        if instance:
            out["instance"] = instance
        out.update(self.extra)
        return out

    def response(self, request: Request | None = None) -> JSONResponse:
        return JSONResponse(jsonable_encoder(self.body(shown_path(request.url.path) if request is not None else None)),
                            status_code=self.status, media_type=MEDIA_TYPE, headers=self.headers)


def from_exception(exc: BaseException) -> Problem | None:
    """The problem a runtime or store exception means (None: not one the API expects)."""
    from sealflow.core.errors import StepError
    from sealflow.dsl.trust.policy import Refused
    from sealflow.policy.access import AccessPolicyError
    from sealflow.policy.approvals import ApprovalVoid
    from sealflow.policy.authz import Unauthorized
    from sealflow.runtime.submitting import ModelNotConfigured
    from sealflow.store.definitions import DefinitionRefused
    from sealflow.store.errors import (
        AdmissionRefused,
        IdempotencyConflict,
        InvalidOperation,
        NotFound,
        PlanTampered,
        StoreError,
    )

    text = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, Unauthorized):
        return Problem("forbidden", f"unauthorized: {text}", missing=list(exc.missing))
    if isinstance(exc, NotFound):  # (never the store's URL: a path or a host of the operator's)
        return Problem("not-found", _STORE_URL.sub("this store", text))
    if isinstance(exc, IdempotencyConflict):
        return Problem("idempotency-conflict", text)
    if isinstance(exc, AdmissionRefused):
        retry = max(1, round(exc.retry_after))
        return Problem("admission-refused", text, headers={"Retry-After": str(retry)}, limit=exc.limit)
    if isinstance(exc, DefinitionRefused):
        return Problem("definition-refused", text, reason=exc.reason)
    if isinstance(exc, (InvalidOperation, ApprovalVoid)):
        return Problem("invalid-operation", text)
    if isinstance(exc, ModelNotConfigured):
        return Problem("model-not-configured", text)
    if isinstance(exc, Refused):
        return Problem("signature-refused", f"[{exc.reason}] {exc}", reason=exc.reason)
    if isinstance(exc, StepError):
        return Problem("invalid-input", text, error_class=exc.error_class)
    if isinstance(exc, AccessPolicyError):
        return Problem("forbidden", f"the access policy cannot be used, so nothing is allowed: {text}")
    if isinstance(exc, PlanTampered):  # the run exists; its plan is not to be trusted: not the store's outage
        return Problem("plan-tampered", f"{text}; restore that row of the store's plans table from a backup (or "
                                        "delete it and submit the definition again)", plan=exc.digest)
    if isinstance(exc, StoreError):
        logging.getLogger("sealflow.server").warning("store error: %s", exc)
        return Problem("store-unavailable", "the state store did not answer; try again shortly",
                       headers={"Retry-After": "1"})
    return None


#: a store URL in a message (sqlite:///path, postgresql://host/...)
_STORE_URL = re.compile(r"\b(?:sqlite|postgres(?:ql)?|redis)(?:\+\w+)?://\S+?(?=[;,]?(?:\s|$))")
#: paths that carry a capability (a callback's token): never written out as they are
_CAPABILITY_PATH = re.compile(r"^(/v1/callbacks/)[^/]+")


def shown_path(path: str) -> str:
    """``path`` as logs and problem bodies show it: a callback's token replaced (it is a capability)."""
    return _CAPABILITY_PATH.sub(r"\1<token>", path)


def count(request: Request, exc: BaseException, problem: Problem) -> None:
    """Count a refusal in the runtime's metrics (``docs/operations.md``, "Metrics"): another tenant's run,
    approval or dead letter answered as an unknown one (``tenant_denied``) as a cross-tenant attempt; a
    member's missing permission answered so (``operation_denied``) and every 403 as a policy denial
    (``unauthorized``). Failed authentications are counted where they are refused (:mod:`.auth`)."""
    from sealflow.policy.operations import RunHidden

    runtime = getattr(request.app.state, "runtime", None)
    metrics = getattr(getattr(runtime, "telemetry", None), "metrics", None)
    if metrics is None:
        return
    if isinstance(exc, RunHidden):
        if exc.event == "tenant_denied":
            metrics.api_denied(cross_tenant=True)
        else:
            metrics.api_denied("unauthorized")
    elif problem.status == 403:
        metrics.api_denied("unauthorized")


#: the methods a route may serve
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def allowed(app: ASGIApp, scope: Scope) -> list[str]:
    """Every method some route of ``app`` serves on the request's path (and OPTIONS): each
    method is tried against every route (a route that holds others, an included router, answers for them)."""
    routes = getattr(app, "routes", ())
    methods = {m for m in METHODS
               if any(route.matches({**scope, "method": m, "type": "http"})[0] is Match.FULL for route in routes)}
    return sorted(methods | {"OPTIONS"}) if methods else []


def _http_kind(status: int) -> str:
    return {404: "not-found", 405: "method-not-allowed", 413: "body-too-large",
            415: "unsupported-media-type"}.get(status, "http-error")


#: what FastAPI says of a body its JSON decoder refused (not UTF-8, not JSON, nested too deeply, a number too long)
_UNPARSED = "There was an error parsing the body"


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as problem details."""

    @app.exception_handler(Problem)
    async def problem(request: Request, exc: Problem) -> JSONResponse:
        count(request, exc, exc)
        return exc.response(request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = _http_kind(exc.status_code)
        detail = exc.detail if isinstance(exc.detail, str) else TYPES[kind][1]
        headers = dict(exc.headers or {})
        if kind == "method-not-allowed":  # every method served on the path, not only the first route's
            headers["Allow"] = ", ".join(allowed(request.app.router, request.scope)) or headers.get("Allow", "")
            detail = f"{request.method} is not served on {shown_path(request.url.path)}; use {headers['Allow']}"
        if kind == "not-found" and detail == "Not Found":
            detail = f"no such resource: {request.method} {shown_path(request.url.path)}"
        elif exc.status_code == 400 and detail == _UNPARSED:  # FastAPI's words for any body json cannot read
            detail = ("the request body is not JSON this API can read: send UTF-8 JSON text, nested less than "
                      "about a thousand levels deep, with numbers of at most 4,300 digits")
        return Problem(kind, detail, status=exc.status_code if kind == "http-error" else None,
                       headers=headers).response(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"where": "/".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", "")}
                  for e in exc.errors()][:20]
        first = errors[0] if errors else {"where": "request", "message": "invalid"}
        return Problem("invalid-request", f"{first['where']}: {first['message']}", errors=errors).response(request)

    from sealflow.core.errors import SealflowError
    from sealflow.dsl.errors import DslError

    async def mapped(request: Request, exc: Exception) -> JSONResponse:
        problem = from_exception(exc)
        if problem is None:
            return internal(request, exc)
        count(request, exc, problem)
        return problem.response(request)

    app.add_exception_handler(SealflowError, mapped)
    app.add_exception_handler(DslError, mapped)
    app.add_exception_handler(Exception, internal)


def internal(request: Request, exc: BaseException) -> JSONResponse:
    """A bug of ours: logged with its traceback, answered without it."""
    logging.getLogger("sealflow.server").error("internal error on %s %s", request.method, shown_path(request.url.path),
                                               exc_info=exc)
    return Problem("internal", "an internal error occurred; it was logged on the server").response(request)


def documented() -> dict[int | str, dict[str, Any]]:
    """The error responses every operation may give, for the OpenAPI document."""
    statuses = sorted({status for status, _ in TYPES.values()})
    return {status: {"description": ", ".join(k for k, (s, _) in TYPES.items() if s == status),
                     "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
            for status in statuses}
