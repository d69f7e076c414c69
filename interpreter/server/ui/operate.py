"""The operators' pages: dead letters (each with a redrive form, posted to the run page's redrive), circuit breakers
(their state; a reset, with a confirmation), schedules (the next fire time of each) and the definitions registry
(signer, digest; the security diff between two versions of a workflow).

What every tenant shares (breakers, schedules, the registry) is for the access policy's operators only; the dead
letters are the tenant's, for those with ``dlq:read``. Each check is the runtime's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from sealflow.dsl.diff import diff_plans
from sealflow.policy.operations import Operation, OperatorOnly, may_see_tenant, require_operator
from sealflow.server import problems
from sealflow.server.ui import runview
from sealflow.server.ui.pages import page, posted, secure, speak, viewer
from sealflow.store.errors import NotFound, PlanTampered

router = APIRouter(prefix="/ui", include_in_schema=False)

OPERATORS_ONLY = "Only an operator of the access policy may see this page: what it shows is shared by every tenant."


@router.get("/dlq")
def dead_letters(request: Request, notice: str | None = None) -> Response:
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    letters = rt.dlq_list(tenant=session.tenant, actor=session.principal)
    rows = [{"run_id": d.run_id, "step": d.step_id, "reason": d.reason, "error_class": d.error_class,
             "status": d.status, "redrives": d.redrive_count, "since": runview.when(d.created_at)} for d in letters]
    return page("dlq.html", session=session, letters=rows,
                may_redrive=may_see_tenant(rt.access, session.tenant, session.principal, Operation.REDRIVE),
                notice={"reset": "Reset."}.get(notice or ""))


def _shared(request: Request, read: str, template: str, show: Callable[[dict[str, Any]], dict[str, Any]],
            **more: Any) -> Response:
    """A page of what the runtime's ``read`` gives the session's principal (an operator; else refused), each row
    with what ``show`` adds."""
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    try:
        rows = [dict(row, **show(row)) for row in getattr(rt, read)(actor=session.principal)]
    except OperatorOnly:
        return page("base.html", 403, session=session, error=OPERATORS_ONLY)
    return page(template, session=session, rows=rows, **more)


@router.get("/breakers")
def breakers(request: Request, notice: str | None = None) -> Response:
    return _shared(request, "breaker_list", "breakers.html",
                   lambda row: {"since": runview.when(row.get("updated_at")),
                                "probe_in": runview.seconds(row.get("probe_in_s"))},
                   notice=f"Breaker {notice[:80]} reset: closed." if notice else None)


@router.post("/breakers/{name}/reset")
async def reset_breaker(request: Request, name: str) -> Response:
    got = await posted(request)
    if isinstance(got, Response):
        return got
    session, form = got
    if form.get("confirm") != "yes":
        return page("base.html", 422, session=session,
                    error=f"nothing was done: tick the box that confirms you mean to reset breaker {name[:80]}")
    try:
        done = request.app.state.runtime.breaker_reset(name, actor=session.principal, tenant=session.tenant)
    except OperatorOnly:
        return page("base.html", 403, session=session, error=OPERATORS_ONLY)
    if not done:
        return page("base.html", 404, session=session, error=f"no circuit breaker named {name[:80]!r}")
    return secure(RedirectResponse(f"/ui/breakers?notice={name}", status_code=303))


@router.get("/schedules")
def schedules(request: Request) -> Response:
    return _shared(request, "schedules", "schedules.html", lambda row: {"next": runview.when(row.get("next_at"))})


def _diff(rt: Any, old: str, new: str) -> tuple[list[dict[str, Any]] | None, str | None, tuple[Any, Any] | None]:
    """The security diff from plan ``old`` to plan ``new`` (digests the store holds), or why there is none."""
    try:
        before, after = rt.plan(old), rt.plan(new)
    except PlanTampered:
        return None, "a stored plan does not match its digest: it is not to be trusted, so it is not compared", None
    except NotFound:
        return None, "the store holds no plan with that digest: pick two versions from the list", None
    if before.name != after.name:
        return None, "pick two versions of one workflow", None
    return [f.as_dict() for f in diff_plans(before, after)], None, (before, after)


@router.get("/definitions")
def definitions(request: Request, old: str | None = None, new: str | None = None) -> Response:
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    try:
        require_operator(rt.access, session.principal, "read the definition registry")
    except OperatorOnly:
        return page("base.html", 403, session=session, error=OPERATORS_ONLY)
    if request.app.state.trust is not None:
        rows = [{"name": d.name, "version": d.version, "digest": d.digest, "signer": d.signer,
                 "since": runview.when(d.first_seen), "active": d.active, "pinned": d.pinned, "refused": d.refused}
                for d in rt.definitions()]
    else:
        rows = [{"name": name, "version": version, "digest": digest, "signer": "unsigned",
                 "since": runview.when(at), "active": False, "pinned": False, "refused": None}
                for name, version, digest, at in rt.stored_plans()]
    findings, why, pair = (None, None, None)
    if old and new:
        try:
            findings, why, pair = _diff(rt, old[:100], new[:100])
        except Exception as exc:  # noqa: BLE001 - a store that does not answer: said as a page
            problem = problems.from_exception(exc)
            if problem is None:
                raise
            why = speak(problem.detail)
    return page("definitions.html", session=session, definitions=rows, findings=findings, diff_note=why,
                old=old or "", new=new or "",
                compared=(f"{pair[0].name} v{pair[0].version}", f"v{pair[1].version}") if pair else None)
