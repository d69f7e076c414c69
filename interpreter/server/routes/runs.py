"""``/v1/runs``: submit (idempotent by ``Idempotency-Key``), list, show, cancel, audit."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.sse import EventSourceResponse, ServerSentEvent

from sealflow.core.states import RUN_FINAL
from sealflow.policy.operations import Operation
from sealflow.runtime import readiness
from sealflow.runtime.status import status_json
from sealflow.server import submitting
from sealflow.server.deps import Caller, Runtime, Trust
from sealflow.server.problems import Problem
from sealflow.server.schemas import (
    NAME,
    RUN_ID,
    CancelRequest,
    ResolveRequest,
    RunPage,
    RunSummary,
    SubmitRequest,
    Submitted,
)
from sealflow.store.records import RunQuery
from sealflow.store.tags import parse_tag

router = APIRouter(prefix="/v1/runs", tags=["runs"])

RunId = Annotated[str, Path(pattern=RUN_ID, description="A run id (run_...).")]
STATES = ("queued", "running", "waiting", "cancelling", "compensating", "completed", "failed", "cancelled",
          "timed_out", "quarantined")
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,200}$"


def _json_input(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        raise Problem("invalid-request", "input: not JSON (NaN and Infinity are not JSON numbers)") from None
    return value


@router.post("", status_code=201, response_model=Submitted, summary="Submit a run")
def submit(body: SubmitRequest, caller: Caller, rt: Runtime, trust: Trust, response: Response,
           idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY)] = None) -> Submitted:
    """Create a run as the caller, in the caller's tenant. The same ``Idempotency-Key`` with the same
    workflow and input returns the same run; with another input it is a 409."""
    value = _json_input(body.input)
    resolved = submitting.resolve(rt, body, trust, caller.principal)
    run_id = rt.submit(resolved.plan, value, initiator=caller.principal, tenant=caller.tenant,
                       idempotency_key=idempotency_key, signer=resolved.signer, source=resolved.source,
                       tags=body.tags)
    run = rt.submitted(run_id, initiator=caller.principal, tenant=caller.tenant)
    response.headers["Location"] = f"/v1/runs/{run_id}"
    return Submitted(run_id=run.id, state=run.state, workflow=run.workflow, version=run.workflow_version,
                     plan_digest=run.plan_digest)


def parse_cursor(text: str | None) -> tuple[float, str] | None:
    if text is None:
        return None
    try:
        at, run_id = json.loads(base64.urlsafe_b64decode(text.encode() + b"=" * (-len(text) % 4)))
        if not isinstance(at, (int, float)) or not math.isfinite(at) or not isinstance(run_id, str):
            raise ValueError
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise Problem("invalid-request", "cursor: not a cursor this API gave (pass next_cursor as it is)") from None
    return float(at), run_id


def encode_cursor(at: float, run_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at, run_id]).encode()).decode().rstrip("=")


def _epoch(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


@router.get("", response_model=RunPage, summary="List the tenant's runs")
def list_runs(caller: Caller, rt: Runtime,
              workflow: Annotated[str | None, Query(pattern=NAME)] = None,
              state: Annotated[list[str] | None, Query(description=f"One of {', '.join(STATES)}; repeatable.")] = None,
              tenant: Annotated[str | None, Query(max_length=63, description="Only the caller's tenant has runs.")
                                ] = None,
              initiator: Annotated[str | None, Query(max_length=200)] = None,
              version: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="The workflow's version.")] = None,
              tag: Annotated[list[str] | None, Query(max_length=300, description="name=value: only runs submitted "
                                                     "with this tag; repeatable (every one must match).")] = None,
              created_after: dt.datetime | None = None, created_before: dt.datetime | None = None,
              limit: Annotated[int, Query(ge=1, le=200)] = 50,
              cursor: Annotated[str | None, Query(max_length=400)] = None) -> RunPage:
    """The runs of the caller's tenant, newest first, by keyset pages (``next_cursor``)."""
    bad = [s for s in state or () if s not in STATES]
    if bad:
        raise Problem("invalid-request", f"state: {bad[0][:40]!r} is not a run state; use one of {', '.join(STATES)}")
    after = parse_cursor(cursor)
    try:
        tags = tuple(parse_tag(t) for t in tag or ())
    except ValueError as exc:
        raise Problem("invalid-request", f"tag: {exc}") from None
    if tenant is not None and tenant != caller.tenant:  # another tenant's runs look like none
        return RunPage(runs=[])
    try:
        query = RunQuery(tenant=caller.tenant, workflow=workflow, states=tuple(state) if state else None,
                         initiator=initiator, version=version, created_after=_epoch(created_after),
                         created_before=_epoch(created_before), after=after, limit=limit, tags=tags)
    except (OverflowError, ValueError):
        raise Problem("invalid-request", "created_after/created_before: not a time this API can compare") from None
    runs = rt.runs(query, actor=caller.principal)
    page = [RunSummary(run_id=r.id, workflow=r.workflow, version=r.workflow_version, state=r.state, tenant=r.tenant,
                       initiator=r.initiator, created_at=r.created_at, updated_at=r.updated_at,
                       error_class=r.error_class) for r in runs]
    last = runs[-1] if len(runs) == limit else None
    return RunPage(runs=page, next_cursor=encode_cursor(last.created_at, last.id) if last is not None else None)


@router.get("/{run_id}", response_model=dict[str, Any], summary="Show a run (as `sealflow status --json`)")
def show(run_id: RunId, caller: Caller, rt: Runtime,
         children_offset: Annotated[int, Query(ge=0, description="A fan-out's child runs from this one on "
                                                                  "(100 per page; `children.next_offset`)")] = 0
         ) -> dict[str, Any]:
    found = rt.status(run_id, tenant=caller.tenant, actor=caller.principal, children_offset=children_offset)
    # a step that workers took and left (they lack what it needs) says so, from the store (readiness.note_left);
    # the caller may read the run (rt.status authorised runs:read): its failures' tracebacks are shown
    return status_json(readiness.note_left(rt, found, here=False), traces=True)


@router.post("/{run_id}/cancel", response_model=dict[str, Any], summary="Cancel a run")
def cancel(run_id: RunId, caller: Caller, rt: Runtime, body: CancelRequest | None = None) -> dict[str, Any]:
    reason = body.reason if body is not None else ""
    return status_json(rt.cancel(run_id, actor=caller.principal, tenant=caller.tenant, reason=reason))


@router.post("/{run_id}/resolve", response_model=dict[str, Any], summary="Decide a lost attempt's unknown outcome")
def resolve(run_id: RunId, body: ResolveRequest, caller: Caller, rt: Runtime) -> dict[str, Any]:
    """A run waiting because an action that cannot deduplicate lost its attempt mid-call (it may or may not
    have acted): run it again, mark it succeeded with an output, or fail it; needs ``runs:resolve``."""
    output = _json_input(body.output) if body.decision == "succeeded" else body.output
    return status_json(rt.resolve(run_id, body.decision, actor=caller.principal, tenant=caller.tenant,
                                  reason=body.reason, output=output))


@router.get("/{run_id}/audit", response_model=list[dict[str, Any]], summary="A run's audit trail")
def audit(run_id: RunId, caller: Caller, rt: Runtime) -> list[dict[str, Any]]:
    return [dataclasses.asdict(a) for a in rt.audit(run_id, tenant=caller.tenant, actor=caller.principal)]


#: how often the live feed looks for what is new (seconds), and how long one connection lasts at most (then the
#: client reconnects with Last-Event-ID and misses nothing)
FEED_POLL_S = 0.5
FEED_MAX_S = 900.0


def _readable(run_id: RunId, caller: Caller, rt: Runtime) -> str:
    """The run's id, once the caller may read it (else the unknown-run answer, before the stream begins)."""
    rt.authorize(run_id, actor=caller.principal, tenant=caller.tenant, operation=Operation.READ)
    return run_id


@router.get("/{run_id}/events", response_class=EventSourceResponse, summary="Follow a run live (Server-Sent Events)")
async def follow(run_id: Annotated[str, Depends(_readable)], rt: Runtime, request: Request,
                 last_event_id: Annotated[str | None, Header(max_length=20)] = None) -> AsyncIterator[ServerSentEvent]:
    """What happens to the run, as it happens: each audit event of the run (its state changes, steps, waits,
    approvals) as an SSE event named after it, with its audit id as the SSE id, so a client that reconnects with
    ``Last-Event-ID`` misses nothing; an ``end`` event once the run is final. One connection lasts at most
    15 minutes; authorised like ``GET /v1/runs/{id}`` (``runs:read``, or its initiator)."""
    after = int(last_event_id) if last_event_id is not None and last_event_id.isdigit() else 0
    async for event in feed(rt, run_id, request, after):
        yield event


async def feed(rt: Any, run_id: str, request: Request, after: int) -> AsyncIterator[ServerSentEvent]:
    """The run's live feed from audit event ``after`` on, for a caller authorised to read it (the API's, and the
    run page's: :mod:`sealflow.server.ui.runs`)."""
    began = time.monotonic()
    while True:
        items, state = await run_in_threadpool(rt.feed, run_id, after=after)
        for item in items:
            after = item["id"]
            yield ServerSentEvent(id=str(item["id"]), event=item["event"], data=item)
        if not items and state in RUN_FINAL:
            yield ServerSentEvent(event="end", data={"run_id": run_id, "state": state})
            return
        if time.monotonic() - began > FEED_MAX_S or await request.is_disconnected():
            return
        if not items:
            await anyio.sleep(FEED_POLL_S)
