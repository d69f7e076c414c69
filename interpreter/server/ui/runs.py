"""The ``/ui/runs`` pages: a run's page (its steps, graph, model calls, budgets and audit trail; cancel and
redrive for operators, each with a confirmation, through the runtime's own permission checks) and its live feed
for the page's script (the same feed as ``GET /v1/runs/{id}/events``, on the session instead of a token).

The page works without JavaScript; ``static/live.js`` only follows the feed and updates the states it shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent

from sealflow.core.states import RUN_FINAL
from sealflow.policy.operations import Operation, may
from sealflow.runtime import readiness
from sealflow.runtime.status import status_json
from sealflow.server import problems
from sealflow.server.problems import Problem
from sealflow.server.routes import runs as runs_api
from sealflow.server.ui import runview, timeline
from sealflow.server.ui.graph import MAX_DRAWN, svg
from sealflow.server.ui.pages import page, posted, secure, session_of, speak, viewer
from sealflow.server.ui.sessions import Session
from sealflow.store.errors import PlanTampered

router = APIRouter(prefix="/ui/runs", include_in_schema=False)

NOTICES = {"cancelled": "Cancel requested: the run stops after its running step.",
           "redriven": "Redriven: its failed step runs again."}


def _unknown(request: Request, session: Session, run_id: str, exc: Exception) -> Response:
    """The page for a run that is unknown or that the session may not read (they look the same)."""
    problem = problems.from_exception(exc)
    if problem is None:
        raise exc
    problems.count(request, exc, problem)
    return page("base.html", 404, session=session,
                error=f"no run {run_id[:80]} that you may read; the Runs page lists the runs you may see")


def _plan(rt: Any, digest: str) -> tuple[Any, str | None]:
    """The run's plan, or None and why it is not shown."""
    try:
        return rt.plan(digest), None
    except PlanTampered:  # nothing of a plan that is not what its digest says is shown (engine/integrity.py)
        return None, "not shown: the run's stored plan does not match its digest, so it is not to be trusted"
    except Exception:  # noqa: BLE001 - a page still shows the run without its graph
        return None, "the plan is not available"


@router.get("/{run_id}")
def run_page(request: Request, run_id: str, notice: str | None = None, step: str | None = None,
             graph: str | None = None) -> Response:
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    try:
        status = rt.status(run_id, tenant=session.tenant, actor=session.principal)
    except Exception as exc:  # noqa: BLE001 - unknown and unreadable runs look the same
        return _unknown(request, session, run_id, exc)
    try:
        trail = rt.audit(run_id, tenant=session.tenant, actor=session.principal)
        audit_note = None
    except Exception as exc:  # noqa: BLE001 - reading the audit trail needs audit:read
        # (not counted as a denial: the page shows the run it may read, and notes the trail it may not)
        if problems.from_exception(exc) is None:
            raise
        trail, audit_note = [], "You may not read this run's audit trail (it needs the audit:read permission)."
    # (a tampered plan: said in place of a wait; tracebacks, outputs, model calls: rt.status authorised runs:read)
    run = status_json(readiness.note_left(rt, status, here=False), traces=True)
    plan, plan_note = _plan(rt, status.run.plan_digest)
    steps = runview.steps(run, plan)
    unsectioned = runview.sectioned(steps, step)
    drawn = plan is not None and (len(plan.steps) <= MAX_DRAWN or graph == "all")
    operator = {"cancel": run["state"] not in RUN_FINAL and bool(may(rt.access, status.run, session.principal,
                                                                       Operation.CANCEL)),
                "redrive": run["state"] == "failed" and bool(may(rt.access, status.run, session.principal,
                                                                   Operation.REDRIVE))}
    hrefs = {s["id"]: s["href"] for s in steps}
    drawn_timeline, timeline_left_out = timeline.svg(run, now=rt.clock.now())
    return page("run.html", session=session, run=run, steps=steps, plan_note=plan_note,
                timeline=drawn_timeline, timeline_left_out=timeline_left_out,
                graph=svg(plan, {s["id"]: s["state"] for s in steps}, hrefs) if drawn else None,
                graph_size=len(plan.steps) if plan is not None else 0, unsectioned=unsectioned, hrefs=hrefs,
                audit_shown=min(len(trail), runview.MAX_EVENTS), audit_total=len(trail),
                input_text=runview.pretty(run["input"]), output_text=runview.pretty(run.get("output")),
                calls=[dict(c, step=s["id"], anchor=s["anchor"]) for s in steps for c in s["calls"]],
                budgets=runview.budgets(run, plan, (status.run.created_at, status.run.updated_at)),
                audit=runview.audit_groups(trail), audit_note=audit_note, operator=operator,
                created=runview.when(status.run.created_at), updated=runview.when(status.run.updated_at),
                live=run["state"] not in RUN_FINAL, notice=NOTICES.get(notice or ""))


async def _operate(request: Request, run_id: str, verb: str) -> Response:
    """Cancel or redrive ``run_id`` as the session's principal: the CSRF token, then the confirmation, then the
    runtime's permission check (``runs:cancel`` or its initiator; ``dlq:redrive``)."""
    got = await posted(request)
    if isinstance(got, Response):
        return got
    session, form = got
    rt = request.app.state.runtime
    if form.get("confirm") != "yes":
        return page("base.html", 422, session=session,
                    error=f"nothing was done: tick the box that confirms you mean to {verb} run {run_id[:80]}")
    try:
        if verb == "cancel":
            rt.cancel(run_id, actor=session.principal, tenant=session.tenant, reason=form.get("reason", ""))
        else:
            rt.dlq_redrive(run_id, actor=session.principal, tenant=session.tenant)
    except Exception as exc:  # noqa: BLE001 - what the API would answer, as a page
        problem = exc if isinstance(exc, Problem) else problems.from_exception(exc)
        if problem is None:
            raise
        problems.count(request, exc, problem)
        if problem.status == 404:
            return _unknown(request, session, run_id, exc)
        return page("base.html", problem.status, session=session, error=f"refused: {speak(problem.detail)}")
    done = "cancelled" if verb == "cancel" else "redriven"
    return secure(RedirectResponse(f"/ui/runs/{run_id}?notice={done}", status_code=303))


@router.post("/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    return await _operate(request, run_id, "cancel")


@router.post("/{run_id}/redrive")
async def redrive(request: Request, run_id: str) -> Response:
    return await _operate(request, run_id, "redrive")


@router.get("/{run_id}/events", response_class=EventSourceResponse)
async def follow(request: Request, run_id: str) -> AsyncIterator[ServerSentEvent]:
    """The run's live feed for its page (``static/live.js``): as ``GET /v1/runs/{id}/events``, authorised on the
    session (an unknown or unreadable run: the feed ends at once)."""
    session = session_of(request)
    if session is None:
        return
    rt = request.app.state.runtime
    try:
        rt.authorize(run_id, actor=session.principal, tenant=session.tenant, operation=Operation.READ)
    except Exception as exc:  # noqa: BLE001 - unknown and unreadable runs look the same
        if problems.from_exception(exc) is None:
            raise
        return
    last = request.headers.get("last-event-id", "")
    async for event in runs_api.feed(rt, run_id, request, int(last) if last.isdigit() else 0):
        # (each audit event unnamed, so the page's one ``message`` handler sees them all; ``end`` stays named)
        yield event if event.event == "end" else ServerSentEvent(id=event.id, data=event.data)
