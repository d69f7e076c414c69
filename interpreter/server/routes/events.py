"""``POST /v1/events/{source}``: a signed event from a webhook provider (:mod:`sealflow.server.events`).
Authenticated by the source's Standard Webhooks signature, not by an API token."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from sealflow.server import events
from sealflow.server.problems import Problem

router = APIRouter(tags=["events"])
log = logging.getLogger("sealflow.events")


@router.post("/v1/events/{source}", summary="Receive a signed event (Standard Webhooks)")
async def receive(source: str, request: Request) -> JSONResponse:
    body = await request.body()
    rt, trust = request.app.state.runtime, request.app.state.trust
    metrics = getattr(getattr(rt, "telemetry", None), "metrics", None)
    try:
        answer, duplicate = events.receive(rt, trust, source, request.headers, body)
    except events.EventRefused as exc:
        log.warning("event from %r refused: %s", source, exc.message)
        if metrics is not None:
            metrics.events.labels(source if exc.kind != "not-found" else "unknown", "refused").inc()
        raise Problem(exc.kind, exc.message) from None
    if metrics is not None:
        metrics.events.labels(source, "duplicate" if duplicate else "accepted").inc()
    waiting = answer.get("waiting") or []
    applied = any(r.get("result") == "started" for r in answer.get("results") or []) \
        or any(w.get("result") == "taken" for w in waiting)
    if not applied and any(w.get("result") == "refused" for w in waiting):  # it matched a wait, its data did not
        refused = next(w for w in waiting if w.get("result") == "refused")
        raise Problem("invalid-event", str(refused.get("error")), waiting=waiting, id=answer.get("id"))
    return JSONResponse(answer, status_code=202,
                        headers={"Sealflow-Event-Duplicate": "true"} if duplicate else None)
